#include "os/worker_thread.hpp"

namespace ferry::detail {
namespace {
thread_local int current_worker = -1;
}

int worker_thread_index() noexcept { return current_worker; }

void mark_worker_thread(int index) noexcept { current_worker = index; }

}  // namespace ferry::detail
