// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

/// @file
/// The C++ side of the Python tests: runs the library itself (built by CMake, independently of
/// the binding) on deterministic inputs and writes what it produced to one records file, which
/// python/tests compare with the binding and the PyTorch adapters byte for byte.
///
/// Records: [u32 name length][name][u64 data length][data], little-endian, until end of file.
/// - every configuration of fuzz/codec_table.hpp, each input dtype: payload, decode (f32 and
///   the input dtype), decode_accumulate, roundtrip;
/// - feedback pipelines over several steps: payloads, sender and receiver state blobs, outputs;
/// - stage-boundary channel ends (sender_end / receiver_end) in both directions.
///
/// Usage: commpress_python_reference <output file>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "codec_table.hpp"
#include "commpress/backend/cpu/cast.hpp"
#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/random_k.hpp"
#include "commpress/backend/cpu/sign.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/collective/collective.hpp"
#include "commpress/comm/loopback.hpp"
#include "commpress/pipeline/channel.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace cp = commpress;

namespace {

std::FILE* out_file = nullptr;

void record(const std::string& name, const void* data, std::uint64_t bytes) {
  const auto len = static_cast<std::uint32_t>(name.size());
  std::fwrite(&len, 4, 1, out_file);
  std::fwrite(name.data(), 1, len, out_file);
  std::fwrite(&bytes, 8, 1, out_file);
  if (bytes != 0)
    std::fwrite(data, 1, bytes, out_file);
}
template <class T> void record(const std::string& name, std::span<const T> v) {
  record(name, v.data(), v.size_bytes());
}
template <class T> void record(const std::string& name, const std::vector<T>& v) {
  record(name, std::span<const T>(v));
}

/// The test input: n values of varied magnitude and sign, none zero-scaled away.
std::vector<float> input(std::size_t n, int salt) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(std::sin(0.037 * static_cast<double>(i) + 0.5 * salt) *
                              (1.0 + static_cast<double>((i + salt) % 5)));
  return x;
}

template <class T> std::vector<T> convert(const std::vector<float>& x) {
  std::vector<T> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    y[i] = cp::from_float<T>(x[i]);
  return y;
}

const char* dtype_name(cp::dtype d) {
  return d == cp::dtype::f32 ? "f32" : d == cp::dtype::f16 ? "f16" : "bf16";
}

// --- codecs ---------------------------------------------------------------------------------

constexpr std::size_t codec_n = 1000;
const cp::context codec_ctx{.seed = 42, .step = 3, .tensor_id = 7};

template <class C, class T>
void codec_case(std::size_t index, const C& c, const std::vector<T>& x) {
  const std::string base = "codec/" + std::to_string(index) + "/" + dtype_name(cp::dtype_of_v<T>);
  std::vector<std::byte> payload(cp::max_payload_bytes(c, x.size()));
  std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, x.size()));
  const cp::encode_result r = cp::encode(cp::cpu::seq, c, codec_ctx, std::span<const T>(x),
                                         std::span(payload), std::span(ws));
  payload.resize(r.bytes); // the payload's own bytes: a variable-length body is shorter
  record(base + "/payload", payload);
  std::vector<float> decoded(x.size());
  cp::decode(cp::cpu::seq, c, std::span<const std::byte>(payload), std::span(decoded));
  record(base + "/decoded", decoded);
  std::vector<T> decoded_as(x.size());
  cp::decode(cp::cpu::seq, c, std::span<const std::byte>(payload), std::span(decoded_as));
  record(base + "/decoded_as", decoded_as);
  std::vector<float> acc(x.size());
  for (std::size_t i = 0; i < acc.size(); ++i)
    acc[i] = 0.5f * static_cast<float>(i % 3);
  cp::decode_accumulate(cp::cpu::seq, c, std::span<const std::byte>(payload), std::span(acc),
                        0.25f);
  record(base + "/accumulated", acc);
}

void codecs() {
  const std::vector<float> x = input(codec_n, 0);
  record("input/f32", x);
  record("input/f16", convert<cp::half>(x));
  record("input/bf16", convert<cp::bfloat16>(x));
  for (std::size_t i = 0; i < cp::reliability::config_count; ++i) {
    cp::reliability::with_config(i, [&](const auto& c, bool) {
      codec_case(i, c, x);
      codec_case(i, c, convert<cp::half>(x));
      codec_case(i, c, convert<cp::bfloat16>(x));
      std::vector<float> rt = x;
      std::vector<std::byte> ws(cp::workspace_bytes(cp::cpu::seq, c, rt.size()));
      cp::roundtrip(cp::cpu::seq, c, codec_ctx, std::span(rt), std::span(ws));
      record("codec/" + std::to_string(i) + "/roundtrip", rt);
    });
  }
}

// --- pipelines ------------------------------------------------------------------------------

constexpr std::size_t pipeline_n = 1000;
constexpr std::uint64_t pipeline_steps = 4;
constexpr std::uint32_t pipeline_tensor = 11;

/// Runs `pipe` for a few steps, sender and receiver, recording payloads, outputs and states.
template <class P> void pipeline_case(const std::string& name, const P& pipe) {
  const std::uint64_t n = pipeline_n;
  auto tx = pipe.make_state(n);
  auto rx = pipe.make_receiver_state(n);
  std::vector<std::byte> payload(pipe.max_payload_bytes(n)), ws(pipe.workspace_bytes(n));
  std::vector<float> out(n);
  for (std::uint64_t s = 0; s < pipeline_steps; ++s) {
    const std::vector<float> x = input(n, static_cast<int>(s) + 1);
    const cp::context ctx{.seed = 5, .step = s, .tensor_id = pipeline_tensor};
    const std::string base = "pipeline/" + name + "/" + std::to_string(s);
    record(base + "/input", x);
    const cp::step_result r = cp::encode(cp::cpu::seq, pipe, tx, ctx, std::span<const float>(x),
                                         std::span(payload), std::span(ws));
    record(base + "/payload", std::span<const std::byte>(payload).first(r.bytes));
    cp::decode(cp::cpu::seq, pipe, rx, std::span<const std::byte>(payload).first(r.bytes),
               std::span(out), std::span(ws));
    record(base + "/out", out);
    record(base + "/sender_state", tx.save(pipeline_tensor));
    record(base + "/receiver_state", rx.save(pipeline_tensor));
  }
}

constexpr std::uint64_t aq_samples = 6, aq_row = 50, aq_rows = 4;

/// AQ-SGD: batches of aq_rows rows of sample ids (s * 3 + r) % aq_samples.
template <class P> void aq_case(const std::string& name, const P& pipe) {
  const std::uint64_t n = aq_rows * aq_row;
  auto tx = pipe.make_state(n);
  auto rx = pipe.make_receiver_state(n);
  std::vector<std::byte> payload(pipe.max_payload_bytes(n)), ws(pipe.workspace_bytes(n));
  std::vector<float> out(n);
  for (std::uint64_t s = 0; s < pipeline_steps; ++s) {
    const std::vector<float> x = input(n, static_cast<int>(s) + 1);
    std::vector<std::uint64_t> ids(aq_rows);
    for (std::uint64_t r = 0; r < aq_rows; ++r)
      ids[r] = (s * 3 + r) % aq_samples;
    const cp::context ctx{.seed = 5, .step = s, .tensor_id = pipeline_tensor};
    const std::string base = "pipeline/" + name + "/" + std::to_string(s);
    record(base + "/input", x);
    const cp::step_result r =
        cp::encode(cp::cpu::seq, pipe, tx, ctx, std::span<const std::uint64_t>(ids),
                   std::span<const float>(x), std::span(payload), std::span(ws));
    record(base + "/payload", std::span<const std::byte>(payload).first(r.bytes));
    cp::decode(cp::cpu::seq, pipe, rx, std::span<const std::uint64_t>(ids),
               std::span<const std::byte>(payload).first(r.bytes), std::span(out), std::span(ws));
    record(base + "/out", out);
    record(base + "/sender_state", tx.save(pipeline_tensor));
    record(base + "/receiver_state", rx.save(pipeline_tensor));
  }
}

void pipelines() {
  // Keep in step with PIPELINES in python/tests/reference.py.
  pipeline_case("ef_quantize", cp::pipeline<cp::ef, cp::quantize>{{}, {.bits = 4, .group = 64}});
  pipeline_case("ef21_top_k", cp::pipeline<cp::ef21, cp::top_k>{{}, {.fraction = 0.1f}});
  pipeline_case("loco_int8_quantize",
                cp::pipeline<cp::loco<cp::store_int8>, cp::quantize>{
                    {.beta = 0.8f, .reset_every = 3}, {.bits = 4, .group = 128}});
  pipeline_case("loco_int4_sign", cp::pipeline<cp::loco<cp::store_int4>, cp::sign>{
                                      {.beta = 0.5f, .reset_every = 0}, {}});
  pipeline_case("loco_bf16_random_k",
                cp::pipeline<cp::loco<cp::store_bf16>, cp::random_k>{{}, {.fraction = 0.25f}});
  pipeline_case("loco_f32_cast", cp::pipeline<cp::loco<cp::store_f32>, cp::cast>{
                                     {.beta = 0.3f}, {.to = cp::dtype::f16}});
  pipeline_case("none_quantize",
                cp::pipeline<cp::none, cp::quantize>{{},
                                                     {.bits = 8,
                                                      .granularity = cp::scale_granularity::tensor,
                                                      .group = 0,
                                                      .range = cp::quant_range::asymmetric,
                                                      .round = cp::rounding::stochastic}});
  aq_case("aq_int4_quantize", cp::pipeline<cp::aq_sgd<cp::store_int4>, cp::quantize>{
                                  {.samples = aq_samples, .sample_size = aq_row, .warmup_steps = 1},
                                  {.bits = 4, .group = 25}});
  aq_case("aq_f32_top_k", cp::pipeline<cp::aq_sgd<cp::store_f32>, cp::top_k>{
                              {.samples = aq_samples, .sample_size = aq_row, .warmup_steps = 0},
                              {.fraction = 0.2f}});
}

// --- stage-boundary channel ends ------------------------------------------------------------

constexpr std::size_t channel_rows = 4, channel_cols = 30;
constexpr std::uint64_t channel_steps = 3;

/// One boundary: activations forward (sender on stage i), gradients back (sender on stage
/// i + 1). Records what each receiving end returns. Inference steps (enabled = false) follow.
template <class A, class G>
void channel_case(const std::string& name, const A& act, const G& grad, bool keyed) {
  const std::uint64_t n = channel_rows * channel_cols;
  const cp::context act_base{.seed = 9, .step = 0, .tensor_id = 100};
  const cp::context grad_base{.seed = 9, .step = 0, .tensor_id = 101};
  cp::sender_end<A> act_tx(act, n, act_base);
  cp::receiver_end<A> act_rx(act, n, act_base);
  cp::sender_end<G> grad_tx(grad, n, grad_base);
  cp::receiver_end<G> grad_rx(grad, n, grad_base);
  for (std::uint64_t s = 0; s < channel_steps + 1; ++s) {
    const bool inference = s == channel_steps;
    act_tx.enabled = act_rx.enabled = !inference;
    const std::vector<float> a = input(n, 10 + static_cast<int>(s));
    const std::vector<float> g = input(n, 20 + static_cast<int>(s));
    std::vector<std::uint64_t> ids(channel_rows);
    for (std::size_t r = 0; r < channel_rows; ++r)
      ids[r] = (s + 2 * r) % 8;
    const std::string base = "channel/" + name + "/" + std::to_string(s);
    record(base + "/act_in", a);
    record(base + "/grad_in", g);
    record(base + "/ids", ids);
    std::span<const std::byte> wire;
    std::span<const float> got;
    if constexpr (cp::detail::keyed_by_sample<A>) {
      wire = act_tx.send(std::span<const std::uint64_t>(ids), std::span<const float>(a));
      record(base + "/act_payload", wire);
      got = act_rx.receive(wire, std::span<const std::uint64_t>(ids));
    } else {
      wire = act_tx.send(std::span<const float>(a));
      record(base + "/act_payload", wire);
      got = act_rx.receive(wire);
    }
    record(base + "/act_out", got);
    if (inference)
      continue; // inference has no backward pass
    wire = grad_tx.send(std::span<const float>(g));
    record(base + "/grad_payload", wire);
    record(base + "/grad_out", grad_rx.receive(wire));
  }
  (void)keyed;
  record("channel/" + name + "/act_sender_blob", act_tx.save());
  record("channel/" + name + "/act_receiver_blob", act_rx.save());
  record("channel/" + name + "/grad_sender_blob", grad_tx.save());
  record("channel/" + name + "/grad_receiver_blob", grad_rx.save());
}

void channels() {
  // Keep in step with CHANNELS in python/tests/reference.py.
  channel_case("ef21_top_k__ef_q8", cp::pipeline<cp::ef21, cp::top_k>{{}, {.fraction = 0.1f}},
               cp::pipeline<cp::ef, cp::quantize>{{}, {.bits = 8, .group = 64}}, false);
  channel_case(
      "aq_int4__cast",
      cp::pipeline<cp::aq_sgd<cp::store_int4>, cp::quantize>{
          {.samples = 8, .sample_size = channel_cols, .warmup_steps = 1}, {.bits = 4, .group = 30}},
      cp::pipeline<cp::none, cp::cast>{{}, {.to = cp::dtype::bf16}}, true);
}

// --- the sharded collective ------------------------------------------------------------------

constexpr std::uint64_t sharded_n = 1003; // not a multiple of the ranks or of the blocks
constexpr std::uint64_t sharded_steps = 3;

/// sharded_all_reduce_compressed's two halves on `ranks` loopback ranks (threads): each rank's
/// input, its shard (reduce-scatter), the full result and the bytes each half sent, per step.
template <class W, class S>
void sharded_case(const std::string& name, const W& worker, const S& server, int ranks) {
  struct rank_out {
    std::vector<std::vector<float>> in, shard, out;
    std::vector<std::vector<std::uint64_t>> wire; // reduce-scatter half, all-gather half
  };
  std::vector<rank_out> got(static_cast<std::size_t>(ranks));
  cp::loopback_world world(ranks, std::chrono::milliseconds(60000));
  world.run([&](cp::loopback_communicator& comm) {
    const int r = static_cast<int>(comm.rank());
    const cp::sharded_plan<W, S> plan(worker, server, sharded_n, ranks);
    auto st = plan.make_state(r);
    std::vector<std::byte> ws(plan.workspace_bytes());
    rank_out& mine = got[static_cast<std::size_t>(r)];
    for (std::uint64_t s = 0; s < sharded_steps; ++s) {
      const cp::context ctx{.seed = 13, .step = s, .tensor_id = 21};
      const std::vector<float> x = input(sharded_n, 30 + 10 * r + static_cast<int>(s));
      std::vector<float> shard(plan.shard_size(r)), out(sharded_n);
      const auto rs =
          cp::reduce_scatter_compressed(comm, cp::cpu::seq, plan, st, ctx,
                                        std::span<const float>(x), std::span(shard), std::span(ws));
      const auto ag = cp::all_gather_shard_compressed(comm, cp::cpu::seq, plan, st, ctx,
                                                      std::span<const float>(shard), std::span(out),
                                                      std::span(ws));
      mine.in.push_back(x);
      mine.shard.push_back(shard);
      mine.out.push_back(out);
      mine.wire.push_back({rs.wire_bytes, ag.wire_bytes});
    }
  });
  for (int r = 0; r < ranks; ++r)
    for (std::uint64_t s = 0; s < sharded_steps; ++s) {
      const std::string base = "sharded/" + name + "/" + std::to_string(ranks) + "/" +
                               std::to_string(r) + "/" + std::to_string(s);
      const rank_out& o = got[static_cast<std::size_t>(r)];
      record(base + "/in", o.in[s]);
      record(base + "/shard", o.shard[s]);
      record(base + "/out", o.out[s]);
      record(base + "/wire", std::span<const std::uint64_t>(o.wire[s]));
    }
}

void sharded() {
  // Keep in step with SHARDED in python/tests/reference.py.
  const cp::pipeline<cp::ef, cp::quantize> worker{{}, {.bits = 4, .group = 16}};
  const cp::pipeline<cp::ef, cp::sign> server{
      {}, {.granularity = cp::sign_granularity::block, .block = 16, .scale = cp::sign_scale::rms}};
  // QSGD's Elias body varies in length: payloads travel at their length after the lengths.
  const cp::pipeline<cp::ef, cp::qsgd4> elias{{}, {.block = 64, .coding = cp::qsgd_coding::elias}};
  for (int ranks : {2, 4}) {
    sharded_case("ef_q4__ef_sign", worker, server, ranks);
    sharded_case("ef_qsgd4e", elias, elias, ranks);
  }
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output file>\n", argv[0]);
    return 2;
  }
  out_file = std::fopen(argv[1], "wb");
  if (out_file == nullptr) {
    std::perror(argv[1]);
    return 1;
  }
  codecs();
  pipelines();
  channels();
  sharded();
  return std::fclose(out_file) == 0 ? 0 : 1;
}
