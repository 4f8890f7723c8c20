// Which engine worker the calling thread is. io/thread_pool marks its threads as they start; the
// layers below io/ (the posix source, which keeps a descriptor per worker) read the mark here
// without knowing the pool.
#pragma once

namespace ferry::detail {

/// The calling thread's index in its worker pool, or -1 on any thread that is not a worker.
int worker_thread_index() noexcept;

/// Marks the calling thread as worker `index` of its pool (io/thread_pool, as a worker starts).
void mark_worker_thread(int index) noexcept;

}  // namespace ferry::detail
