// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// Compressed collectives over MPI next to uncompressed MPI_Allreduce of the same tensor, in the
// same run (docs/collectives.md, "Cost model and measurements").
//
// For every size and method it prints, per rank:
// - wire: bytes each rank sends under the bandwidth-optimal schedule (ring all-reduce /
//   all-gather, pairwise all-to-all), from the plans' wire_bytes();
// - t_call: wall time of one call (median over reps of the slowest rank);
// - t_comp: the same call's local work alone (encode, decode, copies), measured by running it
//   over `local_comm`, a communicator of the same size that moves nothing over the network;
// - break-even: the link bandwidth below which compression pays off in the alpha-beta model,
//   bw* = (B_allreduce - B_method) / t_comp (alpha = 0, the bandwidth-bound regime).
//
//   mpirun --oversubscribe -np 4 commpress_collective_mpi_bench [--sizes 1,16] [--reps 3]
// Sizes are in Mi floats (2^20 elements).

#include <commpress/collective/collective.hpp>
#include <commpress/comm/mpi.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace cp = commpress;

namespace {

/// A communicator of `size` ranks that moves nothing between processes: all_gather replicates
/// this rank's block, all_to_all copies blocks in place, all_reduce_sum leaves the buffer. It
/// runs a collective's local work (compression, decoding, copies) without the network.
class local_comm {
public:
  local_comm(int rank, int size) : rank_(rank), size_(size) {}
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  void all_gather(std::span<const std::byte> mine, std::span<std::byte> all) {
    for (int r = 0; r < size_; ++r)
      if (!mine.empty())
        std::memcpy(all.data() + static_cast<std::size_t>(r) * mine.size(), mine.data(),
                    mine.size());
  }
  void all_to_all(std::span<const std::byte> send, std::span<std::byte> recv) {
    if (!send.empty())
      std::memcpy(recv.data(), send.data(), send.size());
  }
  void send(std::span<const std::byte>, int, int) {}
  void recv(std::span<std::byte>, int, int) {}
  void all_reduce_sum(std::span<float>) {}
  void barrier() {}

private:
  int rank_;
  int size_;
};
static_assert(cp::communicator<local_comm>);

/// Wall time of `fn`, median over `reps` of the slowest rank (barrier before each).
double time_call(int reps, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    fn();
    double dt = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t.push_back(dt);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct row {
  std::string method;
  std::uint64_t wire = 0;
  double t_call = 0;
  double t_comp = 0;
};

struct bench_ctx {
  cp::mpi_communicator& comm;
  local_comm local;
  int reps;
  std::uint64_t n;
  std::vector<float> in;
  std::vector<float> out;
  std::vector<row> rows;
};

/// Times one collective: over MPI, then its local work alone over local_comm.
template <class Plan, class State, class Call>
void measure(bench_ctx& b, const std::string& name, const Plan& plan, std::uint64_t wire, State st,
             Call call) {
  std::vector<std::byte> ws(plan.workspace_bytes());
  call(b.comm, st, ws); // warm-up: first touch of the buffers
  const double t_call = time_call(b.reps, [&] { call(b.comm, st, ws); });
  const double t_comp = time_call(b.reps, [&] { call(b.local, st, ws); });
  b.rows.push_back({name, wire, t_call, t_comp});
}

template <class Pipe>
void bench_all_reduce(bench_ctx& b, const std::string& name, const Pipe& pipe) {
  const cp::all_reduce_plan plan(pipe, b.n, b.comm.size());
  measure(b, name, plan, plan.wire_bytes(), plan.make_state(),
          [&](auto& comm, auto& st, std::vector<std::byte>& ws) {
            cp::all_reduce_compressed(comm, cp::cpu::seq, plan, st, cp::context{.seed = 1},
                                      std::span<const float>(b.in), std::span(b.out),
                                      std::span(ws));
          });
}

template <class Pipe>
void bench_all_gather(bench_ctx& b, const std::string& name, const Pipe& pipe) {
  const cp::all_gather_plan plan(pipe, b.n, b.comm.size());
  measure(b, name, plan, plan.wire_bytes(), plan.make_state(),
          [&](auto& comm, auto& st, std::vector<std::byte>& ws) {
            cp::all_gather_compressed(comm, cp::cpu::seq, plan, st, cp::context{.seed = 1},
                                      std::span<const float>(b.in), std::span(b.out),
                                      std::span(ws));
          });
}

template <class Pipe> void bench_sharded(bench_ctx& b, const std::string& name, const Pipe& pipe) {
  const cp::sharded_plan plan(pipe, b.n, b.comm.size());
  measure(b, name, plan, plan.reduce_scatter_wire_bytes() + plan.all_gather_wire_bytes(),
          plan.make_state(b.comm.rank()), [&](auto& comm, auto& st, std::vector<std::byte>& ws) {
            cp::sharded_all_reduce_compressed(comm, cp::cpu::seq, plan, st, cp::context{.seed = 1},
                                              std::span<const float>(b.in), std::span(b.out),
                                              std::span(ws));
          });
}

std::vector<std::uint64_t> parse_sizes(const char* s) {
  std::vector<std::uint64_t> v;
  std::string str(s);
  std::size_t pos = 0;
  while (pos < str.size()) {
    const std::size_t end = str.find(',', pos);
    v.push_back(std::strtoull(str.substr(pos, end - pos).c_str(), nullptr, 10));
    if (end == std::string::npos)
      break;
    pos = end + 1;
  }
  return v;
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    cp::mpi_communicator comm(MPI_COMM_WORLD);
    std::vector<std::uint64_t> sizes = {1, 16};
    int reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
      if (std::strcmp(argv[i], "--sizes") == 0)
        sizes = parse_sizes(argv[i + 1]);
      if (std::strcmp(argv[i], "--reps") == 0)
        reps = std::atoi(argv[i + 1]);
    }
    const int N = comm.size();
    if (comm.rank() == 0)
      std::printf(
          "| N | Mi floats | method | bytes sent per rank | vs fp32 all-reduce | t_call ms | "
          "t_comp ms | break-even link Gbit/s |\n|---|---|---|---|---|---|---|---|\n");
    for (const std::uint64_t mi : sizes) {
      const std::uint64_t n = mi << 20;
      bench_ctx b{comm, local_comm(comm.rank(), N), reps,
                  n,    std::vector<float>(n),      std::vector<float>(n),
                  {}};
      std::uint64_t h = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(comm.rank() + 1);
      for (auto& v : b.in) {
        h ^= h << 13;
        h ^= h >> 7;
        h ^= h << 17;
        v = static_cast<float>(static_cast<double>(h >> 40) / 8388608.0 - 1.0);
      }
      // The baseline: uncompressed MPI_Allreduce of the same tensor (ring: 2 (N-1)/N * 4n).
      const std::uint64_t base_wire = 2 * static_cast<std::uint64_t>(N - 1) * 4 * n / N;
      {
        std::vector<float> x(b.in);
        const double t = time_call(reps, [&] {
          MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD);
        });
        b.rows.push_back({"MPI_Allreduce fp32 (baseline)", base_wire, t, 0.0});
      }
      using namespace cp;
      bench_all_reduce(b, "all_reduce identity", pipeline<none, identity>{});
      bench_all_reduce(b, "all_reduce ef+random_k 1%",
                       pipeline<ef, random_k>{{}, {.fraction = 0.01f}});
      bench_all_gather(b, "all_gather ef+top_k 1%", pipeline<ef, top_k>{{}, {.fraction = 0.01f}});
      bench_all_gather(b, "all_gather ef+sign (1 bit)", pipeline<ef, sign>{});
      bench_all_gather(b, "all_gather quantize 4b/128",
                       pipeline<none, quantize>{{}, {.bits = 4, .group = 128}});
      bench_sharded(b, "sharded ef+sign (1-bit Adam)", pipeline<ef, sign>{});
      bench_sharded(b, "sharded ef+quantize 4b/128 (LoCo-like)",
                    pipeline<ef, quantize>{{}, {.bits = 4, .group = 128}});
      bench_sharded(b, "sharded cast bf16", pipeline<none, cast>{{}, {.to = dtype::bf16}});
      if (comm.rank() == 0) {
        for (const row& r : b.rows) {
          char be[64];
          if (r.t_comp == 0.0) {
            std::snprintf(be, sizeof be, "-");
          } else if (r.wire >= base_wire) {
            std::snprintf(be, sizeof be, "never (no fewer bytes)");
          } else {
            std::snprintf(be, sizeof be, "%.1f",
                          8.0 * static_cast<double>(base_wire - r.wire) / r.t_comp / 1e9);
          }
          std::printf("| %d | %llu | %s | %llu | %.3fx | %.2f | %.2f | %s |\n", N,
                      static_cast<unsigned long long>(mi), r.method.c_str(),
                      static_cast<unsigned long long>(r.wire),
                      static_cast<double>(r.wire) / static_cast<double>(base_wire), r.t_call * 1e3,
                      r.t_comp * 1e3, be);
        }
        std::fflush(stdout);
      }
    }
  }
  MPI_Finalize();
  return 0;
}
