// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Definitions of the binding.hpp entry points: each forwards to the library's template of the
/// same name. Included only by the codec translation units, which instantiate them with
/// COMMPRESS_PY_INSTANTIATE(codec) for their codec and every feedback policy.

#include <memory>
#include <span>
#include <type_traits>

#include "binding.hpp"
#include "commpress/backend/cpu/cast.hpp"
#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/par.hpp"
#include "commpress/backend/cpu/policy.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/random_k.hpp"
#include "commpress/backend/cpu/rotated.hpp"
#include "commpress/backend/cpu/scaled.hpp"
#include "commpress/backend/cpu/sign.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/pipeline/channel.hpp"
#include "commpress/pipeline/pipeline.hpp"

namespace commpress::py {

/// Calls f(policy) with cpu::seq or cpu::par_t{threads, grain}.
template <class F> decltype(auto) with_host_policy(const policy_ref& p, F&& f) {
  if (p.k == policy_ref::kind::par)
    return f(cpu::par_t{.threads = p.threads, .grain = p.grain});
  return f(cpu::seq);
}

inline bool on_device(const policy_ref& p) {
  return p.k == policy_ref::kind::cuda;
}

// --- codec entry points ---------------------------------------------------------------------

template <class C>
std::uint64_t codec_ops<C>::workspace_bytes(const policy_ref& p, const C& c, std::uint64_t n) {
  if (on_device(p))
    return cuda_codec_ops<C>::workspace_bytes(c, n);
  return with_host_policy(p,
                          [&](const auto& pol) { return commpress::workspace_bytes(pol, c, n); });
}

template <class C>
std::uint64_t codec_ops<C>::encode_workspace_bytes(const policy_ref& p, const C& c,
                                                   std::uint64_t n) {
  if (on_device(p))
    return cuda_codec_ops<C>::workspace_bytes(c, n);
  return with_host_policy(
      p, [&](const auto& pol) { return commpress::encode_workspace_bytes(pol, c, n); });
}

template <class C>
encode_result codec_ops<C>::encode(const policy_ref& p, const C& c, const context& ctx,
                                   const tensor_ref& in, bytes out, bytes ws) {
  return with_host_policy(p, [&](const auto& pol) {
    return with_elements(in, [&](auto x) {
      using T = typename decltype(x)::element_type;
      return commpress::encode(pol, c, ctx, std::span<const T>(x), out, ws);
    });
  });
}

template <class C>
payload_header codec_ops<C>::decode(const policy_ref& p, const C& c, cbytes payload,
                                    const tensor_ref& out, bytes) {
  return with_host_policy(p, [&](const auto& pol) {
    return with_elements(out, [&](auto y) { return commpress::decode(pol, c, payload, y); });
  });
}

template <class C>
payload_header codec_ops<C>::decode_accumulate(const policy_ref& p, const C& c, cbytes payload,
                                               std::span<float> acc, float weight, bytes) {
  return with_host_policy(p, [&](const auto& pol) {
    return commpress::decode_accumulate(pol, c, payload, acc, weight);
  });
}

template <class C>
encode_result codec_ops<C>::roundtrip(const policy_ref& p, const C& c, const context& ctx,
                                      std::span<float> x, bytes ws) {
  return with_host_policy(
      p, [&](const auto& pol) { return commpress::roundtrip(pol, c, ctx, x, ws); });
}

// --- pipeline entry points ------------------------------------------------------------------

template <class F, class C>
std::uint64_t pipeline_ops<F, C>::max_payload_bytes(const F& f, const C& c, std::uint64_t n) {
  return concrete(f, c).max_payload_bytes(n);
}

template <class F, class C>
std::uint64_t pipeline_ops<F, C>::workspace_bytes(const F& f, const C& c, std::uint64_t n) {
  return concrete(f, c).workspace_bytes(n);
}

template <class F, class C>
step_result pipeline_ops<F, C>::encode(const F& f, const C& c, sender_state& state,
                                       const context& ctx, ids_span ids, const tensor_ref& in,
                                       bytes out, bytes ws) {
  const pipeline<F, C> pipe = concrete(f, c);
  return with_elements(in, [&](auto x) {
    using T = typename decltype(x)::element_type;
    if constexpr (keyed_by_sample_v<F>) {
      return commpress::encode(cpu::seq, pipe, state, ctx, ids, std::span<const T>(x), out, ws);
    } else {
      return commpress::encode(cpu::seq, pipe, state, ctx, std::span<const T>(x), out, ws);
    }
  });
}

template <class F, class C>
decode_result pipeline_ops<F, C>::decode(const F& f, const C& c, receiver_state& state,
                                         ids_span ids, cbytes payload, const tensor_ref& out,
                                         bytes ws) {
  const pipeline<F, C> pipe = concrete(f, c);
  return with_elements(out, [&](auto y) {
    if constexpr (keyed_by_sample_v<F>) {
      return commpress::decode(cpu::seq, pipe, state, ids, payload, y, ws);
    } else {
      return commpress::decode(cpu::seq, pipe, state, payload, y, ws);
    }
  });
}

template <class F, class C>
decode_result pipeline_ops<F, C>::decode_accumulate(const F& f, const C& c, receiver_state& state,
                                                    cbytes payload, std::span<float> acc,
                                                    float weight, bytes ws) {
  const pipeline<F, C> pipe = concrete(f, c);
  if constexpr (F::id == feedback_id::ef21) {
    return commpress::decode_accumulate(cpu::seq, pipe, state, payload, weight, ws);
  } else if constexpr (keyed_by_sample_v<F>) {
    COMMPRESS_EXPECTS(false, errc::invalid_argument, "pipeline",
                      "aq_sgd keeps per-sample caches: it has no decode_accumulate");
    return {};
  } else {
    return {commpress::decode_accumulate(cpu::seq, pipe, payload, acc, weight), 0};
  }
}

// --- channel ends ---------------------------------------------------------------------------

template <class P> class sender_impl final : public sender_iface {
public:
  sender_impl(const P& pipe, std::uint64_t n, const context& base) : end_(pipe, n, base) {}
  cbytes send(ids_span ids, std::span<const float> x) override {
    if constexpr (detail::keyed_by_sample<P>) {
      return end_.send(ids, x);
    } else {
      return end_.send(x);
    }
  }
  bool& enabled() override { return end_.enabled; }
  [[nodiscard]] step_result last() const override { return end_.last(); }
  [[nodiscard]] std::uint64_t step() const override { return end_.step(); }
  [[nodiscard]] std::vector<std::byte> save() const override { return end_.save(); }
  void load(cbytes blob) override { end_.load(blob); }
  [[nodiscard]] bool keyed_by_sample() const override { return detail::keyed_by_sample<P>; }

private:
  sender_end<P> end_;
};

template <class P> class receiver_impl final : public receiver_iface {
public:
  receiver_impl(const P& pipe, std::uint64_t n, const context& base) : end_(pipe, n, base) {}
  std::span<const float> receive(cbytes payload, ids_span ids) override {
    if constexpr (detail::keyed_by_sample<P>) {
      return end_.receive(payload, ids);
    } else {
      return end_.receive(payload);
    }
  }
  bool& enabled() override { return end_.enabled; }
  [[nodiscard]] decode_result last() const override { return end_.last(); }
  [[nodiscard]] std::uint64_t step() const override { return end_.step(); }
  [[nodiscard]] std::vector<std::byte> save() const override { return end_.save(); }
  void load(cbytes blob) override { end_.load(blob); }
  [[nodiscard]] bool keyed_by_sample() const override { return detail::keyed_by_sample<P>; }

private:
  receiver_end<P> end_;
};

template <class F, class C>
std::unique_ptr<sender_iface> channel_ops<F, C>::make_sender(const F& f, const C& c,
                                                             std::uint64_t n, const context& base) {
  return std::make_unique<sender_impl<pipeline<F, C>>>(concrete(f, c), n, base);
}

template <class F, class C>
std::unique_ptr<receiver_iface>
channel_ops<F, C>::make_receiver(const F& f, const C& c, std::uint64_t n, const context& base) {
  return std::make_unique<receiver_impl<pipeline<F, C>>>(concrete(f, c), n, base);
}

} // namespace commpress::py

/// Instantiates the codec, pipeline and channel entry points of one codec with every feedback
/// policy of any_feedback.
#define COMMPRESS_PY_PIPELINE(F, C)                                                                \
  template struct commpress::py::pipeline_ops<F, C>;                                               \
  template struct commpress::py::channel_ops<F, C>;

#define COMMPRESS_PY_INSTANTIATE(C)                                                                \
  template struct commpress::py::codec_ops<C>;                                                     \
  COMMPRESS_PY_PIPELINE(commpress::none, C)                                                        \
  COMMPRESS_PY_PIPELINE(commpress::ef, C)                                                          \
  COMMPRESS_PY_PIPELINE(commpress::ef21, C)                                                        \
  COMMPRESS_PY_PIPELINE(commpress::loco<commpress::store_f32>, C)                                  \
  COMMPRESS_PY_PIPELINE(commpress::loco<commpress::store_bf16>, C)                                 \
  COMMPRESS_PY_PIPELINE(commpress::loco<commpress::store_int8>, C)                                 \
  COMMPRESS_PY_PIPELINE(commpress::loco<commpress::store_int4>, C)                                 \
  COMMPRESS_PY_PIPELINE(commpress::aq_sgd<commpress::store_f32>, C)                                \
  COMMPRESS_PY_PIPELINE(commpress::aq_sgd<commpress::store_bf16>, C)                               \
  COMMPRESS_PY_PIPELINE(commpress::aq_sgd<commpress::store_int8>, C)                               \
  COMMPRESS_PY_PIPELINE(commpress::aq_sgd<commpress::store_int4>, C)                               \
  COMMPRESS_PY_PIPELINE(commpress::dgc, C)
