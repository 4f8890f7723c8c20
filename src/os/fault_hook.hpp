// The fault-injection hook that every wrapped call consults: system calls (os/sys.hpp), CUDA
// runtime calls and kernel launches (cuda/cuda_runtime.hpp) and cuFile I/O (backend/cufile). Free of
// system headers, so that code which must include the kernel's own headers can use it too.
#pragma once

#include <atomic>
#include <cstddef>

namespace ferry::sys {

/// Called before each wrapped call with its name and, for transfers, the byte count, which the
/// hook may lower to force a short transfer. Return -1 with errno set to fail the call, 0 to
/// let it run. Installed by tests only.
using fault_hook = int (*)(const char* call, std::size_t* length);
extern std::atomic<fault_hook> hook;

inline int inject(const char* call, std::size_t* length = nullptr) {
    fault_hook h = hook.load(std::memory_order_relaxed);
    return h ? h(call, length) : 0;
}

}  // namespace ferry::sys
