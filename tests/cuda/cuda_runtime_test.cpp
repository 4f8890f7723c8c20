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

// A driver older than the build's CUDA gets a reason that names the driver it has, the wheel this
// build is and the driver it needs, and the wheel that would run on that driver, never a bare
// cudaErrorInsufficientDriver.
TEST(cuda_runtime, an_old_driver_is_told_what_to_install) {
    const int built_major = CUDART_VERSION / 1000;
    std::string r = driver_too_old_reason((built_major - 1) * 1000 + 80);
    EXPECT_NE(r.find("supports CUDA " + std::to_string(built_major - 1) + ".8"), std::string::npos) << r;
    EXPECT_NE(r.find("this ferry-cu" + std::to_string(built_major) + " (built with CUDA " +
                     std::to_string(built_major) + "."),
              std::string::npos)
        << r;
    if (built_major == 13) {
        EXPECT_NE(r.find("needs an NVIDIA driver >= 580"), std::string::npos) << r;
        EXPECT_NE(r.find("install the ferry-cu12 wheel instead"), std::string::npos) << r;
        EXPECT_NE(r.find("for drivers >= 525"), std::string::npos) << r;
    }
    if (built_major == 12) EXPECT_NE(r.find("needs an NVIDIA driver >= 525"), std::string::npos) << r;
    std::string ancient = driver_too_old_reason(11040);
    EXPECT_EQ(ancient.find("ferry-cu11"), std::string::npos) << "there is no CUDA 11 build: " << ancient;
}

}  // namespace
}  // namespace ferry::detail
