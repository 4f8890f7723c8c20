// Reading the AWS shared credentials and config files.
#include "backend/s3/aws_config.hpp"

#include <cctype>
#include <cstdlib>
#include <fstream>

namespace ferry::detail {
namespace {

std::string trim(std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    std::size_t i = 0;
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    return s.substr(i);
}

std::string home(const env_lookup& env) {
    auto h = env("HOME");
    return h ? *h : std::string();
}

}  // namespace

env_lookup process_environment() {
    return [](const std::string& name) -> std::optional<std::string> {
        const char* v = std::getenv(name.c_str());
        if (!v) return std::nullopt;
        return std::string(v);
    };
}

std::map<std::string, std::string> read_ini_section(const std::string& path, const std::string& section) {
    std::map<std::string, std::string> out;
    std::ifstream in(path);
    if (!in) return out;
    std::string line;
    bool inside = false;
    while (std::getline(in, line)) {
        line = trim(line);
        if (line.empty() || line[0] == '#' || line[0] == ';') continue;
        if (line.front() == '[') {
            auto close = line.find(']');
            std::string name = trim(line.substr(1, close == std::string::npos ? std::string::npos : close - 1));
            // "[profile  dev]" and "[profile dev]" are the same section.
            if (name.rfind("profile", 0) == 0 && name.size() > 7 && std::isspace(static_cast<unsigned char>(name[7])))
                name = "profile " + trim(name.substr(7));
            inside = name == section;
            continue;
        }
        if (!inside) continue;
        auto eq = line.find('=');
        if (eq == std::string::npos) continue;  // nested sections (s3 = ...) keep their own lines
        std::string key = trim(line.substr(0, eq));
        for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        out[key] = trim(line.substr(eq + 1));
    }
    return out;
}

std::string aws_profile::get(const std::string& key) const {
    if (auto it = credentials.find(key); it != credentials.end()) return it->second;
    if (auto it = config.find(key); it != config.end()) return it->second;
    return {};
}

aws_profile load_aws_profile(const env_lookup& env, const std::string& name) {
    aws_profile p;
    p.name = name;
    if (p.name.empty()) p.name = env("AWS_PROFILE").value_or("");
    if (p.name.empty()) p.name = env("AWS_DEFAULT_PROFILE").value_or("default");
    p.credentials_path = env("AWS_SHARED_CREDENTIALS_FILE").value_or(home(env) + "/.aws/credentials");
    p.config_path = env("AWS_CONFIG_FILE").value_or(home(env) + "/.aws/config");
    p.credentials = read_ini_section(p.credentials_path, p.name);
    p.config = read_ini_section(p.config_path, p.name == "default" ? "default" : "profile " + p.name);
    return p;
}

}  // namespace ferry::detail
