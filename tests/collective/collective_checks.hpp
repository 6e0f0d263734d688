// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Transport-independent checks of the compressed collectives and stage channels, shared by
/// the loopback test (ranks as threads) and the MPI test (ranks as processes).
///
/// Every rank's input is a function of (rank, step, index), so each rank can replay the whole
/// algorithm in one process, with replica feedback states of every rank, by calling the
/// pipeline's encode / decode / decode_accumulate directly: that replay is the single-process
/// reference each rank compares its own outputs with, bit for bit. Each check is a collective
/// that every rank enters in the same order; failures come back as strings so the caller can
/// assert on them (on the main thread for the loopback).

#include <commpress/backend/cpu/qsgd.hpp>
#include <commpress/backend/cpu/rotated.hpp>
#include <commpress/backend/cpu/sign.hpp>
#include <commpress/collective/collective.hpp>
#include <commpress/comm/communicator.hpp>
#include <commpress/optim/data_parallel.hpp>
#include <commpress/optim/onebit_adam.hpp>
#include <commpress/optim/sgd.hpp>
#include <commpress/pipeline/layer_policy.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace commpress::test {

namespace cp = commpress;

using failures = std::vector<std::string>;

/// splitmix64.
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// A value in (-1, 1) of rank `rank` at step `step`, index `i`; salt picks the stream.
inline float gen(int rank, std::uint64_t step, std::uint64_t i, std::uint64_t salt) {
  const std::uint64_t h =
      mix64(salt * 0x100000001B3ull ^ (static_cast<std::uint64_t>(rank) << 48) ^ (step << 32) ^ i);
  return static_cast<float>(static_cast<double>(h >> 40) / 8388608.0 - 1.0);
}

/// An integer-valued input whose sums over up to 4 ranks are exact in float.
inline float integer_value(int rank, std::uint64_t i) {
  return static_cast<float>(
      static_cast<int>((i * 37u + static_cast<std::uint64_t>(rank) * 11u) % 997u) - 400);
}

inline std::vector<float> inputs(int rank, std::uint64_t step, std::uint64_t n,
                                 std::uint64_t salt) {
  std::vector<float> v(n);
  for (std::uint64_t i = 0; i < n; ++i)
    v[i] = gen(rank, step, i, salt);
  return v;
}

/// A standard normal value of rank `rank` at step `step`, index `i` (Box-Muller of two draws):
/// QSGD's Elias body is shorter where more levels are zero, so Gaussian tensors of different
/// ranks give payloads of different lengths.
inline float gauss(int rank, std::uint64_t step, std::uint64_t i, std::uint64_t salt) {
  const double u1 = (static_cast<double>(gen(rank, step, 2 * i, salt)) + 1.0) / 2.0;
  const double u2 = (static_cast<double>(gen(rank, step, 2 * i + 1, salt)) + 1.0) / 2.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(std::max(u1, 1e-12))) *
                            std::cos(6.283185307179586 * u2));
}

/// `inputs`, or Gaussian values where `gaussian`.
inline std::vector<float> inputs(int rank, std::uint64_t step, std::uint64_t n, std::uint64_t salt,
                                 bool gaussian) {
  if (!gaussian)
    return inputs(rank, step, n, salt);
  std::vector<float> v(n);
  for (std::uint64_t i = 0; i < n; ++i)
    v[i] = gauss(rank, step, i, salt);
  return v;
}

inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

/// Collective: true on every rank iff every rank holds the same bytes (same size assumed).
template <class Comm> bool same_on_all_ranks(Comm& comm, std::span<const float> x) {
  const auto n = static_cast<std::size_t>(comm.size());
  std::vector<float> all(x.size() * n);
  comm.all_gather(std::as_bytes(x), std::as_writable_bytes(std::span<float>(all)));
  for (std::size_t r = 0; r < n; ++r)
    if (!same_bits(std::span<const float>(all).subspan(r * x.size(), x.size()), x))
      return false;
  return true;
}

inline std::string where(const char* name, int rank, std::uint64_t n, std::uint64_t step) {
  return std::string(name) + " (rank " + std::to_string(rank) + ", n " + std::to_string(n) +
         ", step " + std::to_string(step) + ")";
}

// --- all-reduce (sum-compatible codecs) -----------------------------------------------------

/// identity: with scaling::sum the result equals `reference_sum` (the transport's all-reduce,
/// MPI_Allreduce for MPI) exactly for integer-valued inputs, equals all_reduce_sum_ordered to the
/// last bit with rank_ordered on wide-range inputs, and the mean is the sum times 1/N.
template <class Comm>
failures check_identity_all_reduce(Comm& comm,
                                   const std::function<void(std::span<float>)>& reference_sum) {
  failures f;
  const int me = static_cast<int>(comm.rank());
  const int ranks = static_cast<int>(comm.size());
  const cp::pipeline<cp::none, cp::identity> pipe{};
  for (const std::uint64_t n : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{1001}}) {
    const cp::context ctx{.seed = 1, .step = 0, .tensor_id = 2};
    std::vector<float> in(n), out(n), ref(n);
    for (std::uint64_t i = 0; i < n; ++i)
      in[i] = integer_value(me, i);
    {
      const cp::all_reduce_plan plan(pipe, n, ranks, {.scale = cp::scaling::sum});
      auto st = plan.make_state();
      std::vector<std::byte> ws(plan.workspace_bytes());
      cp::all_reduce_compressed(comm, cp::cpu::seq, plan, st, ctx, in, out, ws);
      ref = in;
      reference_sum(ref);
      if (!same_bits(out, ref))
        f.push_back(where("identity all_reduce != transport sum", me, n, 0));
      // The mean: the same sum times 1/N, one rounding.
      const cp::all_reduce_plan mean_plan(pipe, n, ranks);
      std::vector<std::byte> ws2(mean_plan.workspace_bytes());
      cp::all_reduce_compressed(comm, cp::cpu::seq, mean_plan, st, ctx, in, out, ws2);
      const float w = 1.0f / static_cast<float>(ranks);
      for (auto& v : ref)
        v = v * w;
      if (!same_bits(out, ref))
        f.push_back(where("identity all_reduce mean != sum * 1/N", me, n, 0));
    }
    {
      // Wide-range values: the rounding depends on the order; rank_ordered fixes it.
      for (std::uint64_t i = 0; i < n; ++i)
        in[i] = std::ldexp(gen(me, 0, i, 11), static_cast<int>(mix64(i + 7u * me) % 40) - 20);
      const cp::all_reduce_plan plan(
          pipe, n, ranks, {.scale = cp::scaling::sum, .rank_ordered = true, .ordered_chunk = 100});
      auto st = plan.make_state();
      std::vector<std::byte> ws(plan.workspace_bytes());
      cp::all_reduce_compressed(comm, cp::cpu::seq, plan, st, ctx, in, out, ws);
      ref = in;
      cp::all_reduce_sum_ordered(comm, std::span<float>(ref));
      if (!same_bits(out, ref))
        f.push_back(where("identity rank_ordered all_reduce != all_reduce_sum_ordered", me, n, 0));
      if (!same_on_all_ranks(comm, out))
        f.push_back(where("identity results differ", me, n, 0));
    }
  }
  return f;
}

/// random_k (fp32, fp16 and quantized values) with a shared stream and error feedback: every
/// rank gets the same bits, equal to a replay that encodes every rank's input with a replica EF
/// state, decodes each payload and adds the decoded tensors in rank order, times 1/N. The worker
/// state matches its replica. Mismatched streams are refused on every rank.
template <class Comm> failures check_random_k_all_reduce(Comm& comm) {
  failures f;
  const int me = static_cast<int>(comm.rank());
  const int ranks = static_cast<int>(comm.size());
  // fp32, fp16 and 4-bit quantized kept values (summed as their decoded fp32 values).
  for (const cp::random_k& codec :
       {cp::random_k{.fraction = 0.1f}, cp::random_k{.fraction = 0.1f, .values = cp::dtype::f16},
        cp::random_k{.fraction = 0.1f,
        .value_quantizer = {.bits = 4, .group = 32, .range = cp::quant_range::asymmetric}}}) {
    const cp::pipeline<cp::ef, cp::random_k> pipe{{}, codec};
    const std::uint64_t n = 997;
    const cp::all_reduce_plan plan(pipe, n, ranks, {.rank_ordered = true});
    auto st = plan.make_state();
    std::vector<std::byte> ws(plan.workspace_bytes());
    std::vector<cp::ef_state> replica(static_cast<std::size_t>(ranks), pipe.make_state(n));
    std::vector<std::byte> payload(pipe.max_payload_bytes(n)), pws(pipe.workspace_bytes(n));
    for (std::uint64_t t = 0; t < 4; ++t) {
      const cp::context ctx{.seed = 42, .step = t, .tensor_id = 9};
      const auto in = inputs(me, t, n, 3);
      std::vector<float> out(n);
      const auto res = cp::all_reduce_compressed(comm, cp::cpu::seq, plan, st, ctx, in, out, ws);
      if (res.payload_bytes != plan.payload_bytes())
        f.push_back(where("random_k payload bytes", me, n, t));
      std::vector<float> sum(n), dec(n);
      for (int r = 0; r < ranks; ++r) {
        const auto g = inputs(r, t, n, 3);
        cp::encode(cp::cpu::seq, pipe, replica[static_cast<std::size_t>(r)], ctx,
                   std::span<const float>(g), std::span(payload), std::span(pws));
        cp::decode(cp::cpu::seq, pipe.codec, std::span<const std::byte>(payload), std::span(dec));
        for (std::uint64_t i = 0; i < n; ++i)
          sum[i] = r == 0 ? dec[i] : sum[i] + dec[i];
      }
      const float w = 1.0f / static_cast<float>(ranks);
      for (auto& v : sum)
        v = v * w;
      if (!same_bits(out, sum))
        f.push_back(where("random_k all_reduce != replay", me, n, t));
      if (!(st == replica[static_cast<std::size_t>(me)]))
        f.push_back(where("random_k EF state != replica", me, n, t));
      if (!same_on_all_ranks(comm, out))
        f.push_back(where("random_k results differ", me, n, t));
      // Support: exactly the k shared indices are non-zero (inputs have no zeros).
      const auto nz = static_cast<std::uint64_t>(
          std::count_if(out.begin(), out.end(), [](float v) { return v != 0.0f; }));
      if (nz != plan.values())
        f.push_back(where("random_k support != k", me, n, t));
    }
    // A rank on another step would sum values of other indices: every rank refuses.
    const cp::context odd{
        .seed = 42, .step = static_cast<std::uint64_t>(me == 0 ? 100 : 101), .tensor_id = 9};
    const auto in = inputs(me, 0, n, 3);
    std::vector<float> out(n);
    bool refused = false;
    try {
      cp::all_reduce_compressed(comm, cp::cpu::seq, plan, st, odd, in, out, ws);
    } catch (const cp::error& e) {
      refused = e.code() == cp::errc::stream_mismatch;
    }
    if (ranks > 1 && !refused)
      f.push_back(where("mismatched streams not refused", me, n, 0));
  }
  return f;
}

// --- all-gather aggregation --------------------------------------------------------------------

/// One pipeline through all_gather_compressed for three steps, against the replay: every
/// rank's input encoded with a replica state and decoded in rank order. The wire bytes are the
/// fixed slot's, (N - 1) * slot, or for variable-length payloads (N - 1) * (8 + the longest
/// payload of the step); those lengths must then differ between ranks at some step.
template <class Comm, class Pipe>
void all_gather_case(Comm& comm, failures& f, const Pipe& pipe, std::uint64_t n, const char* name,
                     std::uint64_t max_support_per_rank = 0, bool gaussian = false) {
  const int me = static_cast<int>(comm.rank());
  const int ranks = static_cast<int>(comm.size());
  const cp::all_gather_plan plan(pipe, n, ranks);
  auto st = plan.make_state();
  std::vector<std::byte> ws(plan.workspace_bytes());
  std::vector<cp::collective_state_t<Pipe>> replica(static_cast<std::size_t>(ranks),
                                                    pipe.make_state(n));
  std::vector<std::byte> payload(pipe.max_payload_bytes(n)), pws(pipe.workspace_bytes(n));
  const float w = 1.0f / static_cast<float>(ranks);
  bool varied = false; // some step's payloads differ in length between ranks
  for (std::uint64_t t = 0; t < 3; ++t) {
    const cp::context ctx{.seed = 5, .step = t, .tensor_id = 1};
    const auto in = inputs(me, t, n, 17, gaussian);
    std::vector<float> out(n);
    const auto res = cp::all_gather_compressed(comm, cp::cpu::seq, plan, st, ctx, in, out, ws);
    std::vector<float> ref(n, 0.0f);
    std::vector<std::size_t> lengths;
    for (int r = 0; r < ranks; ++r) {
      const auto g = inputs(r, t, n, 17, gaussian);
      const auto sent = cp::encode(cp::cpu::seq, pipe, replica[static_cast<std::size_t>(r)], ctx,
                                   std::span<const float>(g), std::span(payload), std::span(pws));
      lengths.push_back(sent.bytes);
      cp::decode_accumulate(cp::cpu::seq, pipe, std::span<const std::byte>(payload), std::span(ref),
                            w);
    }
    const std::size_t longest = *std::max_element(lengths.begin(), lengths.end());
    const auto peers = static_cast<std::size_t>(ranks - 1);
    const std::size_t wire =
        cp::has_variable_body(pipe.codec) ? peers * (8 + longest) : peers * payload.size();
    if (res.wire_bytes != wire)
      f.push_back(where(name, me, n, t) + ": wire bytes " + std::to_string(res.wire_bytes) +
                  ", expected " + std::to_string(wire));
    if (res.wire_bytes > plan.wire_bytes())
      f.push_back(where(name, me, n, t) + ": wire bytes above the plan's worst case");
    if (res.payload_bytes != lengths[static_cast<std::size_t>(me)])
      f.push_back(where(name, me, n, t) + ": payload bytes");
    if (cp::has_variable_body(pipe.codec) && ranks > 1) {
      varied = varied || std::count(lengths.begin(), lengths.end(), lengths[0]) != ranks;
      if (!(wire < plan.wire_bytes()))
        f.push_back(where(name, me, n, t) + ": variable-length payloads sent no fewer bytes");
    }
    if (!same_bits(out, ref))
      f.push_back(where(name, me, n, t) + ": != replay");
    if (!(st == replica[static_cast<std::size_t>(me)]))
      f.push_back(where(name, me, n, t) + ": EF state != replica");
    if (!same_on_all_ranks(comm, out))
      f.push_back(where(name, me, n, t) + ": ranks differ");
    if (max_support_per_rank > 0) {
      const auto nz = static_cast<std::uint64_t>(
          std::count_if(out.begin(), out.end(), [](float v) { return v != 0.0f; }));
      if (nz > static_cast<std::uint64_t>(ranks) * max_support_per_rank || nz == 0)
        f.push_back(where(name, me, n, t) + ": support " + std::to_string(nz) + " > N * k");
    }
  }
  if (cp::has_variable_body(pipe.codec) && ranks > 1 && !varied)
    f.push_back(where(name, me, n, 0) + ": every rank's payload had the same length at every step");
}

/// top_k (A3: support <= N * k), sign, per-rank-scale quantize, cast and identity through
/// the all-gather path equal the single-process replay; identity with scaling::sum on integer
/// inputs is the exact sum.
template <class Comm> failures check_all_gather(Comm& comm) {
  failures f;
  const int me = static_cast<int>(comm.rank());
  const int ranks = static_cast<int>(comm.size());
  all_gather_case(comm, f, cp::pipeline<cp::ef, cp::top_k>{{}, {.count = 25}}, 1001,
                  "all_gather ef+top_k", 25);
  all_gather_case(
      comm, f,
      cp::pipeline<cp::ef, cp::sign>{
          {},
          {.granularity = cp::sign_granularity::block, .block = 64, .scale = cp::sign_scale::rms}},
      1001, "all_gather ef+sign");
  all_gather_case(comm, f, cp::pipeline<cp::none, cp::quantize>{{}, {.bits = 4, .group = 100}},
                  1001, "all_gather quantize");
  all_gather_case(comm, f, cp::pipeline<cp::none, cp::cast>{{}, {.to = cp::dtype::bf16}}, 1001,
                  "all_gather cast");
  all_gather_case(
      comm, f, cp::pipeline<cp::ef, cp::rotated<cp::quantize>>{{}, {{.bits = 4, .group = 64}, 7}},
      1001, "all_gather ef+rotated quantize");
  // QSGD: fixed-width codes fill their slot; the Elias body travels at its length.
  const cp::qsgd4 fixed{.block = 256};
  const cp::qsgd4 elias{.block = 256, .coding = cp::qsgd_coding::elias};
  all_gather_case(comm, f, cp::pipeline<cp::ef, cp::qsgd4>{{}, fixed}, 1001, "all_gather ef+qsgd4",
                  0, true);
  all_gather_case(comm, f, cp::pipeline<cp::none, cp::qsgd4>{{}, elias}, 1001,
                  "all_gather qsgd4 elias", 0, true);
  all_gather_case(comm, f, cp::pipeline<cp::ef, cp::qsgd4>{{}, elias}, 1001,
                  "all_gather ef+qsgd4 elias", 0, true);
  {
    const std::uint64_t n = 333;
    const cp::pipeline<cp::none, cp::identity> pipe{};
    const cp::all_gather_plan plan(pipe, n, ranks, {.scale = cp::scaling::sum});
    auto st = plan.make_state();
    std::vector<std::byte> ws(plan.workspace_bytes());
    std::vector<float> in(n), out(n);
    for (std::uint64_t i = 0; i < n; ++i)
      in[i] = integer_value(me, i);
    cp::all_gather_compressed(comm, cp::cpu::seq, plan, st, {}, in, out, ws);
    bool exact = true;
    for (std::uint64_t i = 0; i < n; ++i) {
      float s = 0.0f;
      for (int r = 0; r < ranks; ++r)
        s += integer_value(r, i);
      exact = exact && out[i] == s;
    }
    if (!exact)
      f.push_back(where("all_gather identity sum not exact", me, n, 0));
  }
  return f;
}

// --- sharded two-EF-point path -------------------------------------------------------------------

/// The chunk length of owner j, computed independently of chunk_layout.
inline std::uint64_t ref_chunk(std::uint64_t n, int ranks, std::uint64_t align) {
  const std::uint64_t even = (n + static_cast<std::uint64_t>(ranks) - 1) / ranks;
  return (even + align - 1) / align * align;
}

/// The bytes a sharded half sends: (N - 1) fixed slots, or for variable-length payloads the
/// all-gather of each rank's `per_rank` lengths and N - 1 blocks of the longest payload.
inline std::size_t sharded_wire(bool variable, int ranks, std::size_t per_rank, std::size_t slot,
                                const std::vector<std::size_t>& lengths) {
  const auto peers = static_cast<std::size_t>(ranks - 1);
  if (!variable)
    return peers * slot;
  return peers * (8 * per_rank + *std::max_element(lengths.begin(), lengths.end()));
}

template <class Comm, class W, class S>
void sharded_case(Comm& comm, failures& f, const W& worker, const S& server, std::uint64_t n,
                  std::uint64_t align, const char* name, int steps, bool telescoping,
                  bool gaussian = false) {
  const int me = static_cast<int>(comm.rank());
  const int ranks = static_cast<int>(comm.size());
  const cp::sharded_plan<W, S> plan(worker, server, n, ranks);
  const std::uint64_t c = ref_chunk(n, ranks, align);
  if (plan.layout().chunk != c)
    f.push_back(where(name, me, n, 0) + ": chunk length");
  const auto off = [&](int j) { return std::min(n, static_cast<std::uint64_t>(j) * c); };
  const auto len = [&](int j) { return std::min(n, off(j) + c) - off(j); };
  if (plan.shard_size(me) != len(me))
    f.push_back(where(name, me, n, 0) + ": shard size");

  auto st = plan.make_state(me);
  std::vector<std::byte> ws(plan.workspace_bytes());
  std::vector<typename cp::sharded_plan<W, S>::state_type> rep;
  for (int r = 0; r < ranks; ++r)
    rep.push_back(plan.make_state(r));
  const float w = 1.0f / static_cast<float>(ranks);

  std::vector<double> sum_out(n, 0.0), sum_mean(n, 0.0);
  double gmax = 0.0;
  for (int t = 0; t < steps; ++t) {
    const auto tt = static_cast<std::uint64_t>(t);
    const cp::context ctx{.seed = 77, .step = tt, .tensor_id = 4};
    const auto in = inputs(me, tt, n, 29, gaussian);
    std::vector<float> out(n), shard(len(me));
    // The reduce-scatter half alone (FSDP path) on a copy of the state, then the full path.
    auto st_rs = st;
    const auto rs =
        cp::reduce_scatter_compressed(comm, cp::cpu::seq, plan, st_rs, ctx, in, shard, ws);
    const auto both =
        cp::sharded_all_reduce_compressed(comm, cp::cpu::seq, plan, st, ctx, in, out, ws);
    std::vector<std::size_t> worker_lengths, server_lengths; // every (rank, chunk); every owner
    std::size_t my_worker_bytes = 0, my_server_bytes = 0;

    // Replay: every rank encodes every chunk; owners average in rank order, re-encode, and
    // everyone decodes every owner's payload.
    std::vector<float> ref(n);
    std::vector<std::vector<std::byte>> sent(static_cast<std::size_t>(ranks * ranks));
    for (int r = 0; r < ranks; ++r) {
      const auto g = inputs(r, tt, n, 29, gaussian);
      for (std::uint64_t i = 0; i < n; ++i) {
        sum_mean[i] += static_cast<double>(g[i]) / ranks;
        gmax = std::max(gmax, std::fabs(static_cast<double>(g[i])));
      }
      for (int j = 0; j < ranks; ++j) {
        auto& p = sent[static_cast<std::size_t>(r * ranks + j)];
        p.resize(worker.max_payload_bytes(len(j)));
        std::vector<std::byte> pws(worker.workspace_bytes(len(j)));
        const auto sent = cp::encode(
            cp::cpu::seq, worker,
            rep[static_cast<std::size_t>(r)].worker[static_cast<std::size_t>(j)], ctx,
            std::span<const float>(g).subspan(off(j), len(j)), std::span(p), std::span(pws));
        worker_lengths.push_back(sent.bytes);
        if (r == me)
          my_worker_bytes += sent.bytes;
      }
    }
    for (int j = 0; j < ranks; ++j) {
      std::vector<float> avg(len(j), 0.0f);
      for (int r = 0; r < ranks; ++r)
        cp::decode_accumulate(
            cp::cpu::seq, worker,
            std::span<const std::byte>(sent[static_cast<std::size_t>(r * ranks + j)]),
            std::span(avg), w);
      if (j == me && !same_bits(shard, avg))
        f.push_back(where(name, me, n, tt) + ": reduce-scatter shard != replay");
      std::vector<std::byte> q(server.max_payload_bytes(len(j))),
          sws(server.workspace_bytes(len(j)));
      const auto sent = cp::encode(cp::cpu::seq, server, rep[static_cast<std::size_t>(j)].server,
                                   ctx, std::span<const float>(avg), std::span(q), std::span(sws));
      server_lengths.push_back(sent.bytes);
      if (j == me)
        my_server_bytes = sent.bytes;
      cp::decode(cp::cpu::seq, server.codec, std::span<const std::byte>(q),
                 std::span(ref).subspan(off(j), len(j)));
    }
    if (!same_bits(out, ref))
      f.push_back(where(name, me, n, tt) + ": output != replay");
    const bool wv = cp::has_variable_body(worker.codec), sv = cp::has_variable_body(server.codec);
    const auto per_rank = static_cast<std::size_t>(ranks);
    const std::size_t rs_wire =
        sharded_wire(wv, ranks, per_rank, plan.worker_slot_bytes(), worker_lengths);
    const std::size_t ag_wire =
        sharded_wire(sv, ranks, 1, plan.server_slot_bytes(), server_lengths);
    if (rs.wire_bytes != rs_wire || both.wire_bytes != rs_wire + ag_wire)
      f.push_back(where(name, me, n, tt) + ": wire bytes " + std::to_string(rs.wire_bytes) + " + " +
                  std::to_string(both.wire_bytes - rs.wire_bytes) + ", expected " +
                  std::to_string(rs_wire) + " + " + std::to_string(ag_wire));
    if (rs_wire > plan.reduce_scatter_wire_bytes() || ag_wire > plan.all_gather_wire_bytes())
      f.push_back(where(name, me, n, tt) + ": wire bytes above the plan's worst case");
    if (rs.payload_bytes != my_worker_bytes ||
        both.payload_bytes != my_worker_bytes + my_server_bytes)
      f.push_back(where(name, me, n, tt) + ": payload bytes");
    if (gaussian && wv && ranks > 1 && n > 1000) {
      if (std::count(worker_lengths.begin(), worker_lengths.end(), worker_lengths[0]) ==
          static_cast<std::ptrdiff_t>(worker_lengths.size()))
        f.push_back(where(name, me, n, tt) + ": every worker payload has the same length");
      if (!(rs_wire < plan.reduce_scatter_wire_bytes()))
        f.push_back(where(name, me, n, tt) + ": variable-length payloads sent no fewer bytes");
    }
    if (gaussian && sv && ranks > 1 && n > 1000 &&
        std::count(server_lengths.begin(), server_lengths.end(), server_lengths[0]) == ranks)
      f.push_back(where(name, me, n, tt) + ": every server payload has the same length");
    if (!same_on_all_ranks(comm, out))
      f.push_back(where(name, me, n, tt) + ": ranks differ");
    const auto& mine = rep[static_cast<std::size_t>(me)];
    bool states = st.server == mine.server;
    for (int j = 0; j < ranks; ++j)
      states = states &&
               st.worker[static_cast<std::size_t>(j)] == mine.worker[static_cast<std::size_t>(j)];
    if (!states)
      f.push_back(where(name, me, n, tt) + ": EF states != replica");
    for (std::uint64_t i = 0; i < n; ++i)
      sum_out[i] += out[i];
  }
  if constexpr (std::same_as<typename W::feedback_type, cp::ef> &&
                std::same_as<typename S::feedback_type, cp::ef>) {
    if (!telescoping)
      return;
    // E8: sum_t out_t = sum_t mean_i g_i,t - (mean_i e_w,i,T + e_s,T), chunk by chunk.
    double worst = 0.0, lossy = 0.0;
    for (int j = 0; j < ranks; ++j) {
      for (std::uint64_t k = 0; k < len(j); ++k) {
        const std::uint64_t i = off(j) + k;
        double ew = 0.0;
        for (int r = 0; r < ranks; ++r)
          ew += static_cast<double>(rep[static_cast<std::size_t>(r)]
                                        .worker[static_cast<std::size_t>(j)]
                                        .residual()[k]) /
                ranks;
        const double es =
            static_cast<double>(rep[static_cast<std::size_t>(j)].server.residual()[k]);
        worst = std::max(worst, std::fabs(sum_out[i] - (sum_mean[i] - (ew + es))));
        lossy = std::max(lossy, std::fabs(sum_out[i] - sum_mean[i]));
      }
    }
    // Float rounding of the EF updates and of the 1/N weights: a few ulps per step.
    const double tol = 1e-5 * gmax * steps;
    if (!(worst <= tol))
      f.push_back(where(name, me, n, 0) + ": E8 telescoping off by " + std::to_string(worst));
    if (n > 0 && !(lossy > 100 * tol))
      f.push_back(where(name, me, n, 0) + ": compression was lossless; E8 checks nothing");
  }
}

/// The sharded path: replay-exact shards (FSDP half) and outputs, identical bits on every
/// rank, EF states equal to the replica's, E8 telescoping, sizes that do not divide by N or by
/// the block (A2), empty trailing chunks, identity = exact sum.
template <class Comm> failures check_sharded(Comm& comm) {
  failures f;
  const int me = static_cast<int>(comm.rank());
  const int ranks = static_cast<int>(comm.size());
  const cp::pipeline<cp::ef, cp::sign> sgn{
      {}, {.granularity = cp::sign_granularity::block, .block = 32, .scale = cp::sign_scale::rms}};
  const cp::pipeline<cp::ef, cp::quantize> q8{{}, {.bits = 8, .group = 64}};
  const cp::pipeline<cp::ef, cp::top_k> tk{{}, {.fraction = 0.2f}};
  // Windows of 32 and quantize groups of 96: chunks are multiples of lcm(32, 96) = 96.
  const cp::pipeline<cp::ef, cp::rotated<cp::quantize>> rot{{}, {{.bits = 4, .group = 96}, 5}};
  // QSGD with Elias bodies (variable length) at both points, with and without feedback, and
  // with a fixed-length server: blocks of 64 elements, chunks of multiples of 64.
  const cp::qsgd4 elias{.block = 64, .coding = cp::qsgd_coding::elias};
  const cp::pipeline<cp::ef, cp::qsgd4> ef_elias{{}, elias};
  const cp::pipeline<cp::none, cp::qsgd4> elias_only{{}, elias};
  for (const std::uint64_t n : {std::uint64_t{1003}, std::uint64_t{5}, std::uint64_t{1}}) {
    sharded_case(comm, f, sgn, sgn, n, 32, "sharded ef+sign", 12, n > 5);
    sharded_case(comm, f, sgn, q8, n, 64, "sharded ef+sign / ef+quantize8", 12, n > 5);
    sharded_case(comm, f, tk, tk, n, 1, "sharded ef+top_k", 12, n > 5);
    sharded_case(comm, f, rot, rot, n, 96, "sharded ef+rotated quantize", 12, n > 5);
    sharded_case(comm, f, ef_elias, ef_elias, n * 4, 64, "sharded ef+qsgd4 elias", 4, n > 5, true);
    sharded_case(comm, f, elias_only, elias_only, n * 4, 64, "sharded qsgd4 elias", 2, false, true);
    sharded_case(comm, f, ef_elias, q8, n * 4, 64, "sharded ef+qsgd4 elias / ef+quantize8", 2,
                 false, true);
  }
  // Identity at both points, scaling::sum, integer inputs: the exact sum (E8, identity).
  {
    const cp::pipeline<cp::none, cp::identity> id{};
    const std::uint64_t n = 1001;
    const cp::sharded_plan plan(id, n, ranks, {.scale = cp::scaling::sum});
    auto st = plan.make_state(me);
    std::vector<std::byte> ws(plan.workspace_bytes());
    std::vector<float> in(n), out(n);
    for (std::uint64_t i = 0; i < n; ++i)
      in[i] = integer_value(me, i);
    cp::sharded_all_reduce_compressed(comm, cp::cpu::seq, plan, st, {}, in, out, ws);
    bool exact = true;
    for (std::uint64_t i = 0; i < n; ++i) {
      float s = 0.0f;
      for (int r = 0; r < ranks; ++r)
        s += integer_value(r, i);
      exact = exact && out[i] == s;
    }
    if (!exact)
      f.push_back(where("sharded identity sum not exact", me, n, 0));
  }
  return f;
}

// --- variable-length payloads: a bad peer length -----------------------------------------------

/// A communicator that forwards to `inner`, except that in the result of its `corrupt_call`-th
/// all_gather (from 0) it overwrites the first 8 bytes of rank 1's block with `value`: every rank
/// reads the same bad payload length, as if rank 1 had reported it.
template <class Comm> struct tampering_communicator {
  Comm& inner;
  int corrupt_call = 0;
  std::uint64_t value = 0;
  int calls = 0;

  [[nodiscard]] int rank() const { return static_cast<int>(inner.rank()); }
  [[nodiscard]] int size() const { return static_cast<int>(inner.size()); }
  void all_gather(std::span<const std::byte> in, std::span<std::byte> out) {
    inner.all_gather(in, out);
    if (calls++ == corrupt_call && size() > 1 && in.size() >= sizeof value)
      std::memcpy(out.data() + in.size(), &value, sizeof value);
  }
  void all_to_all(std::span<const std::byte> in, std::span<std::byte> out) {
    inner.all_to_all(in, out);
  }
  void send(std::span<const std::byte> b, int peer, int tag) { inner.send(b, peer, tag); }
  void recv(std::span<std::byte> b, int peer, int tag) { inner.recv(b, peer, tag); }
  void all_reduce_sum(std::span<float> x) { inner.all_reduce_sum(x); }
  void barrier() { inner.barrier(); }
};

/// Runs `call` and returns whether it threw commpress::error with errc::corrupt.
template <class F> bool refused_as_corrupt(F&& call) {
  try {
    call();
  } catch (const cp::error& e) {
    return e.code() == cp::errc::corrupt;
  }
  return false;
}

/// A peer's payload length below the header or above the slot fails every rank with
/// errc::corrupt before anything is decoded: all_gather_compressed and both sharded halves.
/// Needs two ranks or more (one rank has no peer).
template <class Comm> failures check_corrupt_length(Comm& comm) {
  failures f;
  const int me = static_cast<int>(comm.rank());
  const int ranks = static_cast<int>(comm.size());
  if (ranks < 2)
    return f;
  const cp::pipeline<cp::ef, cp::qsgd4> pipe{{}, {.block = 64, .coding = cp::qsgd_coding::elias}};
  const std::uint64_t n = 1000;
  const cp::context ctx{.seed = 3, .step = 0, .tensor_id = 8};
  const auto in = inputs(me, 0, n, 41, true);
  std::vector<float> out(n);
  {
    const cp::all_gather_plan plan(pipe, n, ranks);
    auto st = plan.make_state();
    std::vector<std::byte> ws(plan.workspace_bytes());
    for (const std::uint64_t bad : {std::uint64_t{0}, std::uint64_t{cp::format::header_bytes - 1},
                                    plan.payload_bytes() + 1, ~std::uint64_t{0}}) {
      tampering_communicator<Comm> t{comm, 0, bad};
      if (!refused_as_corrupt(
              [&] { cp::all_gather_compressed(t, cp::cpu::seq, plan, st, ctx, in, out, ws); }))
        f.push_back(where("all_gather: bad peer length not refused as corrupt", me, bad, 0));
    }
  }
  {
    const cp::sharded_plan plan(pipe, n, ranks);
    auto st = plan.make_state(me);
    std::vector<std::byte> ws(plan.workspace_bytes());
    std::vector<float> shard(plan.shard_size(me));
    for (const std::uint64_t bad :
         {std::uint64_t{cp::format::header_bytes - 1}, plan.worker_slot_bytes() + 1}) {
      tampering_communicator<Comm> t{comm, 0, bad};
      if (!refused_as_corrupt([&] {
            cp::reduce_scatter_compressed(t, cp::cpu::seq, plan, st, ctx, in, shard, ws);
          }))
        f.push_back(where("reduce_scatter: bad peer length not refused as corrupt", me, bad, 0));
    }
    for (const std::uint64_t bad :
         {std::uint64_t{cp::format::header_bytes - 1}, plan.server_slot_bytes() + 1}) {
      tampering_communicator<Comm> t{comm, 0, bad};
      if (!refused_as_corrupt([&] {
            cp::all_gather_shard_compressed(t, cp::cpu::seq, plan, st, ctx,
                                            std::span<const float>(shard), out, ws);
          }))
        f.push_back(where("all_gather_shard: bad peer length not refused as corrupt", me, bad, 0));
    }
    // The same exchange with the length left alone goes through (the tampering is what fails).
    tampering_communicator<Comm> t{comm, -1, 0};
    cp::sharded_all_reduce_compressed(t, cp::cpu::seq, plan, st, ctx, in, out, ws);
  }
  return f;
}

// --- stage channels ------------------------------------------------------------------------------

/// Pipelines of the 3-stage test: forward 0->1 EF21 + top_k, 1->2 AQ-SGD + 4-bit quantize with
/// sample ids, backward 2->1 EF + 8-bit quantize, 1->0 bf16 cast.
struct stage_setup {
  static constexpr std::uint64_t rows = 4, width = 16, n = rows * width, samples = 6;
  cp::pipeline<cp::ef21, cp::top_k> fwd01{{}, {.fraction = 0.25f}};
  cp::pipeline<cp::aq_sgd<cp::store_f32>, cp::quantize> fwd12{
      {.samples = samples, .sample_size = width, .warmup_steps = 2}, {.bits = 4, .group = 16}};
  cp::pipeline<cp::ef, cp::quantize> bwd21{{}, {.bits = 8, .group = 32}};
  cp::pipeline<cp::none, cp::cast> bwd10{{}, {.to = cp::dtype::bf16}};

  static std::vector<std::uint64_t> ids(std::uint64_t t) {
    std::vector<std::uint64_t> v(rows);
    for (std::uint64_t r = 0; r < rows; ++r)
      v[r] = (t * rows + r) % samples;
    return v;
  }
  static std::vector<float> batch(std::uint64_t t) {
    // Rows are a function of the sample id, so AQ-SGD's cache sees repeated activations.
    std::vector<float> x(n);
    const auto id = ids(t);
    for (std::uint64_t r = 0; r < rows; ++r)
      for (std::uint64_t c = 0; c < width; ++c)
        x[r * width + c] = gen(0, id[r], c, 51) + 0.01f * static_cast<float>(t % 3);
    return x;
  }
  static std::vector<float> stage1(std::span<const float> a) {
    std::vector<float> y(a.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      y[i] = a[i] * 0.5f + 0.25f * static_cast<float>(i % 3);
    return y;
  }
  static std::vector<float> stage2_grad(std::span<const float> a, std::uint64_t t) {
    std::vector<float> g(a.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      g[i] = a[i] - gen(2, t, i, 53);
    return g;
  }
  static std::vector<float> stage1_grad(std::span<const float> g2) {
    std::vector<float> g(g2.size());
    for (std::size_t i = 0; i < g2.size(); ++i)
      g[i] = g2[i] * 0.5f - 0.125f;
    return g;
  }
};

/// What each boundary delivered at each step: [step][boundary] with boundary 0 = a0 at stage 1,
/// 1 = a1 at stage 2, 2 = g2 at stage 1, 3 = g1 at stage 0.
using stage_trace = std::vector<std::vector<std::vector<float>>>;

/// The single-process reference: the four channels as sender_end / receiver_end pairs.
inline stage_trace stage_reference(std::uint64_t steps) {
  const stage_setup s;
  const auto n = stage_setup::n;
  cp::sender_end tx01(s.fwd01, n, {.seed = 1, .tensor_id = 10});
  cp::receiver_end rx01(s.fwd01, n, {.seed = 1, .tensor_id = 10});
  cp::sender_end tx12(s.fwd12, n, {.seed = 2, .tensor_id = 11});
  cp::receiver_end rx12(s.fwd12, n, {.seed = 2, .tensor_id = 11});
  cp::sender_end tx21(s.bwd21, n, {.seed = 3, .tensor_id = 20});
  cp::receiver_end rx21(s.bwd21, n, {.seed = 3, .tensor_id = 20});
  cp::sender_end tx10(s.bwd10, n, {.seed = 4, .tensor_id = 21});
  cp::receiver_end rx10(s.bwd10, n, {.seed = 4, .tensor_id = 21});
  stage_trace trace;
  for (std::uint64_t t = 0; t < steps; ++t) {
    const auto ids = stage_setup::ids(t);
    const auto x = stage_setup::batch(t);
    const auto a0 = rx01.receive(tx01.send(x));
    std::vector<float> r0(a0.begin(), a0.end());
    const auto a1 = stage_setup::stage1(r0);
    const auto ra1 = rx12.receive(tx12.send(ids, a1), ids);
    std::vector<float> r1(ra1.begin(), ra1.end());
    const auto g2 = stage_setup::stage2_grad(r1, t);
    const auto rg2 = rx21.receive(tx21.send(g2));
    std::vector<float> r2(rg2.begin(), rg2.end());
    const auto g1 = stage_setup::stage1_grad(r2);
    const auto rg1 = rx10.receive(tx10.send(g1));
    trace.push_back({r0, r1, r2, std::vector<float>(rg1.begin(), rg1.end())});
  }
  return trace;
}

/// Three ranks run the three stages over stage_sender / stage_receiver (forward activations,
/// backward gradients, AQ-SGD ids alongside); what each rank receives equals the
/// single-process reference bit for bit. Needs exactly 3 ranks (others only pass through).
template <class Comm> failures check_stage_pipeline(Comm& comm) {
  failures f;
  if (comm.size() != 3)
    return f;
  const int me = static_cast<int>(comm.rank());
  const std::uint64_t steps = 6;
  const auto ref = stage_reference(steps);
  const stage_setup s;
  const auto n = stage_setup::n;
  const auto bad = [&](std::uint64_t t, const char* what) {
    f.push_back(where(what, me, n, t) + ": != single-process channel");
  };
  if (me == 0) {
    cp::stage_sender tx(comm, 1, 10, s.fwd01, n, {.seed = 1, .tensor_id = 10});
    cp::stage_receiver rx(comm, 1, 21, s.bwd10, n, {.seed = 4, .tensor_id = 21});
    for (std::uint64_t t = 0; t < steps; ++t) {
      tx.send(stage_setup::batch(t));
      if (!same_bits(rx.receive(), ref[t][3]))
        bad(t, "stage 0 gradient");
    }
  } else if (me == 1) {
    cp::stage_receiver rx01(comm, 0, 10, s.fwd01, n, {.seed = 1, .tensor_id = 10});
    cp::stage_sender tx12(comm, 2, 11, s.fwd12, n, {.seed = 2, .tensor_id = 11});
    cp::stage_receiver rx21(comm, 2, 20, s.bwd21, n, {.seed = 3, .tensor_id = 20});
    cp::stage_sender tx10(comm, 0, 21, s.bwd10, n, {.seed = 4, .tensor_id = 21});
    for (std::uint64_t t = 0; t < steps; ++t) {
      const auto a0 = rx01.receive();
      if (!same_bits(a0, ref[t][0]))
        bad(t, "stage 1 activation");
      tx12.send(stage_setup::ids(t), stage_setup::stage1(a0));
      const auto g2 = rx21.receive();
      if (!same_bits(g2, ref[t][2]))
        bad(t, "stage 1 gradient");
      tx10.send(stage_setup::stage1_grad(g2));
    }
  } else {
    cp::stage_receiver rx12(comm, 1, 11, s.fwd12, n, {.seed = 2, .tensor_id = 11});
    cp::stage_sender tx21(comm, 1, 20, s.bwd21, n, {.seed = 3, .tensor_id = 20});
    for (std::uint64_t t = 0; t < steps; ++t) {
      const auto a1 = rx12.receive();
      const auto ids = stage_setup::ids(t);
      if (!std::equal(ids.begin(), ids.end(), rx12.ids().begin(), rx12.ids().end()))
        f.push_back(where("stage 2 sample ids", me, n, t));
      if (!same_bits(a1, ref[t][1]))
        bad(t, "stage 2 activation");
      tx21.send(stage_setup::stage2_grad(a1, t));
    }
  }
  comm.barrier();
  return f;
}

/// What data_parallel_replay_step sent: each rank's message bytes (its payloads as encoded and
/// its uncompressed tensors as fp32) and each rank's payload length of the first compressed
/// tensor.
struct replayed_step {
  std::vector<std::size_t> message;
  std::vector<std::size_t> first_lengths;
};

/// One step of data_parallel replayed in one process: every rank's gradient grad(r, step), its
/// compressed tensors encoded one by one with its replica states (`states[r]`, grown on first
/// use) and tensor ids 40 + i, decoded in rank order with weight 1/N into `mean`, the others
/// added as fp32.
template <class Pipe, class Grad>
replayed_step
data_parallel_replay_step(const Pipe& pipe, const std::vector<cp::tensor_info>& layout,
                          const std::vector<bool>& compressed, int ranks, std::uint64_t step,
                          Grad&& grad, std::vector<std::vector<cp::pipeline_state_t<Pipe>>>& states,
                          std::vector<float>& mean) {
  replayed_step out{std::vector<std::size_t>(static_cast<std::size_t>(ranks), 0), {}};
  const float w = 1.0f / static_cast<float>(ranks);
  for (int r = 0; r < ranks; ++r) {
    const auto g = grad(r, step);
    auto& mine = states[static_cast<std::size_t>(r)];
    std::size_t& message = out.message[static_cast<std::size_t>(r)];
    std::uint64_t first = 0;
    for (std::size_t i = 0, k = 0; i < layout.size(); ++i) {
      const std::uint64_t count = layout[i].count();
      const auto sum = std::span(mean).subspan(first, count);
      if (compressed[i]) {
        if (mine.size() <= k)
          mine.push_back(pipe.make_state(count));
        std::vector<std::byte> payload(pipe.max_payload_bytes(count)),
            ws(pipe.workspace_bytes(count));
        const cp::context ctx{
            .seed = 5, .step = step, .tensor_id = 40 + static_cast<std::uint32_t>(i)};
        const auto sent = cp::encode(cp::cpu::seq, pipe, mine[k++], ctx,
                                     std::span<const float>(g).subspan(first, count),
                                     std::span(payload), std::span(ws));
        message += sent.bytes;
        if (k == 1)
          out.first_lengths.push_back(sent.bytes);
        cp::decode_accumulate(cp::cpu::seq, pipe,
                              std::span<const std::byte>(payload).first(sent.bytes), sum, w);
      } else {
        message += 4 * count;
        for (std::uint64_t j = 0; j < count; ++j)
          sum[j] = sum[j] + w * g[first + j];
      }
      first += count;
    }
  }
  return out;
}

/// data_parallel over a layout of tensors with a layer policy: each rank's parameters after
/// three steps equal the one-process replay (every rank's tensors encoded one by one with their
/// own states and tensor ids, the uncompressed ones added as fp32, rank order, weight 1/N), and
/// are the same bits on every rank.
template <class Comm> failures check_data_parallel_layers(Comm& comm) {
  failures f;
  const int me = comm.rank();
  const int ranks = comm.size();
  // A weight, its bias (1-D), an excluded embedding, a second weight, and one below the size
  // threshold: 243 elements.
  const std::vector<std::uint64_t> w1{12, 10}, b1{12}, emb{5, 8}, w2{7, 9}, tiny{2, 4};
  const std::vector<cp::tensor_info> layout{{"fc1.weight", w1},
                                            {"fc1.bias", b1},
                                            {"embed.weight", emb},
                                            {"fc2.weight", w2},
                                            {"head.scale", tiny}};
  const cp::layer_policy policy{.min_elements = 16, .exclude = {"embed.*"}};
  const cp::pipeline<cp::ef, cp::quantize> pipe{{},
                                                {.bits = 2,
                                                 .granularity = cp::scale_granularity::block,
                                                 .group = 32,
                                                 .round = cp::rounding::stochastic}};
  const cp::sgd opt{.lr = 0.1f, .momentum = 0.5f};
  constexpr std::uint64_t n = 243, steps = 3;
  const std::vector<bool> compressed{true, false, false, true, false};
  auto grad = [](int rank, std::uint64_t step) { return inputs(rank, step, n, 71); };

  cp::data_parallel dp(comm, pipe, opt, std::span<const cp::tensor_info>(layout), policy);
  auto fb = dp.make_feedback_state();
  auto os = dp.make_optimizer_state();
  std::vector<float> params = inputs(0, 99, n, 72);
  for (std::size_t i = 0; i < layout.size(); ++i)
    if ((dp.verdict(i) == cp::layer_verdict::compress) != compressed[i])
      f.push_back(where("data_parallel layer verdict", me, i, 0));
  for (std::uint64_t t = 0; t < steps; ++t) {
    const auto g = grad(me, t);
    dp.step(cp::cpu::seq, {.seed = 5, .step = t, .tensor_id = 40}, fb, os, std::span(params),
            std::span<const float>(g));
  }

  // The replay, with replica states of every rank.
  std::vector<std::vector<cp::pipeline_state_t<decltype(pipe)>>> states(
      static_cast<std::size_t>(ranks));
  std::vector<float> ref = inputs(0, 99, n, 72);
  auto ref_os = opt.make_state(n);
  for (std::uint64_t t = 0; t < steps; ++t) {
    std::vector<float> mean(n, 0.0f);
    data_parallel_replay_step(pipe, layout, compressed, ranks, t, grad, states, mean);
    opt.step(cp::cpu::seq, ref_os, std::span(ref), std::span<const float>(mean));
  }
  if (!same_bits(params, ref))
    f.push_back(where("data_parallel with a layer policy: parameters", me, n, steps));
  if (!same_on_all_ranks(comm, std::span<const float>(params)))
    f.push_back(where("data_parallel with a layer policy: ranks differ", me, n, steps));
  return f;
}

// --- data_parallel and onebit_adam: variable-length payloads ------------------------------------

/// The layout of the variable-length data_parallel checks: two weights the policy compresses,
/// a bias below its size threshold, an excluded embedding and a small scale sent as fp32.
inline std::vector<cp::tensor_info> variable_layout() {
  static constexpr std::uint64_t w1[]{32, 40}, b1[]{12}, emb[]{5, 8}, w2[]{24, 30}, tiny[]{2, 4};
  return {{"fc1.weight", w1},
          {"fc1.bias", b1},
          {"embed.weight", emb},
          {"fc2.weight", w2},
          {"head.scale", tiny}};
}

/// data_parallel with `pipe` over variable_layout(): after every step the parameters equal the
/// one-process replay (every rank's tensors encoded with their own states and tensor ids,
/// decoded in rank order with weight 1/N, the uncompressed ones added as fp32), the same bits
/// on every rank; the result's payload_bytes is this rank's message as encoded and its
/// wire_bytes (N - 1) * (8 C + the longest message) for a variable-length codec with C
/// compressed tensors, (N - 1) * payload_bytes() (the old slots, one call) for a fixed one.
template <class Comm, class Pipe>
void data_parallel_variable_case(Comm& comm, failures& f, const Pipe& pipe, const char* name) {
  const int me = comm.rank();
  const int ranks = comm.size();
  const auto layout = variable_layout();
  const cp::layer_policy policy{.min_elements = 16, .exclude = {"embed.*"}};
  const std::vector<bool> compressed{true, false, false, true, false};
  const cp::sgd opt{.lr = 0.1f, .momentum = 0.5f};
  std::uint64_t n = 0;
  for (const auto& t : layout)
    n += t.count();
  constexpr std::uint64_t steps = 3;
  auto grad = [n](int rank, std::uint64_t step) { return inputs(rank, step, n, 83, true); };
  const bool variable = cp::variable_payloads(pipe);

  cp::data_parallel dp(comm, pipe, opt, std::span<const cp::tensor_info>(layout), policy);
  if (dp.variable() != variable)
    f.push_back(where(name, me, n, 0) + ": variable() is wrong");
  auto fb = dp.make_feedback_state();
  auto os = dp.make_optimizer_state();
  std::vector<float> params = inputs(0, 99, n, 84);

  std::vector<std::vector<cp::pipeline_state_t<Pipe>>> states(static_cast<std::size_t>(ranks));
  std::vector<float> ref = inputs(0, 99, n, 84);
  auto ref_os = opt.make_state(n);
  bool lengths_differ = false;
  for (std::uint64_t t = 0; t < steps; ++t) {
    const auto g = grad(me, t);
    const cp::data_parallel_result res =
        dp.step(cp::cpu::seq, {.seed = 5, .step = t, .tensor_id = 40}, fb, os, std::span(params),
                std::span<const float>(g));

    std::vector<float> mean(n, 0.0f);
    const auto [message, first_lengths] =
        data_parallel_replay_step(pipe, layout, compressed, ranks, t, grad, states, mean);
    opt.step(cp::cpu::seq, ref_os, std::span(ref), std::span<const float>(mean));
    if (!same_bits(params, ref))
      f.push_back(where(name, me, n, t) + ": parameters != replay");
    if (!same_bits(dp.mean_gradient(), mean))
      f.push_back(where(name, me, n, t) + ": mean gradient != replay");
    if (!same_on_all_ranks(comm, std::span<const float>(params)))
      f.push_back(where(name, me, n, t) + ": ranks differ");

    const auto peers = static_cast<std::size_t>(ranks - 1);
    const std::size_t wire =
        variable ? peers * (8 * 2 + *std::max_element(message.begin(), message.end()))
                 : peers * dp.payload_bytes();
    if (res.wire_bytes != wire || res.payload_bytes != message[static_cast<std::size_t>(me)])
      f.push_back(where(name, me, n, t) + ": wire bytes " + std::to_string(res.wire_bytes) +
                  ", payload bytes " + std::to_string(res.payload_bytes) + "; expected " +
                  std::to_string(wire) + ", " +
                  std::to_string(message[static_cast<std::size_t>(me)]));
    if (!variable && (res.payload_bytes != dp.payload_bytes() || wire != dp.wire_bytes()))
      f.push_back(where(name, me, n, t) + ": a fixed-length message is not its slots");
    if (variable && ranks > 1 && !(res.wire_bytes < dp.wire_bytes()))
      f.push_back(where(name, me, n, t) + ": variable-length payloads sent no fewer bytes");
    if (std::count(first_lengths.begin(), first_lengths.end(), first_lengths[0]) != ranks)
      lengths_differ = true;
  }
  if (variable && ranks > 1 && !lengths_differ)
    f.push_back(where(name, me, n, steps) + ": every rank's payload has the same length");
}

/// onebit_adam's gather_exchange with `pipe`, from the first step compressed (freeze_step 0,
/// the variance set to a non-zero constant): after every step the momentum and the parameters
/// equal the one-process replay (every rank's local momentum encoded with its own worker error,
/// decoded in rank order with weight 1/N, then the frozen-variance update), the same bits on
/// every rank; wire_bytes is (N - 1) * (8 + the longest payload) for a variable-length codec and
/// the runner's fixed (N - 1) * payload_bytes() for a fixed one.
template <class Comm, class Pipe>
void onebit_variable_case(Comm& comm, failures& f, const Pipe& pipe, const char* name) {
  const int me = comm.rank();
  const int ranks = comm.size();
  constexpr std::uint64_t n = 1500, steps = 3;
  const cp::onebit_adam_config cfg{.lr = 1e-2f, .freeze_step = 0};
  const bool variable = cp::variable_payloads(pipe);
  auto grad = [](int rank, std::uint64_t step) { return inputs(rank, step, n, 91, true); };

  cp::onebit_adam<Comm, Pipe> opt(comm, pipe, cfg, n);
  if (opt.exchange().variable() != variable)
    f.push_back(where(name, me, n, 0) + ": variable() is wrong");
  auto st = opt.make_state();
  std::fill(st.exp_avg_sq.begin(), st.exp_avg_sq.end(), 0.25f);
  auto fb = opt.make_feedback_state();
  std::vector<float> params = inputs(0, 98, n, 92);

  std::vector<cp::pipeline_state_t<Pipe>> states;
  for (int r = 0; r < ranks; ++r)
    states.push_back(pipe.make_state(n));
  std::vector<float> m(n, 0.0f), ref = inputs(0, 98, n, 92);
  bool lengths_differ = false;
  for (std::uint64_t t = 0; t < steps; ++t) {
    const cp::context ctx{.seed = 6, .step = t, .tensor_id = 3};
    const auto g = grad(me, t);
    const cp::onebit_adam_result res =
        opt.step(cp::cpu::seq, ctx, st, fb, std::span(params), std::span<const float>(g));

    std::vector<float> avg(n, 0.0f);
    std::vector<std::size_t> lengths;
    for (int r = 0; r < ranks; ++r) {
      const auto gr = grad(r, t);
      std::vector<float> local(n);
      for (std::uint64_t i = 0; i < n; ++i)
        local[i] = cfg.local_momentum(m[i], gr[i]);
      std::vector<std::byte> payload(pipe.max_payload_bytes(n)), ws(pipe.workspace_bytes(n));
      const auto sent =
          cp::encode(cp::cpu::seq, pipe, states[static_cast<std::size_t>(r)], ctx,
                     std::span<const float>(local), std::span(payload), std::span(ws));
      lengths.push_back(sent.bytes);
      cp::decode_accumulate(cp::cpu::seq, pipe,
                            std::span<const std::byte>(payload).first(sent.bytes), std::span(avg),
                            1.0f / static_cast<float>(ranks));
    }
    m = avg;
    for (std::uint64_t i = 0; i < n; ++i)
      ref[i] = cfg.frozen_update(ref[i], m[i], 0.25f);
    if (!same_bits(st.exp_avg, m) || !same_bits(opt.last_average(), m))
      f.push_back(where(name, me, n, t) + ": momentum != replay");
    if (!same_bits(params, ref))
      f.push_back(where(name, me, n, t) + ": parameters != replay");
    if (!same_on_all_ranks(comm, std::span<const float>(params)))
      f.push_back(where(name, me, n, t) + ": ranks differ");

    const auto peers = static_cast<std::size_t>(ranks - 1);
    const std::size_t wire = variable
                                 ? peers * (8 + *std::max_element(lengths.begin(), lengths.end()))
                                 : peers * opt.exchange().payload_bytes();
    if (res.wire_bytes != wire || res.payload_bytes != lengths[static_cast<std::size_t>(me)])
      f.push_back(where(name, me, n, t) + ": wire bytes " + std::to_string(res.wire_bytes) +
                  ", payload bytes " + std::to_string(res.payload_bytes) + "; expected " +
                  std::to_string(wire) + ", " +
                  std::to_string(lengths[static_cast<std::size_t>(me)]));
    if (!variable && wire != opt.compressed_wire_bytes())
      f.push_back(where(name, me, n, t) + ": a fixed-length exchange is not its slots");
    if (variable && ranks > 1 && !(res.wire_bytes < opt.compressed_wire_bytes()))
      f.push_back(where(name, me, n, t) + ": variable-length payloads sent no fewer bytes");
    if (std::count(lengths.begin(), lengths.end(), lengths[0]) != ranks)
      lengths_differ = true;
  }
  if (variable && ranks > 1 && !lengths_differ)
    f.push_back(where(name, me, n, steps) + ": every rank's payload has the same length");
}

/// data_parallel and onebit_adam (gather_exchange) with QSGD Elias bodies (variable length),
/// with and without error feedback, and with fixed-length codecs (quantize, sign), whose bytes
/// and calls must stay those of the fixed slots.
template <class Comm> failures check_optim_variable(Comm& comm) {
  failures f;
  const cp::qsgd4 elias{.block = 64, .coding = cp::qsgd_coding::elias};
  const cp::pipeline<cp::ef, cp::qsgd4> ef_elias{{}, elias};
  const cp::pipeline<cp::none, cp::qsgd4> elias_only{{}, elias};
  const cp::pipeline<cp::ef, cp::quantize> q2{{},
                                              {.bits = 2,
                                               .granularity = cp::scale_granularity::block,
                                               .group = 32,
                                               .round = cp::rounding::stochastic}};
  const cp::pipeline<cp::ef, cp::qsgd4> ef_qsgd_fixed{{}, {.block = 64}};
  data_parallel_variable_case(comm, f, ef_elias, "data_parallel ef+qsgd4 elias");
  data_parallel_variable_case(comm, f, elias_only, "data_parallel qsgd4 elias");
  data_parallel_variable_case(comm, f, q2, "data_parallel ef+quantize2 (fixed)");
  data_parallel_variable_case(comm, f, ef_qsgd_fixed, "data_parallel ef+qsgd4 fixed");
  const cp::pipeline<cp::ef, cp::sign> ef_sign{{}, {.scale = cp::sign_scale::rms}};
  onebit_variable_case(comm, f, ef_elias, "onebit_adam ef+qsgd4 elias");
  onebit_variable_case(comm, f, elias_only, "onebit_adam qsgd4 elias");
  onebit_variable_case(comm, f, ef_sign, "onebit_adam ef+sign (fixed)");
  return f;
}

/// A peer's payload length below the header or above its slot fails every rank of
/// data_parallel and of onebit_adam's gather_exchange with errc::corrupt, before anything is
/// decoded; the same steps with the length left alone go through. Needs two ranks or more.
template <class Comm> failures check_optim_corrupt_length(Comm& comm) {
  failures f;
  const int me = comm.rank();
  const int ranks = comm.size();
  if (ranks < 2)
    return f;
  using tamper = tampering_communicator<Comm>;
  const cp::pipeline<cp::ef, cp::qsgd4> pipe{{}, {.block = 64, .coding = cp::qsgd_coding::elias}};
  const auto layout = variable_layout();
  const cp::layer_policy policy{.min_elements = 16, .exclude = {"embed.*"}};
  const cp::sgd opt{.lr = 0.1f};
  std::uint64_t n = 0;
  for (const auto& t : layout)
    n += t.count();
  const auto g = inputs(me, 0, n, 85, true);
  // The first compressed tensor (fc1.weight) is rank 1's first reported length.
  const std::uint64_t slot = pipe.max_payload_bytes(layout[0].count());
  for (const std::uint64_t bad :
       {std::uint64_t{0}, std::uint64_t{cp::format::header_bytes - 1}, slot + 1}) {
    for (const int call : {0, -1}) {
      tamper t{comm, call, bad};
      cp::data_parallel dp(t, pipe, opt, std::span<const cp::tensor_info>(layout), policy);
      auto fb = dp.make_feedback_state();
      auto os = dp.make_optimizer_state();
      std::vector<float> params(n, 0.0f);
      const bool refused = refused_as_corrupt([&] {
        dp.step(cp::cpu::seq, {.seed = 1, .step = 0, .tensor_id = 2}, fb, os, std::span(params),
                std::span<const float>(g));
      });
      if (refused != (call == 0))
        f.push_back(where(call == 0 ? "data_parallel: bad peer length not refused as corrupt"
                                    : "data_parallel: an untampered step refused",
                          me, bad, 0));
    }
  }
  constexpr std::uint64_t m = 1000;
  const auto local = inputs(me, 0, m, 86, true);
  const cp::onebit_adam_config cfg{.freeze_step = 0};
  for (const std::uint64_t bad : {std::uint64_t{cp::format::header_bytes - 1},
                                  pipe.max_payload_bytes(m) + 1, ~std::uint64_t{0}}) {
    for (const int call : {0, -1}) {
      tamper t{comm, call, bad};
      cp::onebit_adam<tamper, decltype(pipe)> ob(t, pipe, cfg, m);
      auto st = ob.make_state();
      auto fb = ob.make_feedback_state();
      std::vector<float> params(m, 0.0f);
      const bool refused = refused_as_corrupt([&] {
        ob.step(cp::cpu::seq, {.seed = 1, .step = 0, .tensor_id = 2}, st, fb, std::span(params),
                std::span<const float>(local));
      });
      if (refused != (call == 0))
        f.push_back(where(call == 0 ? "onebit_adam: bad peer length not refused as corrupt"
                                    : "onebit_adam: an untampered step refused",
                          me, bad, 0));
    }
  }
  return f;
}

} // namespace commpress::test
