// Long calls that Ctrl-C can stop: the work runs on a thread of its own under a ferry::stop_scope
// while the calling thread waits without the GIL, taking it every 20 ms to let Python run its
// signal handlers. A handler that raises (SIGINT's KeyboardInterrupt) asks the work to stop,
// waits for it to end (its files closed, a save's temporary removed) and raises that exception.
// Measured on a 2-core machine (python/tests/test_interrupt.py): 9-21 ms from SIGINT to the
// exception in a read from a server sending 64 KiB/s and in the retries against a dead one, where
// before it came when the read ended (14.5 s) or the retries gave up; 8-82 ms (median 24 ms) in a
// 1 GiB save on one thread, where before it waited for the save (4.4 s). That includes up to one
// 20 ms wait here and the write in flight (a 4 MiB pwrite); the temporary's last close, which
// drops its pages (40-75 ms), runs on a pool worker (formats/atomic_write.cpp).
#include "bind.hpp"

#include <Python.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "ferry/stop.hpp"

namespace ferry::python {

void run_interruptible(const std::function<void()>& work) {
    run_interruptible_stepping([&](const std::function<void()>&) { work(); }, [] {});
}

void run_interruptible_stepping(const std::function<void(const std::function<void()>& wake)>& work,
                                const std::function<void()>& step) {
    // Only the main thread runs signal handlers: elsewhere a plain call, without the thread.
    static const unsigned long main_ident =
        nb::cast<unsigned long>(nb::module_::import_("threading").attr("main_thread")().attr("ident"));
    if (PyThread_get_thread_ident() != main_ident) {
        {
            nb::gil_scoped_release nogil;
            work([] {});
        }
        step();
        return;
    }
    stop_source stop;
    std::mutex m;
    std::condition_variable cv;
    bool done = false, woken = false;
    std::exception_ptr error;
    auto wake = [&] {
        std::lock_guard lock(m);
        woken = true;
        cv.notify_all();
    };
    std::thread worker([&] {
        {
            stop_scope scope(stop);
            try {
                work(wake);
            } catch (...) {
                error = std::current_exception();
            }
        }
        std::lock_guard lock(m);
        done = true;
        cv.notify_all();
    });
    auto stop_and_wait = [&] {
        stop.request_stop();
        nb::gil_scoped_release nogil;
        std::unique_lock lock(m);
        cv.wait(lock, [&] { return done; });
    };
    bool interrupted = false;
    std::exception_ptr step_error;
    for (;;) {
        bool finished = false, stepping = false;
        {
            nb::gil_scoped_release nogil;
            std::unique_lock lock(m);
            cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return done || woken; });
            finished = done;
            stepping = std::exchange(woken, false);
        }
        if (finished) break;
        if (stepping) {
            try {
                step();
            } catch (...) {
                step_error = std::current_exception();
                stop_and_wait();
                break;
            }
        }
        if (PyErr_CheckSignals() != 0) {
            interrupted = true;
            stop_and_wait();
            break;
        }
    }
    {
        nb::gil_scoped_release nogil;
        worker.join();
    }
    if (interrupted) throw nb::python_error();  // the handler's exception, set by PyErr_CheckSignals
    if (step_error) std::rethrow_exception(step_error);
    if (error) std::rethrow_exception(error);
    step();
}

}  // namespace ferry::python
