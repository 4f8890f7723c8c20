// Real servers for the remote-source tests, each started by the test on 127.0.0.1 and stopped
// when the owning object goes (also when the test fails): nginx with a generated config, the
// fault-injecting server (http/fault_server.py), moto's S3 server and the credential endpoints
// (s3/credential_server.py). Every wait is bounded in time.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace ferry::test {

/// A port that was free a moment ago (bound to 0, read, closed).
inline int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        if (fd >= 0) ::close(fd);
        throw std::runtime_error("no free port");
    }
    int port = ntohs(a.sin_port);
    ::close(fd);
    return port;
}

inline bool port_open(int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
}

inline std::string python() { return std::getenv("PYTHON") ? std::getenv("PYTHON") : "python3"; }
inline std::string backend_test_dir() { return std::string(FERRY_SOURCE_DIR) + "/tests/backend"; }

/// A child process, killed (TERM, then KILL after 5 s) and reaped when this goes.
class child {
public:
    child(std::vector<std::string> argv, std::map<std::string, std::string> env = {}, bool capture_stdout = false) {
        int out[2] = {-1, -1};
        if (capture_stdout && ::pipe(out) != 0) throw std::runtime_error("pipe failed");
        pid_ = ::fork();
        if (pid_ < 0) throw std::runtime_error("fork failed");
        if (pid_ == 0) {
            ::setpgid(0, 0);
            // A test process killed from outside (a timeout) takes its servers with it.
            ::prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (capture_stdout) {
                ::dup2(out[1], 1);
                ::close(out[0]);
                ::close(out[1]);
            }
            int devnull = ::open("/dev/null", O_RDWR);
            if (!capture_stdout) ::dup2(devnull, 1);
            if (!std::getenv("FERRY_TEST_SERVER_LOGS")) ::dup2(devnull, 2);
            for (auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
            std::vector<char*> args;
            for (auto& a : argv) args.push_back(a.data());
            args.push_back(nullptr);
            ::execvp(args[0], args.data());
            ::_exit(127);
        }
        if (capture_stdout) {
            ::close(out[1]);
            out_ = out[0];
        }
    }
    ~child() { stop(); }
    child(const child&) = delete;
    child& operator=(const child&) = delete;

    /// A line of the child's standard output, waiting at most `seconds`; "" at timeout or EOF.
    std::string read_line(double seconds) {
        std::string line;
        auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        while (std::chrono::steady_clock::now() < deadline) {
            pollfd p{out_, POLLIN, 0};
            if (::poll(&p, 1, 100) <= 0) continue;
            char c;
            if (::read(out_, &c, 1) != 1) break;
            if (c == '\n') return line;
            line += c;
        }
        return line;
    }

    bool running() {
        if (pid_ <= 0) return false;
        int st;
        return ::waitpid(pid_, &st, WNOHANG) == 0;
    }

    void stop() {
        if (out_ >= 0) ::close(out_), out_ = -1;
        if (pid_ <= 0) return;
        ::kill(-pid_, SIGTERM);
        ::kill(pid_, SIGTERM);
        for (int i = 0; i < 50; ++i) {
            int st;
            if (::waitpid(pid_, &st, WNOHANG) == pid_) {
                pid_ = -1;
                return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        ::kill(-pid_, SIGKILL);
        ::kill(pid_, SIGKILL);
        int st;
        ::waitpid(pid_, &st, 0);
        pid_ = -1;
    }

private:
    pid_t pid_ = -1;
    int out_ = -1;
};

/// Waits (at most `seconds`) until something listens on 127.0.0.1:port.
inline bool wait_for_port(int port, double seconds, child* c = nullptr) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
        if (port_open(port)) return true;
        if (c && !c->running()) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
}

inline std::string nginx_binary() {
    if (const char* root = std::getenv("NGINX_ROOT")) return std::string(root) + "/usr/sbin/nginx";
    for (const char* p : {"/usr/sbin/nginx", "/usr/bin/nginx"})
        if (std::filesystem::exists(p)) return p;
    return {};
}

/// Why nginx cannot be started here ("" when it can).
inline std::string nginx_missing() {
    std::string bin = nginx_binary();
    if (bin.empty()) return "nginx is not installed (scripts/deps.sh installs it)";
    if (!std::filesystem::exists(bin)) return bin + " does not exist (NGINX_ROOT names unpacked nginx packages)";
    return "";
}

/// Why moto's S3 server cannot be started here ("" when it can): its modules are looked up once,
/// so a machine without them skips at once instead of waiting out a start that cannot happen.
inline const std::string& moto_missing() {
    static const std::string why = [] {
        std::string cmd = python() + " -c 'import moto.server, flask, flask_cors' >/dev/null 2>&1";
        return std::system(cmd.c_str()) == 0
                   ? std::string()
                   : std::string("moto's S3 server is not installed (pip install 'moto[server]'; scripts/deps.sh "
                                 "installs it)");
    }();
    return why;
}

/// Whether a missing server fails a test instead of skipping it: FERRY_REQUIRE_SERVERS=1, as CI
/// sets, where every server is installed and a skip would hide a broken install.
inline bool servers_required() {
    const char* v = std::getenv("FERRY_REQUIRE_SERVERS");
    return v && std::string(v) == "1";
}

/// nginx serving `root` on a free 127.0.0.1 port, in the foreground, with a temporary prefix;
/// over TLS when `cert` and `key` (PEM files) are given.
class nginx_server {
public:
    explicit nginx_server(const std::string& root, const std::string& cert = {}, const std::string& key = {}) {
        std::string bin = nginx_binary();
        if (bin.empty()) throw std::runtime_error("nginx is not installed (scripts/deps.sh installs it)");
        for (int attempt = 0; attempt < 5; ++attempt) {
            port_ = free_port();
            std::string conf = prefix_ / "nginx.conf";
            std::filesystem::create_directories(prefix_ / "logs");
            std::ofstream(conf) << "daemon off;\nmaster_process off;\nworker_processes 1;\n"
                                << "error_log " << prefix_ / "logs/error.log" << " warn;\npid " << prefix_ / "nginx.pid"
                                << ";\nevents { worker_connections 256; }\nhttp {\n"
                                << "  access_log off;\n  sendfile on;\n  keepalive_requests 100000;\n"
                                << "  client_body_temp_path " << prefix_.path() << "/body;\n"
                                << "  proxy_temp_path " << prefix_.path() << "/proxy;\n"
                                << "  fastcgi_temp_path " << prefix_.path() << "/fastcgi;\n"
                                << "  uwsgi_temp_path " << prefix_.path() << "/uwsgi;\n"
                                << "  scgi_temp_path " << prefix_.path() << "/scgi;\n"
                                << "  server {\n    listen 127.0.0.1:" << port_ << (cert.empty() ? "" : " ssl")
                                << ";\n" << (cert.empty() ? "" : "    ssl_certificate " + cert + ";\n    ssl_certificate_key " + key + ";\n")
                                << "    root " << root
                                << ";\n    location / { }\n  }\n}\n";
            proc_ = std::make_unique<child>(std::vector<std::string>{bin, "-p", prefix_.path(), "-e", prefix_ / "logs/error.log", "-c", conf});
            if (wait_for_port(port_, 10, proc_.get())) return;
            proc_.reset();  // lost the port to someone else: try another
        }
        throw std::runtime_error("nginx did not start; see " + prefix_ / "logs/error.log");
    }
    int port() const { return port_; }
    std::string url(const std::string& name) const { return "http://127.0.0.1:" + std::to_string(port_) + "/" + name; }

private:
    temp_dir prefix_;
    int port_ = 0;
    std::unique_ptr<child> proc_;
};

/// A Python server script that prints "PORT <n>" once it listens.
class python_server {
public:
    python_server(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
        args.insert(args.begin(), python());
        proc_ = std::make_unique<child>(args, env, true);
        std::string line = proc_->read_line(20);
        if (line.rfind("PORT ", 0) != 0) throw std::runtime_error("server did not start: " + args[1]);
        port_ = std::stoi(line.substr(5));
    }
    int port() const { return port_; }
    std::string url(const std::string& path = "") const {
        return "http://127.0.0.1:" + std::to_string(port_) + path;
    }

private:
    std::unique_ptr<child> proc_;
    int port_ = 0;
};

/// moto's S3 server (python3 -m moto.server) on a free port.
class moto_server {
public:
    explicit moto_server(std::map<std::string, std::string> env = {}) {
        for (int attempt = 0; attempt < 5; ++attempt) {
            port_ = free_port();
            proc_ = std::make_unique<child>(
                std::vector<std::string>{python(), "-m", "moto.server", "-H", "127.0.0.1", "-p", std::to_string(port_)},
                env);
            if (wait_for_port(port_, 30, proc_.get())) return;
            proc_.reset();
        }
        throw std::runtime_error("moto server did not start (pip install 'moto[server]')");
    }
    int port() const { return port_; }
    std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

private:
    std::unique_ptr<child> proc_;
    int port_ = 0;
};

}  // namespace ferry::test

/// Skips the test (or fails it, where servers_required()) when `why` names something missing.
#define FERRY_NEED_SERVER(why)                                                                      \
    do {                                                                                            \
        if (const std::string ferry_why_ = (why); !ferry_why_.empty()) {                            \
            if (::ferry::test::servers_required()) FAIL() << ferry_why_ << " (FERRY_REQUIRE_SERVERS=1)"; \
            GTEST_SKIP() << ferry_why_;                                                             \
        }                                                                                           \
    } while (0)
