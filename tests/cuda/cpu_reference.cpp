// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#include "cpu_reference.hpp"

#include <span>

#include "commpress/backend/cpu/cast.hpp"
#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/random_k.hpp"
#include "commpress/backend/cpu/sign.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/feedback/aq_sgd.hpp"
#include "commpress/feedback/ef.hpp"
#include "commpress/feedback/ef21.hpp"
#include "commpress/feedback/loco.hpp"

namespace commpress::test {

template <class C, class T>
cpu_reference_result<T> cpu_reference(const C& c, const context& ctx, const std::vector<T>& x,
                                      const std::vector<float>& acc0, float weight) {
  const std::size_t n = x.size();
  cpu_reference_result<T> r;
  r.payload.resize(max_payload_bytes(c, n));
  std::vector<std::byte> ws(workspace_bytes(cpu::seq, c, n));
  r.nonfinite = encode(cpu::seq, c, ctx, std::span<const T>(x), std::span(r.payload), std::span(ws))
                    .nonfinite;
  r.decoded.resize(n);
  decode(cpu::seq, c, std::span<const std::byte>(r.payload), std::span(r.decoded));
  r.accumulated = acc0;
  decode_accumulate(cpu::seq, c, std::span<const std::byte>(r.payload), std::span(r.accumulated),
                    weight);
  r.roundtripped.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    r.roundtripped[i] = to_float(x[i]);
  roundtrip(cpu::seq, c, ctx, std::span(r.roundtripped), std::span(ws));
  r.corrupted = r.payload;
  r.corrupted.back() ^= std::byte{0x10}; // last body byte, or the checksum of an empty body
  std::vector<float> sink(n);
  try {
    decode(cpu::seq, c, std::span<const std::byte>(r.corrupted), std::span(sink));
  } catch (const error& e) {
    r.corrupted_error = e.code();
  }
  return r;
}

template <class C>
feedback_reference feedback_steps(const C& c, bool use_ef21,
                                  const std::vector<std::vector<float>>& inputs,
                                  nonfinite_policy policy) {
  feedback_reference r;
  const std::size_t n = inputs.empty() ? 0 : inputs.front().size();
  ef_state e(n);
  ef21_state a(n);
  ef21_state b(n);
  std::vector<std::byte> ws(
      use_ef21 ? detail::feedback_ops<ef21>::workspace_bytes(cpu::seq, ef21{}, c, n)
               : detail::feedback_ops<ef>::workspace_bytes(cpu::seq, ef{}, c, n));
  r.output.resize(n);
  for (std::size_t t = 0; t < inputs.size(); ++t) {
    const context ctx{.seed = 7, .step = t, .tensor_id = 1, .on_nonfinite = policy};
    std::vector<std::byte> out(max_payload_bytes(c, n));
    const std::span<const float> in(inputs[t]);
    const step_result s = use_ef21
                              ? detail::feedback_ops<ef21>::encode(cpu::seq, ef21{}, c, a, ctx, in,
                                                                   std::span(out), std::span(ws))
                              : detail::feedback_ops<ef>::encode(cpu::seq, ef{}, c, e, ctx, in,
                                                                 std::span(out), std::span(ws));
    r.nonfinite += s.nonfinite;
    r.held += s.held;
    if (use_ef21)
      detail::feedback_ops<ef21>::decode(cpu::seq, ef21{}, c, b, std::span<const std::byte>(out),
                                         std::span(r.output), std::span(ws));
    r.payloads.push_back(std::move(out));
  }
  const auto sender = use_ef21 ? a.mirror() : e.residual();
  r.sender.assign(sender.begin(), sender.end());
  r.receiver.assign(b.mirror().begin(), b.mirror().end());
  return r;
}

#define COMMPRESS_FEEDBACK_REFERENCE(C)                                                            \
  template feedback_reference feedback_steps<C>(                                                   \
      const C&, bool, const std::vector<std::vector<float>>&, nonfinite_policy);
COMMPRESS_FEEDBACK_REFERENCE(identity)
COMMPRESS_FEEDBACK_REFERENCE(quantize)
COMMPRESS_FEEDBACK_REFERENCE(random_k)
COMMPRESS_FEEDBACK_REFERENCE(sign)
COMMPRESS_FEEDBACK_REFERENCE(top_k)

template <class S, class C>
feedback_reference loco_steps(const C& c, float beta, std::uint64_t reset_every,
                              const std::vector<std::vector<float>>& inputs,
                              nonfinite_policy policy) {
  feedback_reference r;
  const std::size_t n = inputs.empty() ? 0 : inputs.front().size();
  const loco<S> f{.beta = beta, .reset_every = reset_every};
  loco_state<S> st(n);
  std::vector<std::byte> ws(detail::feedback_ops<loco<S>>::workspace_bytes(cpu::seq, f, c, n));
  for (std::size_t t = 0; t < inputs.size(); ++t) {
    const context ctx{.seed = 7, .step = t, .tensor_id = 1, .on_nonfinite = policy};
    std::vector<std::byte> out(max_payload_bytes(c, n));
    const step_result s = detail::feedback_ops<loco<S>>::encode(
        cpu::seq, f, c, st, ctx, std::span<const float>(inputs[t]), std::span(out), std::span(ws));
    r.nonfinite += s.nonfinite;
    r.held += s.held;
    r.payloads.push_back(std::move(out));
  }
  r.sender.resize(n);
  st.error(std::span(r.sender));
  return r;
}

#define COMMPRESS_LOCO_REFERENCE(S, C)                                                             \
  template feedback_reference loco_steps<S, C>(                                                    \
      const C&, float, std::uint64_t, const std::vector<std::vector<float>>&, nonfinite_policy);
#define COMMPRESS_LOCO_REFERENCE_ALL(C)                                                            \
  COMMPRESS_LOCO_REFERENCE(store_f32, C)                                                           \
  COMMPRESS_LOCO_REFERENCE(store_bf16, C)                                                          \
  COMMPRESS_LOCO_REFERENCE(store_int8, C)                                                          \
  COMMPRESS_LOCO_REFERENCE(store_int4, C)
COMMPRESS_LOCO_REFERENCE_ALL(quantize)
COMMPRESS_LOCO_REFERENCE_ALL(top_k)

namespace {
template <class S> std::vector<float> cache_values(const aq_sgd_state<S>& st) {
  std::vector<float> v(st.samples() * st.sample_size());
  for (std::uint64_t id = 0; id < st.samples(); ++id)
    st.sample(id, std::span(v).subspan(id * st.sample_size(), st.sample_size()));
  return v;
}
} // namespace

template <class S, class C>
aq_sgd_reference
aq_sgd_steps(const C& c, std::uint64_t samples, std::uint64_t sample_size,
             std::uint64_t warmup_steps, const std::vector<std::vector<std::uint64_t>>& ids,
             const std::vector<std::vector<float>>& inputs, nonfinite_policy policy) {
  using ops = detail::feedback_ops<aq_sgd<S>>;
  aq_sgd_reference r;
  const aq_sgd<S> f{.samples = samples, .sample_size = sample_size, .warmup_steps = warmup_steps};
  aq_sgd_state<S> sender = f.make_sender_state();
  aq_sgd_state<S> receiver = f.make_receiver_state();
  for (std::size_t t = 0; t < inputs.size(); ++t) {
    const std::size_t n = inputs[t].size();
    const context ctx{.seed = 7, .step = t, .tensor_id = 1, .on_nonfinite = policy};
    std::vector<std::byte> ws(ops::workspace_bytes(cpu::seq, f, c, n));
    std::vector<std::byte> out(ops::max_payload_bytes(f, c, n));
    const step_result s =
        ops::encode(cpu::seq, f, c, sender, ctx, std::span<const std::uint64_t>(ids[t]),
                    std::span<const float>(inputs[t]), std::span(out), std::span(ws));
    out.resize(s.bytes);
    r.nonfinite += s.nonfinite;
    r.sender_held += s.held;
    std::vector<float> decoded(n);
    r.receiver_held +=
        ops::decode(cpu::seq, f, c, receiver, std::span<const std::uint64_t>(ids[t]),
                    std::span<const std::byte>(out), std::span(decoded), std::span(ws))
            .held;
    r.payloads.push_back(std::move(out));
    r.outputs.push_back(std::move(decoded));
  }
  r.sender = cache_values(sender);
  r.receiver = cache_values(receiver);
  const auto scales = [](const aq_sgd_state<S>& st) {
    const std::span<const float> sc = st.storage().scales();
    return std::vector<float>(sc.begin(), sc.end());
  };
  r.sender_scales = scales(sender);
  r.receiver_scales = scales(receiver);
  return r;
}

#define COMMPRESS_AQ_SGD_REFERENCE(S, C)                                                           \
  template aq_sgd_reference aq_sgd_steps<S, C>(                                                    \
      const C&, std::uint64_t, std::uint64_t, std::uint64_t,                                       \
      const std::vector<std::vector<std::uint64_t>>&, const std::vector<std::vector<float>>&,      \
      nonfinite_policy);
#define COMMPRESS_AQ_SGD_REFERENCE_ALL(C)                                                          \
  COMMPRESS_AQ_SGD_REFERENCE(store_f32, C)                                                         \
  COMMPRESS_AQ_SGD_REFERENCE(store_bf16, C)                                                        \
  COMMPRESS_AQ_SGD_REFERENCE(store_int8, C)                                                        \
  COMMPRESS_AQ_SGD_REFERENCE(store_int4, C)
COMMPRESS_AQ_SGD_REFERENCE_ALL(quantize)
COMMPRESS_AQ_SGD_REFERENCE_ALL(top_k)

#define COMMPRESS_CPU_REFERENCE(C, T)                                                              \
  template cpu_reference_result<T> cpu_reference<C, T>(                                            \
      const C&, const context&, const std::vector<T>&, const std::vector<float>&, float);
#define COMMPRESS_CPU_REFERENCE_ALL(C)                                                             \
  COMMPRESS_CPU_REFERENCE(C, float)                                                                \
  COMMPRESS_CPU_REFERENCE(C, half)                                                                 \
  COMMPRESS_CPU_REFERENCE(C, bfloat16)
COMMPRESS_CPU_REFERENCE_ALL(identity)
COMMPRESS_CPU_REFERENCE_ALL(cast)
COMMPRESS_CPU_REFERENCE_ALL(quantize)
COMMPRESS_CPU_REFERENCE_ALL(random_k)
COMMPRESS_CPU_REFERENCE_ALL(sign)
COMMPRESS_CPU_REFERENCE_ALL(top_k)

} // namespace commpress::test
