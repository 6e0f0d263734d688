// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// CPU/GPU parity of every codec (docs/methods.md 11.1, C0.1): for each configuration and size
// the payload written by cuda::par must equal cpu::seq's byte for byte, and decode,
// decode_accumulate and roundtrip must produce the same bits. Corrupted payloads must be refused on
// the device with the errc the CPU throws, leaving the output untouched. EF and EF21 steps on the
// device must keep the CPU's payloads and states bit for bit (E9).
// Without a GPU only the CPU half runs (the GPU half skips with a message). Codecs and
// feedback share this one translation unit so each kernel is compiled once (CI build time).

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "commpress/backend/cuda/aq_sgd.cuh"
#include "commpress/backend/cuda/cast.cuh"
#include "commpress/backend/cuda/codec_ops.cuh"
#include "commpress/backend/cuda/feedback.cuh"
#include "commpress/backend/cuda/identity.cuh"
#include "commpress/backend/cuda/quantize.cuh"
#include "commpress/backend/cuda/random_k.cuh"
#include "commpress/backend/cuda/sign.cuh"
#include "commpress/backend/cuda/top_k.cuh"
#include "commpress/core/rng.hpp"

#include "cpu_reference.hpp"
#include "cuda_test_support.cuh"

namespace {

namespace cp = commpress;
using cp::test::device_buffer;

template <class T> bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

/// Index of the first differing byte, or -1.
long first_difference(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (a[i] != b[i])
      return static_cast<long>(i);
  return a.size() == b.size() ? -1 : static_cast<long>(a.size() < b.size() ? a.size() : b.size());
}

/// Test inputs: mostly random normals-ish values, with exact ties, signed zeros, subnormals and
/// large values sprinkled in; `nonfinite` adds NaN and Inf.
template <class T>
std::vector<T> make_input(std::size_t n, std::uint64_t seed, bool nonfinite = false) {
  const cp::rng_key key = cp::make_rng_key(seed, 77);
  std::vector<T> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t r = cp::random_u32(key, 0, i);
    float v = (cp::uniform_from_bits(r) - 0.5f) * 8.0f;
    switch (r % 16) {
    case 0:
      v = 0.0f;
      break;
    case 1:
      v = -0.0f;
      break;
    case 2:
      v = 1.5f;
      break; // exact ties across the tensor
    case 3:
      v = -1.5f;
      break;
    case 4:
      v = 1.0e-40f;
      break; // subnormal
    case 5:
      v = (r & 256) ? 3.0e4f : -3.0e4f;
      break;
    default:
      break;
    }
    x[i] = cp::from_float<T>(v);
  }
  if (nonfinite && n > 2) {
    x[n / 2] = cp::from_float<T>(cp::detail::bits_to_float(0x7fc00000u));
    x[n - 1] = cp::from_float<T>(cp::detail::bits_to_float(0xff800000u));
  }
  return x;
}

/// Compares every CUDA entry point of codec c with the CPU reference on input x.
template <class C, class T>
void check_parity(const C& c, const cp::context& ctx, const std::vector<T>& x) {
  const std::size_t n = x.size();
  CAPTURE(n);
  std::vector<float> acc0(n);
  for (std::size_t i = 0; i < n; ++i)
    acc0[i] = static_cast<float>(i % 5) - 2.0f;
  const float weight = 0.375f;
  const cp::test::cpu_reference_result<T> ref = cp::test::cpu_reference(c, ctx, x, acc0, weight);
  REQUIRE(ref.payload.size() == cp::max_payload_bytes(c, n));
  REQUIRE(ref.corrupted_error != cp::errc::ok); // the CPU refuses a corrupted payload

  if (!cp::test::has_gpu())
    return;
  const cp::cuda::par_t par = cp::cuda::par;
  device_buffer<T> d_in(x);
  device_buffer<std::byte> d_payload(ref.payload.size());
  device_buffer<std::byte> d_ws(cp::workspace_bytes(par, c, n));
  const std::span<std::byte> ws(d_ws.data(), d_ws.size());
  device_buffer<cp::cuda::device_status> d_status(1);
  cp::cuda::clear_status_async(d_status.data(), nullptr);
  const std::size_t bytes =
      cp::encode(par, c, ctx, std::span<const T>(d_in.data(), n),
                 std::span(d_payload.data(), d_payload.size()), ws, d_status.data());
  CHECK(bytes == ref.payload.size());
  const long diff = first_difference(d_payload.to_host(), ref.payload);
  CHECK_MESSAGE(diff == -1, "payload differs from the CPU's at byte " << diff);
  cp::cuda::device_status st = cp::cuda::read_status(d_status.data(), nullptr);
  CHECK(st.code == 0);
  CHECK(st.nonfinite == ref.nonfinite);

  device_buffer<std::byte> d_ref(ref.payload);
  const std::span<const std::byte> d_ref_span(d_ref.data(), d_ref.size());
  device_buffer<T> d_out(n);
  cp::decode(par, c, d_ref_span, std::span(d_out.data(), n), ws, d_status.data());
  CHECK(same_bits(d_out.to_host(), ref.decoded));

  device_buffer<float> d_acc(acc0);
  cp::decode_accumulate(par, c, d_ref_span, std::span(d_acc.data(), n), weight, ws,
                        d_status.data());
  CHECK(same_bits(d_acc.to_host(), ref.accumulated));

  std::vector<float> xf(n);
  for (std::size_t i = 0; i < n; ++i)
    xf[i] = cp::to_float(x[i]);
  device_buffer<float> d_x(xf);
  cp::roundtrip(par, c, ctx, std::span(d_x.data(), n), ws, d_status.data());
  CHECK(same_bits(d_x.to_host(), ref.roundtripped));
  st = cp::cuda::read_status(d_status.data(), nullptr);
  CHECK(st.code == 0);

  // A corrupted payload: the device reports the CPU's error and leaves the output untouched.
  device_buffer<std::byte> d_bad(ref.corrupted);
  device_buffer<float> d_keep(acc0);
  cp::cuda::clear_status_async(d_status.data(), nullptr);
  cp::decode_accumulate(par, c, std::span<const std::byte>(d_bad.data(), d_bad.size()),
                        std::span(d_keep.data(), n), 1.0f, ws, d_status.data());
  st = cp::cuda::read_status(d_status.data(), nullptr);
  CHECK(cp::cuda::error_of(st) == ref.corrupted_error);
  CHECK(same_bits(d_keep.to_host(), acc0));
}

/// Sizes every codec is checked at: empty, one, odd, several checksum chunks; plus 64 Mi
/// elements when `large` (GPU machines only: the CPU reference is slow).
std::vector<std::size_t> sizes(bool large) {
  std::vector<std::size_t> s{0, 1, 7, 1000, 100003};
  if (large && cp::test::has_gpu())
    s.push_back(std::size_t{64} << 20);
  return s;
}

template <class C> void check_all_types(const C& c, bool large = false) {
  for (std::size_t n : sizes(large)) {
    for (cp::nonfinite_policy p :
         {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count}) {
      cp::context ctx{.seed = 11, .step = 3, .tensor_id = 5, .on_nonfinite = p};
      const bool nf = p == cp::nonfinite_policy::zero_and_count || n < 2000;
      check_parity(c, ctx, make_input<float>(n, n + 1, nf));
      if (n < 2000) {
        check_parity(c, ctx, make_input<cp::half>(n, n + 2, nf));
        check_parity(c, ctx, make_input<cp::bfloat16>(n, n + 3, nf));
      }
    }
  }
}

} // namespace

TEST_SUITE("cuda") {
  TEST_CASE("cuda identity: payloads, decodes and roundtrips match the CPU byte for byte") {
    check_all_types(cp::identity{}, true);
  }
  TEST_CASE("cuda cast: payloads, decodes and roundtrips match the CPU byte for byte") {
    check_all_types(cp::cast{.to = cp::dtype::f16});
    check_all_types(cp::cast{.to = cp::dtype::bf16});
  }

  TEST_CASE("cuda quantize: every width, granularity, range and rounding matches the CPU") {
    using cp::quant_range;
    using cp::rounding;
    using cp::scale_granularity;
    for (std::uint32_t bits : {1u, 2u, 3u, 4u, 8u})
      for (quant_range range : {quant_range::symmetric, quant_range::asymmetric})
        for (rounding round : {rounding::nearest, rounding::stochastic}) {
          if (range == quant_range::symmetric && bits < 2)
            continue;
          CAPTURE(bits);
          CAPTURE(static_cast<int>(range));
          CAPTURE(static_cast<int>(round));
          const cp::quantize base{.bits = bits, .range = range, .round = round};
          cp::quantize tensor = base;
          tensor.granularity = scale_granularity::tensor;
          tensor.group = 0;
          check_all_types(tensor);
          cp::quantize block = base;
          block.granularity = scale_granularity::block;
          block.group = 128;
          // 64 Mi elements for the most used configuration only (the CPU reference is slow).
          check_all_types(block, bits == 4 && range == quant_range::symmetric &&
                                     round == rounding::nearest);
          block.group = 5000; // groups longer than one warp segment: atomics across warps
          check_all_types(block);
          // Column granularity needs n % columns == 0.
          cp::quantize column = base;
          column.granularity = scale_granularity::column;
          for (std::uint32_t cols : {1u, 7u, 96u}) {
            column.group = cols;
            for (std::size_t rows : {std::size_t{1}, std::size_t{3}, std::size_t{1031}}) {
              const cp::context ctx{.seed = 1, .step = 2, .tensor_id = 3};
              check_parity(column, ctx, make_input<float>(rows * cols, rows + cols, true));
            }
          }
        }
  }

  TEST_CASE("cuda sign: per-tensor and per-block scales match the CPU bit for bit") {
    for (cp::sign_scale sc : {cp::sign_scale::mean_abs, cp::sign_scale::rms}) {
      check_all_types(cp::sign{.scale = sc}, true);
      check_all_types(
          cp::sign{.granularity = cp::sign_granularity::block, .block = 100, .scale = sc});
      // Blocks of several canonical chunks (32768 terms each).
      check_all_types(
          cp::sign{.granularity = cp::sign_granularity::block, .block = 70000, .scale = sc});
    }
  }

  TEST_CASE("cuda random_k: gathered values and regenerated indices match the CPU") {
    for (cp::dtype v : {cp::dtype::f32, cp::dtype::f16, cp::dtype::bf16})
      for (bool unbiased : {false, true}) {
        check_all_types(cp::random_k{.fraction = 0.1f, .unbiased = unbiased, .values = v},
                        v == cp::dtype::f32);
        check_all_types(cp::random_k{.count = 3, .unbiased = unbiased, .values = v});
      }
    check_all_types(cp::random_k{.fraction = 1.0f});
    check_all_types(cp::random_k{.fraction = 0.0f});
  }

  TEST_CASE("cuda random_k: quantized kept values are refused, the output left as it was") {
    const std::vector<float> x = make_input<float>(1000, 21, true);
    const cp::random_k c{
        .fraction = 0.1f,
        .value_quantizer = {.bits = 2, .group = 64, .range = cp::quant_range::asymmetric}};
    // A valid payload, from the CPU.
    const std::vector<std::byte> payload =
        cp::test::cpu_reference(c, {}, x, std::vector<float>(x.size()), 1.0f).payload;
    COMMPRESS_REQUIRE_GPU();
    const cp::cuda::par_t par = cp::cuda::par;
    const auto code_of = [](auto&& call) {
      try {
        call();
      } catch (const cp::error& e) {
        return e.code();
      }
      return cp::errc::ok;
    };
    device_buffer<float> d_x(x);
    device_buffer<std::byte> d_payload(payload);
    device_buffer<std::byte> d_out_payload(payload.size());
    device_buffer<std::byte> d_ws(cp::workspace_bytes(par, c, x.size()));
    const std::vector<float> keep(x.size(), 7.0f);
    device_buffer<float> d_out(keep);
    const std::span<std::byte> ws(d_ws.data(), d_ws.size());
    CHECK(code_of([&] {
            cp::encode(par, c, {}, std::span<const float>(d_x.data(), x.size()),
                       std::span(d_out_payload.data(), d_out_payload.size()), ws);
          }) == cp::errc::invalid_argument);
    const std::span<const std::byte> p(d_payload.data(), d_payload.size());
    CHECK(code_of([&] { cp::decode(par, c, p, std::span(d_out.data(), x.size()), ws); }) ==
          cp::errc::invalid_argument);
    CHECK(code_of([&] {
            cp::decode_accumulate(par, c, p, std::span(d_out.data(), x.size()), 1.0f, ws);
          }) == cp::errc::invalid_argument);
    CHECK(code_of([&] { cp::roundtrip(par, c, {}, std::span(d_x.data(), x.size()), ws); }) ==
          cp::errc::invalid_argument);
    cudaDeviceSynchronize();
    CHECK(same_bits(d_out.to_host(), keep));
    CHECK(same_bits(d_x.to_host(), x));
  }

  TEST_CASE("cuda top_k: selection, tie rule, index lists and bitmaps match the CPU") {
    for (cp::dtype v : {cp::dtype::f32, cp::dtype::f16, cp::dtype::bf16}) {
      // Whole tensor: index lists of every width, a bitmap (fraction 0.5), keep all, keep none.
      for (float f : {0.01f, 0.1f, 0.5f, 1.0f, 0.0f})
        check_all_types(cp::top_k{.fraction = f, .values = v}, f == 0.01f && v == cp::dtype::f32);
      check_all_types(cp::top_k{.count = 3, .values = v});
    }
    // Per row (Rudakov et al.'s per-sample TopK): rows of 1, 7, 300 (2-byte indices), 70000
    // (4-byte indices) elements; ties and zeros are frequent in make_input.
    for (std::uint32_t d : {1u, 7u, 300u, 70000u})
      for (float f : {0.05f, 0.3f, 0.9f})
        for (std::size_t rows : {std::size_t{1}, std::size_t{5}}) {
          const cp::top_k c{.fraction = f, .row_length = d, .values = cp::dtype::bf16};
          const cp::context ctx{.seed = 4, .step = 1, .tensor_id = 2};
          check_parity(c, ctx, make_input<float>(rows * d, d + rows, true));
          check_parity(c, ctx, make_input<cp::half>(rows * d, d + rows + 1, false));
        }
    // Rows of at least 2^18 elements take the multi-block selection: index lists, bitmaps,
    // keep-all, one and several rows.
    const cp::context ctx{.seed = 4, .step = 1, .tensor_id = 2};
    for (float f : {0.001f, 0.2f, 1.0f}) {
      check_parity(cp::top_k{.fraction = f}, ctx, make_input<float>(300007, 17, true));
      check_parity(cp::top_k{.fraction = f, .row_length = 262144}, ctx,
                   make_input<float>(3 * 262144, 18, true));
    }
  }

  TEST_CASE("cuda encode: nonfinite_policy::fail poisons the payload and reports non_finite") {
    const std::vector<float> x = make_input<float>(1000, 9, true);
    const cp::quantize c{.bits = 4, .group = 64};
    const cp::context ctx{.on_nonfinite = cp::nonfinite_policy::fail};
    COMMPRESS_REQUIRE_GPU();
    const cp::cuda::par_t par = cp::cuda::par;
    device_buffer<float> d_in(x);
    device_buffer<std::byte> d_payload(cp::max_payload_bytes(c, x.size()));
    device_buffer<std::byte> d_ws(cp::workspace_bytes(par, c, x.size()));
    device_buffer<cp::cuda::device_status> d_status(1);
    cp::cuda::clear_status_async(d_status.data(), nullptr);
    cp::encode(par, c, ctx, std::span<const float>(d_in.data(), x.size()),
               std::span(d_payload.data(), d_payload.size()), std::span(d_ws.data(), d_ws.size()),
               d_status.data());
    cp::cuda::device_status st = cp::cuda::read_status(d_status.data(), nullptr);
    CHECK(cp::cuda::error_of(st) == cp::errc::non_finite);
    CHECK(st.nonfinite == 2);
    // Any decoder refuses the poisoned payload; the output stays as it was.
    const std::vector<float> keep(x.size(), 7.0f);
    device_buffer<float> d_out(keep);
    cp::cuda::clear_status_async(d_status.data(), nullptr);
    cp::decode(par, c, std::span<const std::byte>(d_payload.data(), d_payload.size()),
               std::span(d_out.data(), x.size()), std::span(d_ws.data(), d_ws.size()),
               d_status.data());
    st = cp::cuda::read_status(d_status.data(), nullptr);
    CHECK(cp::cuda::error_of(st) == cp::errc::bad_magic);
    CHECK(same_bits(d_out.to_host(), keep));
    // roundtrip refuses too and leaves x untouched.
    cp::cuda::clear_status_async(d_status.data(), nullptr);
    cp::roundtrip(par, c, ctx, std::span(d_in.data(), x.size()),
                  std::span(d_ws.data(), d_ws.size()), d_status.data());
    st = cp::cuda::read_status(d_status.data(), nullptr);
    CHECK(cp::cuda::error_of(st) == cp::errc::non_finite);
    CHECK(same_bits(d_in.to_host(), x));
  }

  TEST_CASE("cuda encode: captures into a CUDA graph whose replays write the CPU's bytes") {
    const std::size_t n = 300001;
    const cp::top_k c{.fraction = 0.01f};
    const std::vector<float> x = make_input<float>(n, 21);
    const cp::context ctx{.seed = 5, .step = 8};
    const cp::test::cpu_reference_result<float> ref =
        cp::test::cpu_reference(c, ctx, x, std::vector<float>(n), 1.0f);
    COMMPRESS_REQUIRE_GPU();
    cudaStream_t stream;
    COMMPRESS_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const cp::cuda::par_t par = cp::cuda::par.on(stream);
    device_buffer<float> d_in(x);
    device_buffer<std::byte> d_payload(ref.payload.size());
    device_buffer<std::byte> d_ws(cp::workspace_bytes(par, c, n));
    device_buffer<float> d_out(n);
    COMMPRESS_CUDA_TRY(cudaMemset(d_payload.data(), 0, d_payload.size()));
    cudaGraph_t graph;
    COMMPRESS_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    cp::encode(par, c, ctx, std::span<const float>(d_in.data(), n),
               std::span(d_payload.data(), d_payload.size()), std::span(d_ws.data(), d_ws.size()));
    cp::decode(par, c, std::span<const std::byte>(d_payload.data(), d_payload.size()),
               std::span(d_out.data(), n), std::span(d_ws.data(), d_ws.size()));
    COMMPRESS_CUDA_TRY(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec;
    COMMPRESS_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(d_payload.to_host() != ref.payload); // capture enqueued nothing
    for (int replay = 0; replay < 2; ++replay) {
      COMMPRESS_CUDA_TRY(cudaGraphLaunch(exec, stream));
      COMMPRESS_CUDA_TRY(cudaStreamSynchronize(stream));
      CHECK(first_difference(d_payload.to_host(), ref.payload) == -1);
      CHECK(same_bits(d_out.to_host(), ref.decoded));
    }
    COMMPRESS_CUDA_TRY(cudaGraphExecDestroy(exec));
    COMMPRESS_CUDA_TRY(cudaGraphDestroy(graph));
    COMMPRESS_CUDA_TRY(cudaStreamDestroy(stream));
  }
}

namespace {

/// Runs the CPU's feedback steps and the same steps on the device, comparing every payload
/// and the final states.
template <class C>
void check_feedback(const C& c, bool ef21, std::size_t n, cp::nonfinite_policy policy) {
  CAPTURE(n);
  CAPTURE(ef21);
  std::vector<std::vector<float>> inputs;
  for (std::uint64_t t = 0; t < 4; ++t)
    inputs.push_back(make_input<float>(n, 100 + t, policy != cp::nonfinite_policy::fail && t == 2));
  const cp::test::feedback_reference ref = cp::test::feedback_steps(c, ef21, inputs, policy);
  REQUIRE(ref.payloads.size() == inputs.size());
  if (!cp::test::has_gpu())
    return;
  const cp::cuda::par_t par = cp::cuda::par;
  device_buffer<float> d_sender(std::vector<float>(n, 0.0f));
  device_buffer<float> d_receiver(std::vector<float>(n, 0.0f));
  device_buffer<float> d_out(n);
  device_buffer<std::byte> d_payload(cp::max_payload_bytes(c, n));
  device_buffer<std::byte> d_ws(cp::cuda::feedback_workspace_bytes(par, c, n));
  const std::span<std::byte> ws(d_ws.data(), d_ws.size());
  device_buffer<cp::cuda::device_status> d_status(1);
  cp::cuda::clear_status_async(d_status.data(), nullptr);
  for (std::size_t t = 0; t < inputs.size(); ++t) {
    CAPTURE(t);
    const cp::context ctx{.seed = 7, .step = t, .tensor_id = 1, .on_nonfinite = policy};
    device_buffer<float> d_in(inputs[t]);
    const std::span<const float> in(d_in.data(), n);
    const std::span<std::byte> out(d_payload.data(), d_payload.size());
    if (ef21) {
      cp::cuda::ef21_encode(par, c, ctx, in, std::span(d_sender.data(), n), out, ws,
                            d_status.data());
      cp::cuda::ef21_decode(par, c, std::span<const std::byte>(out),
                            std::span(d_receiver.data(), n), std::span(d_out.data(), n), ws,
                            d_status.data());
    } else {
      cp::cuda::ef_encode(par, c, ctx, in, std::span(d_sender.data(), n), out, ws, d_status.data());
    }
    CHECK(first_difference(d_payload.to_host(), ref.payloads[t]) == -1);
  }
  CHECK(same_bits(d_sender.to_host(), ref.sender));
  if (ef21) {
    CHECK(same_bits(d_receiver.to_host(), ref.receiver));
    CHECK(same_bits(d_out.to_host(), ref.output));
  }
  const cp::cuda::device_status st = cp::cuda::read_status(d_status.data(), nullptr);
  CHECK(st.code == 0);
  CHECK(st.nonfinite == ref.nonfinite);
  if (!ef21)
    CHECK(st.held == ref.held); // EF21's held also counts the receiver's steps
}

template <class C> void check_feedback_all(const C& c) {
  for (bool ef21 : {false, true})
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{70001}})
      for (cp::nonfinite_policy p :
           {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count})
        check_feedback(c, ef21, n, p);
}

} // namespace

TEST_SUITE("cuda") {
  TEST_CASE("cuda ef and ef21: device steps keep the CPU's payloads and states bit for bit") {
    check_feedback_all(cp::identity{});
    check_feedback_all(cp::quantize{.bits = 4, .group = 128});
    check_feedback_all(cp::quantize{.bits = 2,
                                    .granularity = cp::scale_granularity::tensor,
                                    .group = 0,
                                    .range = cp::quant_range::asymmetric,
                                    .round = cp::rounding::stochastic});
    check_feedback_all(cp::top_k{.fraction = 0.1f});
    check_feedback_all(cp::sign{});
    check_feedback_all(cp::random_k{.fraction = 0.05f, .unbiased = true});
  }
}

namespace {

/// LoCo steps on the CPU and the device with error storage S: every payload and the final
/// stored error must match, including a reset step.
template <class S, class C>
void check_loco(const C& c, float beta, std::size_t n, cp::nonfinite_policy policy) {
  CAPTURE(n);
  CAPTURE(beta);
  std::vector<std::vector<float>> inputs;
  for (std::uint64_t t = 0; t < 5; ++t)
    inputs.push_back(make_input<float>(n, 300 + t, t == 1));
  const std::uint64_t reset_every = 3; // step 2 ends with a reset
  const cp::test::feedback_reference ref =
      cp::test::loco_steps<S>(c, beta, reset_every, inputs, policy);
  if (!cp::test::has_gpu())
    return;
  const cp::cuda::par_t par = cp::cuda::par;
  device_buffer<std::byte> d_words(std::vector<std::byte>(cp::cuda::loco_error_word_bytes<S>(n)));
  device_buffer<float> d_scales(std::vector<float>(cp::cuda::loco_error_scales<S>(n), 0.0f));
  const cp::cuda::loco_error<S> err{std::span(d_words.data(), d_words.size()),
                                    std::span(d_scales.data(), d_scales.size())};
  device_buffer<std::byte> d_payload(cp::max_payload_bytes(c, n));
  device_buffer<std::byte> d_ws(cp::cuda::loco_workspace_bytes(par, c, n));
  device_buffer<cp::cuda::device_status> d_status(1);
  cp::cuda::clear_status_async(d_status.data(), nullptr);
  const cp::loco<S> f{.beta = beta, .reset_every = reset_every};
  for (std::size_t t = 0; t < inputs.size(); ++t) {
    CAPTURE(t);
    const cp::context ctx{.seed = 7, .step = t, .tensor_id = 1, .on_nonfinite = policy};
    device_buffer<float> d_in(inputs[t]);
    cp::cuda::loco_encode(par, f, c, ctx, std::span<const float>(d_in.data(), n), err,
                          std::span(d_payload.data(), d_payload.size()),
                          std::span(d_ws.data(), d_ws.size()), d_status.data());
    CHECK(first_difference(d_payload.to_host(), ref.payloads[t]) == -1);
  }
  device_buffer<float> d_err(n);
  cp::cuda::loco_error_values(par, err, std::span(d_err.data(), n));
  CHECK(same_bits(d_err.to_host(), ref.sender));
  const cp::cuda::device_status st = cp::cuda::read_status(d_status.data(), nullptr);
  CHECK(st.code == 0);
  CHECK(st.nonfinite == ref.nonfinite);
  CHECK(st.held == ref.held);
}

template <class S> void check_loco_storage() {
  const cp::quantize q4{.bits = 4, .group = 128};
  for (float beta : {0.0f, 0.8f})
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{999}, std::size_t{70001}})
      for (cp::nonfinite_policy p :
           {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count}) {
        check_loco<S>(q4, beta, n, p);
        check_loco<S>(cp::top_k{.fraction = 0.1f}, beta, n, p);
      }
}

} // namespace

TEST_SUITE("cuda") {
  TEST_CASE("cuda loco: device steps keep the CPU's payloads and stored error bit for bit") {
    check_loco_storage<cp::store_f32>();
    check_loco_storage<cp::store_bf16>();
    check_loco_storage<cp::store_int8>();
    check_loco_storage<cp::store_int4>();
  }
}

namespace {

/// AQ-SGD steps on the CPU and the device with cache storage S (docs/methods.md 6.1): a shuffled
/// id order with revisits across steps and a repeated id inside one batch, a warm-up step and
/// NaN/Inf inputs; every payload, every receiver output and both final caches (values and
/// store_int scales) must match the CPU bit for bit, as must the non-finite and held counts.
template <class S, class C> void check_aq_sgd(const C& c, cp::nonfinite_policy policy) {
  constexpr std::uint64_t samples = 9;
  constexpr std::uint64_t len = 301; // odd: int4's padding nibble, a partial 128-block
  const std::vector<std::vector<std::uint64_t>> ids = {
      {4, 0, 7, 2, 8}, {2, 4, 1, 4, 6}, {7, 3, 2, 0, 5}, {5, 8, 4, 1, 3}};
  std::vector<std::vector<float>> inputs;
  for (std::uint64_t t = 0; t < ids.size(); ++t)
    inputs.push_back(make_input<float>(ids[t].size() * len, 500 + t, t == 2));
  const cp::test::aq_sgd_reference ref =
      cp::test::aq_sgd_steps<S>(c, samples, len, 1, ids, inputs, policy);
  // The CPU reference itself: both caches agree, and the steps changed them.
  REQUIRE(ref.payloads.size() == ids.size());
  CHECK(same_bits(ref.sender, ref.receiver));
  CHECK(same_bits(ref.sender_scales, ref.receiver_scales));
  bool moved = false;
  for (float v : ref.sender)
    moved = moved || v != 0.0f;
  CHECK(moved);
  CHECK(ref.payloads[0].size() != ref.payloads[1].size()); // warm-up sends uncompressed
  CHECK(ref.nonfinite > 0);
  if (!cp::test::has_gpu())
    return;
  const cp::cuda::par_t par = cp::cuda::par;
  const cp::aq_sgd<S> f{.samples = samples, .sample_size = len, .warmup_steps = 1};
  const std::size_t n = ids[0].size() * len;
  device_buffer<std::byte> d_sw(std::vector<std::byte>(cp::cuda::aq_sgd_cache_word_bytes(f)));
  device_buffer<float> d_ss(std::vector<float>(cp::cuda::aq_sgd_cache_scales(f), 0.0f));
  device_buffer<std::byte> d_rw(std::vector<std::byte>(cp::cuda::aq_sgd_cache_word_bytes(f)));
  device_buffer<float> d_rs(std::vector<float>(cp::cuda::aq_sgd_cache_scales(f), 0.0f));
  const cp::cuda::aq_sgd_cache<S> sender{std::span(d_sw.data(), d_sw.size()),
                                         std::span(d_ss.data(), d_ss.size())};
  const cp::cuda::aq_sgd_cache<S> receiver{std::span(d_rw.data(), d_rw.size()),
                                           std::span(d_rs.data(), d_rs.size())};
  device_buffer<std::byte> d_payload(
      cp::detail::feedback_ops<cp::aq_sgd<S>>::max_payload_bytes(f, c, n));
  device_buffer<std::byte> d_ws(cp::cuda::aq_sgd_workspace_bytes(par, f, c, n));
  device_buffer<float> d_out(n);
  device_buffer<cp::cuda::device_status> d_status(1);
  device_buffer<cp::cuda::device_status> d_rstatus(1);
  cp::cuda::clear_status_async(d_status.data(), nullptr);
  cp::cuda::clear_status_async(d_rstatus.data(), nullptr);
  for (std::size_t t = 0; t < ids.size(); ++t) {
    CAPTURE(t);
    const cp::context ctx{.seed = 7, .step = t, .tensor_id = 1, .on_nonfinite = policy};
    device_buffer<std::uint64_t> d_ids(ids[t]);
    device_buffer<float> d_in(inputs[t]);
    const std::span<const std::uint64_t> id_span(d_ids.data(), d_ids.size());
    const std::size_t bytes =
        cp::cuda::aq_sgd_encode(par, f, c, ctx, id_span, std::span<const float>(d_in.data(), n),
                                sender, std::span(d_payload.data(), d_payload.size()),
                                std::span(d_ws.data(), d_ws.size()), d_status.data());
    std::vector<std::byte> payload = d_payload.to_host();
    payload.resize(bytes);
    CHECK(first_difference(payload, ref.payloads[t]) == -1);
    cp::cuda::aq_sgd_decode(
        par, f, c, t, id_span, std::span<const std::byte>(d_payload.data(), bytes), receiver,
        std::span(d_out.data(), n), std::span(d_ws.data(), d_ws.size()), d_rstatus.data());
    CHECK(same_bits(d_out.to_host(), ref.outputs[t]));
  }
  device_buffer<float> d_values(samples * len);
  cp::cuda::aq_sgd_cache_values(par, f, sender, std::span(d_values.data(), d_values.size()));
  CHECK(same_bits(d_values.to_host(), ref.sender));
  cp::cuda::aq_sgd_cache_values(par, f, receiver, std::span(d_values.data(), d_values.size()));
  CHECK(same_bits(d_values.to_host(), ref.receiver));
  CHECK(same_bits(d_ss.to_host(), ref.sender_scales));
  CHECK(same_bits(d_rs.to_host(), ref.receiver_scales));
  const cp::cuda::device_status st = cp::cuda::read_status(d_status.data(), nullptr);
  CHECK(st.code == 0);
  CHECK(st.nonfinite == ref.nonfinite);
  CHECK(st.held == ref.sender_held);
  const cp::cuda::device_status rst = cp::cuda::read_status(d_rstatus.data(), nullptr);
  CHECK(rst.code == 0);
  CHECK(rst.held == ref.receiver_held);
}

template <class S> void check_aq_sgd_storage() {
  for (cp::nonfinite_policy p :
       {cp::nonfinite_policy::propagate, cp::nonfinite_policy::zero_and_count}) {
    check_aq_sgd<S>(cp::quantize{.bits = 2, .group = 128}, p);
    check_aq_sgd<S>(cp::quantize{.bits = 4, .group = 128}, p);
    check_aq_sgd<S>(cp::top_k{.fraction = 0.1f, .row_length = 301}, p);
  }
}

} // namespace

TEST_SUITE("cuda") {
  TEST_CASE("cuda aq_sgd: device steps keep the CPU's payloads, outputs and caches bit for bit") {
    check_aq_sgd_storage<cp::store_f32>();
    check_aq_sgd_storage<cp::store_bf16>();
    check_aq_sgd_storage<cp::store_int8>();
    check_aq_sgd_storage<cp::store_int4>();
  }
}
