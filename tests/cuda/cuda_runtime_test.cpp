// The CUDA seam's own rules (src/cuda/cuda_runtime.hpp), checked without a GPU.
#include "cuda/cuda_runtime.hpp"

#include <gtest/gtest.h>

namespace ferry::detail {
namespace {

// CUDA forbids its calls inside host functions (one could deadlock the stream); ferry's wrapped
// calls refuse there before reaching CUDA, so a mistake shows as an error in every test.
TEST(cuda_runtime, calls_inside_a_host_function_are_refused_before_reaching_cuda) {
    bool reached = false;
    {
        cuda_host_function_scope scope;
        EXPECT_TRUE(in_cuda_host_function());
        cudaError_t e = cuda_call("cudaGetDeviceCount", [&] {
            reached = true;
            return cudaSuccess;
        });
        EXPECT_EQ(e, cudaErrorNotPermitted);
    }
    EXPECT_FALSE(reached);
    EXPECT_FALSE(in_cuda_host_function());
    EXPECT_EQ(cuda_call("cudaGetDeviceCount", [&] {
                  reached = true;
                  return cudaSuccess;
              }),
              cudaSuccess);
    EXPECT_TRUE(reached);
}

}  // namespace
}  // namespace ferry::detail
