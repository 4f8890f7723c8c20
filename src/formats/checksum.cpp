#include "ferry/checksum.hpp"

#include <cstdio>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "array/host_kernels.hpp"
#include "ferry/convert.hpp"

namespace ferry {
namespace {

constexpr std::size_t chunk = 16u << 20;

class hasher {
public:
    hasher() : state_(XXH64_createState()) {
        if (!state_) throw std::bad_alloc();
        XXH64_reset(state_, 0);
    }
    ~hasher() { XXH64_freeState(state_); }
    hasher(const hasher&) = delete;
    hasher& operator=(const hasher&) = delete;
    void update(const void* p, std::size_t n) { XXH64_update(state_, p, n); }
    std::string hex() const {
        char buf[32];
        std::snprintf(buf, sizeof buf, "xxh64:%016llx",
                      static_cast<unsigned long long>(XXH64_digest(state_)));
        return buf;
    }

private:
    XXH64_state_t* state_;
};

}  // namespace

std::string checksum(const array& a) {
    hasher h;
    const std::size_t unit = swap_unit_of(a.type());
    // The checksum is defined on little-endian bytes; on a big-endian host "native" would be
    // wrong, so ask for little-endian explicitly.
    const bool swap = unit > 1 && a.endian() != byte_order::little;
    if (a.where().on_gpu()) {
        array c = to_c_order(a);
        if (swap) c = to_native(c);
        std::vector<unsigned char> bounce(std::min(chunk, c.nbytes()));
        const auto* src = static_cast<const unsigned char*>(c.data());
        for (std::size_t done = 0; done < c.nbytes(); done += bounce.size()) {
            std::size_t n = std::min(bounce.size(), c.nbytes() - done);
            copy_memory(bounce.data(), src + done, n);
            h.update(bounce.data(), n);
        }
        return h.hex();
    }
    array c = to_c_order(a);
    const auto* src = static_cast<const unsigned char*>(c.data());
    if (!swap) {
        h.update(src, c.nbytes());
        return h.hex();
    }
    std::vector<unsigned char> buf(std::min(chunk, c.nbytes()));
    for (std::size_t done = 0; done < c.nbytes(); done += buf.size()) {
        std::size_t n = std::min(buf.size(), c.nbytes() - done);
        host_kernels::byte_swap_copy(src + done, buf.data(), n / unit, unit);
        h.update(buf.data(), n);
    }
    return h.hex();
}

}  // namespace ferry
