#include "os/fork_safe_mutex.hpp"

#include <pthread.h>

#include <cstdio>
#include <cstdlib>

namespace ferry::detail {
namespace {

// Filled during static initialization (single-threaded), read by the fork handlers.
constexpr int capacity = 16;
constinit fork_safe_mutex* registered[capacity] = {};
constinit int count = 0;

void before_fork() {
    for (int i = 0; i < count; ++i) registered[i]->lock();
}
void after_fork() {
    for (int i = count; i-- > 0;) registered[i]->unlock();
}

}  // namespace

fork_safe_mutex::fork_safe_mutex() {
    if (count == capacity) {
        std::fputs("ferry: too many fork-safe mutexes\n", stderr);
        std::abort();
    }
    if (count == 0) ::pthread_atfork(before_fork, after_fork, after_fork);
    registered[count++] = this;
}

}  // namespace ferry::detail
