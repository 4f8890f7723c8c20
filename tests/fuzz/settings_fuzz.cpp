// libFuzzer target: the FERRY_* settings parser. The input is lines of NAME=VALUE (a line
// without '=' is a value for a variable picked by its first byte). Every value must either
// parse or throw settings_error naming the variable (usage_error for an unknown name); what
// parses must be in range and survive a round trip.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "ferry/error.hpp"
#include "ferry/settings.hpp"
#include "fuzz_util.hpp"

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

void apply_one(ferry::settings& s, std::string_view name, std::string_view value) {
    // apply_setting stores some values before it range-checks them (see
    // tests/reliability/settings_regression_test.cpp): work on a copy until that is fixed.
    ferry::settings before = s;
    try {
        ferry::apply_setting(s, name, value);
    } catch (const ferry::settings_error& e) {
        s = before;
        check(e.variable() == name);
        check(std::string_view(e.what()).find(name) != std::string_view::npos);
    } catch (const ferry::usage_error&) {
        s = before;
        // An unknown variable name; known ones must fail with settings_error.
        auto names = ferry::settings::variable_names();
        for (auto n : names) check(n != name);
    }
}

void check_ranges(const ferry::settings& s) {
    check(s.threads <= 1024);
    check(s.staging_buffers >= 2 && s.staging_buffers <= 64);
    check(s.task_size == 0 || s.task_size >= 4096);
    check(s.staging_buffer_size == 0 ||
          (s.staging_buffer_size >= 65536 && s.staging_buffer_size % 4096 == 0));
    check(s.staging_memory_limit == 0 || s.staging_memory_limit >= (1u << 20));
    check(!s.cufile_library.empty());
    ferry::settings r = s.resolved();
    check(r.threads > 0 && r.task_size > 0 && r.staging_buffer_size > 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    const auto names = ferry::settings::variable_names();

    // parse_size alone: a value it accepts prints back to the same number.
    try {
        std::size_t v = ferry::parse_size("FERRY_FUZZ", text);
        check(ferry::parse_size("FERRY_FUZZ", std::to_string(v)) == v);
    } catch (const ferry::settings_error& e) {
        check(e.variable() == "FERRY_FUZZ");
    }

    ferry::settings s;
    std::map<std::string, std::string, std::less<>> env;
    ferry::fuzz::split(text, '\n', 64, [&](std::string_view line) {
        std::string_view name, value;
        if (auto eq = line.find('='); eq != std::string_view::npos) {
            name = line.substr(0, eq);
            value = line.substr(eq + 1);
        } else if (!line.empty()) {
            name = names[static_cast<unsigned char>(line[0]) % names.size()];
            value = line.substr(1);
        } else {
            return;
        }
        apply_one(s, name, value);
        env[std::string(name)] = std::string(value);
    });
    check_ranges(s);

    // The same variables through from_lookup (how the environment is read).
    try {
        ferry::settings e = ferry::settings::from_lookup([&](std::string_view n) -> std::optional<std::string> {
            auto it = env.find(n);
            if (it == env.end()) return std::nullopt;
            return it->second;
        });
        check_ranges(e);
    } catch (const ferry::settings_error& e) {
        check(env.count(e.variable()) == 1);
    }
    return 0;
}
