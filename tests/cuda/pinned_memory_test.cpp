// Pinned staging memory (src/cuda/pinned_memory.cpp) on a machine without a usable GPU: the
// error says why, as every other CUDA allocation does, instead of cudaHostAlloc's code alone.
#include <gtest/gtest.h>

#include <string>

#include "cuda/cuda_runtime.hpp"

namespace ferry::detail {
namespace {

TEST(pinned_memory, without_a_gpu_says_why) {
    if (cuda_available()) {  // the same calls succeed where a GPU is
        for (std::size_t bytes : {std::size_t{4096}, std::size_t{64} << 20}) {
            char* p = pin_host_memory(bytes, "cudaHostAlloc (staging buffers)");
            EXPECT_NE(p, nullptr);
            unpin_host_memory(p);
        }
        return;
    }
    for (std::size_t bytes : {std::size_t{4096}, std::size_t{64} << 20}) {
        try {
            unpin_host_memory(pin_host_memory(bytes, "cudaHostAlloc (staging buffers)"));
            FAIL() << "pinned memory without a GPU";
        } catch (const cuda_error& e) {
            EXPECT_EQ(e.code(), cudaErrorNoDevice);
            EXPECT_NE(std::string(e.what()).find(cuda_unavailable_reason()), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("staging buffers"), std::string::npos) << e.what();
        }
    }
    EXPECT_EQ(live_cuda_allocations().pinned, 0);
}

}  // namespace
}  // namespace ferry::detail
