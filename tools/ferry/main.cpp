// ferry: move arrays between files and GPU memory. See `ferry --help`.
#include <signal.h>

#include <cstdio>
#include <exception>
#include <string>

#include "commands.hpp"
#include "ferry/error.hpp"
#include "ferry/stop.hpp"
#include "ferry/version.hpp"

namespace {

// Ctrl-C and SIGTERM stop the command's reads and writes (a save's temporary file removed, an
// upload aborted) and it exits with 130 within a fraction of a second; before, a read from a dead
// server went on retrying for its whole backoff. A second signal ends the process at once
// (SA_RESETHAND). A signal the shell ignores for us (a background job) stays ignored.
ferry::stop_source* interrupt_source = nullptr;

extern "C" void on_interrupt(int) { interrupt_source->request_stop(); }

void stop_on_signals(ferry::stop_source& stop) {
    interrupt_source = &stop;
    for (int sig : {SIGINT, SIGTERM}) {
        struct sigaction old {};
        if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler == SIG_IGN) continue;
        struct sigaction sa {};
        sa.sa_handler = on_interrupt;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND;
        ::sigaction(sig, &sa, nullptr);
    }
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"ferry: move arrays between files and GPU memory, fast", "ferry"};
    app.set_version_flag("--version", ferry::version());
    app.require_subcommand(1);
    ferry::cli::add_load_command(app);
    ferry::cli::add_bench_command(app);
    ferry::cli::add_doctor_command(app);
    ferry::cli::add_info_command(app);
    ferry::cli::add_convert_command(app);
    ferry::cli::add_verify_command(app);
    // CLI11 reads an unknown first word as a stray argument and only says that a subcommand is
    // required: name the word and the commands there are.
    if (argc > 1 && argv[1][0] != '-') {
        std::string known;
        bool found = false;
        const CLI::App& all = app;
        for (const CLI::App* sub : all.get_subcommands([](const CLI::App*) { return true; })) {
            known += (known.empty() ? "" : ", ") + sub->get_name();
            found = found || sub->get_name() == argv[1];
        }
        if (!found) {
            std::fprintf(stderr, "ferry: unknown command '%s' (commands: %s; see ferry --help)\n", argv[1],
                         known.c_str());
            return ferry::cli::exit_usage;
        }
    }
    ferry::stop_source stop;
    stop_on_signals(stop);
    ferry::stop_scope scope(stop);
    try {
        app.parse(argc, argv);
    } catch (const CLI::RuntimeError& e) {
        return e.get_exit_code();  // a subcommand's own status (e.g. doctor --require-gds)
    } catch (const CLI::ParseError& e) {
        int rc = app.exit(e);
        return rc == 0 ? ferry::cli::exit_ok : ferry::cli::exit_usage;
    } catch (const ferry::interrupted_error& e) {
        std::fprintf(stderr, "ferry: %s\n", e.what());
        return ferry::cli::exit_interrupted;
    } catch (const ferry::usage_error& e) {
        std::fprintf(stderr, "ferry: %s\n", e.what());
        return ferry::cli::exit_usage;
    } catch (const ferry::error& e) {
        std::fprintf(stderr, "ferry: %s\n", e.what());
        return ferry::cli::exit_input;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ferry: %s\n", e.what());
        return ferry::cli::exit_input;
    }
    return ferry::cli::exit_ok;
}
