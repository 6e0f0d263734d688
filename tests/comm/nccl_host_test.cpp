// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// nccl.hpp under the host C++ compiler (no nvcc), linked into the same test binary as
// nccl_test.cu, and doctest's main for both. Everything here runs without a GPU.

#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <commpress/comm/nccl.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

static_assert(commpress::communicator<commpress::nccl_communicator>);
static_assert(commpress::communicator_f64<commpress::nccl_communicator>);
static_assert(commpress::uses_device_buffers_v<commpress::nccl_communicator>);
static_assert(!commpress::uses_device_buffers_v<int>);

TEST_SUITE_BEGIN("comm");

TEST_CASE("nccl_communicator: host compiler: error reporting") {
  CHECK_NOTHROW(commpress::detail::nccl_check(ncclSuccess, nullptr, "ncclFoo"));
  CHECK_NOTHROW(commpress::detail::cuda_check(cudaSuccess, "cudaFoo"));
  try {
    commpress::detail::nccl_check(ncclInvalidArgument, nullptr, "ncclFoo");
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    CHECK(what.rfind("commpress: nccl: ncclFoo failed: ", 0) == 0);
    CHECK(what.find(ncclGetErrorString(ncclInvalidArgument)) != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(commpress::detail::cuda_check(cudaErrorInvalidValue, "cudaFoo"),
                       "commpress: nccl: cudaFoo failed: cudaErrorInvalidValue: invalid argument",
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(commpress::nccl_communicator(nullptr, nullptr),
                       "commpress: nccl: null ncclComm_t", std::runtime_error);
}

TEST_SUITE_END();
