// The machinery shared by all files opened with the same tuning: the worker threads and the
// pinned staging memory.
#pragma once

#include <memory>

#include "backend/staged/staging_pool.hpp"
#include "ferry/settings.hpp"
#include "io/thread_pool.hpp"

namespace ferry::detail {

class engine {
public:
    explicit engine(const settings& resolved);
    ~engine();

    /// The engine for these (resolved) settings: the last one made when its tuning matches,
    /// else a new one. Files keep their engine alive.
    static std::shared_ptr<engine> shared(const settings& resolved);

    thread_pool& pool() noexcept { return pool_; }
    staging_pool& staging() noexcept { return staging_; }

private:
    staging_pool staging_;  // destroyed after the workers stopped
    thread_pool pool_;
};

}  // namespace ferry::detail
