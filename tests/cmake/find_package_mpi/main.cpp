// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// A consumer of an installed commpress::mpi and commpress::eigen: the README's compressed
// all-reduce over MPI, on however many ranks it is started with (one without mpirun), then a
// PowerSGD step. Every rank's mean must keep exactly k of the n elements, each the ranks' shared
// value; PowerSGD must give back the ranks' shared rank-1 gradient.

#include <mpi.h>

#include <commpress/collective/powersgd.hpp>
#include <commpress/comm/mpi.hpp>
#include <commpress/commpress.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <span>
#include <vector>

namespace cp = commpress;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int failed = 0;
  {
    constexpr std::size_t n = 1000;
    cp::mpi_communicator comm(MPI_COMM_WORLD);
    const cp::pipeline<cp::ef, cp::random_k> pipe{{}, {.fraction = 0.01f}};
    cp::all_reduce_plan plan(pipe, n, comm.size());
    auto residual = plan.make_state();
    std::vector<std::byte> ws(plan.workspace_bytes());
    const std::vector<float> grad(n, 0.5f); // every rank the same gradient
    std::vector<float> mean(n, -1.0f);
    cp::all_reduce_compressed(comm, cp::cpu::seq, plan, residual, {.seed = 7, .step = 0},
                              std::span<const float>(grad), std::span(mean), std::span(ws));
    std::size_t kept = 0;
    for (const float v : mean) {
      kept += v != 0.0f ? 1u : 0u;
      failed |= v != 0.0f && v != 0.5f ? 1 : 0;
    }
    failed |= kept != 10 ? 1 : 0; // k = 1% of 1000
    std::printf("rank %d of %d: %zu of %zu elements kept\n", comm.rank(), comm.size(), kept, n);
  }
  {
    constexpr std::size_t rows = 20, columns = 50;
    cp::mpi_communicator comm(MPI_COMM_WORLD);
    const cp::powersgd_plan plan({.rank = 1}, rows, columns, comm.size());
    auto state = plan.make_state();
    std::vector<std::byte> ws(plan.workspace_bytes());
    std::vector<float> grad(rows * columns), mean(rows * columns);
    for (std::size_t i = 0; i < rows; ++i) // rank 1: (i + 1) (j - 25) / 100
      for (std::size_t j = 0; j < columns; ++j)
        grad[i * columns + j] =
            static_cast<float>(i + 1) * (static_cast<float>(j) - 25.0f) / 100.0f;
    cp::all_reduce_powersgd(comm, plan, state, {.seed = 7, .step = 0}, grad, mean, ws);
    float worst = 0.0f;
    for (std::size_t i = 0; i < grad.size(); ++i)
      worst = std::max(worst, std::abs(mean[i] - grad[i]));
    failed |= worst > 1e-4f ? 1 : 0;
    std::printf("rank %d of %d: powersgd rank 1, largest error %g\n", comm.rank(), comm.size(),
                static_cast<double>(worst));
  }
  MPI_Finalize();
  return failed;
}
