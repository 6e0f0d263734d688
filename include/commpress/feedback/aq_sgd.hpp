// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// AQ-SGD: per-sample activation caches on both sides of a stage boundary (Wang et al. 2022;
/// docs/methods.md 6.1, and Rudakov et al.'s TopK + AQ-SGD, 4.5).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "commpress/backend/cpu/identity.hpp"
#include "commpress/codec_ops.hpp"
#include "commpress/compress/identity.hpp"
#include "commpress/core/state_blob.hpp"
#include "commpress/feedback/feedback.hpp"
#include "commpress/feedback/storage.hpp"

namespace commpress {

/// @brief An AQ-SGD cache: m(xi) for every dataset sample xi, `sample_size` values each, kept in
/// Storage, initially 0. The sender and the receiver each hold one; they stay bitwise equal.
template <class Storage = store_f32> class aq_sgd_state {
public:
  static constexpr std::uint32_t layout_version = 1;

  aq_sgd_state() = default;
  aq_sgd_state(std::uint64_t samples, std::uint64_t sample_size) : m_(samples, sample_size) {}

  [[nodiscard]] std::uint64_t samples() const noexcept { return m_.rows(); }
  [[nodiscard]] std::uint64_t sample_size() const noexcept { return m_.row_length(); }
  /// Writes m(id), dequantized, into out[0..sample_size()).
  void sample(std::uint64_t id, std::span<float> out) const {
    COMMPRESS_EXPECTS(id < samples(), errc::invalid_argument, "aq_sgd", "sample id out of range");
    detail::check_state_size(sample_size(), out.size(), "aq_sgd");
    m_.load_row(id, out.data());
  }
  [[nodiscard]] const stored_rows<Storage>& storage() const noexcept { return m_; }
  [[nodiscard]] stored_rows<Storage>& storage() noexcept { return m_; }

  [[nodiscard]] std::vector<std::byte> save(std::uint32_t tensor_id) const {
    blob_writer w(state_kind::aq_sgd_cache, layout_version, tensor_id);
    m_.describe(w);
    m_.save(w);
    return w.finish();
  }
  /// @throws commpress::error for a bad blob; the state is unchanged then.
  void load(std::span<const std::byte> blob, std::uint32_t tensor_id) {
    blob_reader r(blob, state_kind::aq_sgd_cache, layout_version, tensor_id);
    m_.expect(r);
    stored_rows<Storage> m = m_;
    m.load(r);
    r.finish();
    m_ = std::move(m);
  }
  friend bool operator==(const aq_sgd_state&, const aq_sgd_state&) = default;

private:
  stored_rows<Storage> m_;
};

/// @brief AQ-SGD at a stage boundary. The tensor is a batch of rows of `sample_size` elements,
/// row r belonging to dataset sample ids[r].
///
/// - Warm-up (ctx.step < warmup_steps): the payload is the identity codec's (uncompressed), the
///   receiver outputs a exactly, and both sides set m(xi) = storage(a(xi)).
/// - Afterwards: send C(a - m(xi)); both sides m(xi) += deQ; the receiver outputs m(xi).
/// The receiver takes the warm-up decision from the payload's (checksummed) step. Storage
/// store_bf16 or store_int4 trade cache memory for a reconstruction floor (the paper's open
/// question; docs/methods.md 6.3 `delta-lowbits`).
template <class Storage = store_f32> struct aq_sgd {
  static constexpr feedback_id id = feedback_id::aq_sgd;
  using sender_state = aq_sgd_state<Storage>;
  using receiver_state = aq_sgd_state<Storage>;

  std::uint64_t samples = 0;      ///< dataset size: cache rows on each side
  std::uint64_t sample_size = 0;  ///< elements per sample (row length)
  std::uint64_t warmup_steps = 0; ///< steps sent uncompressed while the caches fill

  [[nodiscard]] constexpr status can_implement(std::uint64_t n) const noexcept {
    if (samples == 0 || sample_size == 0)
      return {errc::invalid_argument, "aq_sgd: samples and sample_size must be positive"};
    if (n % sample_size != 0)
      return {errc::invalid_argument, "aq_sgd: the tensor is not a whole number of samples"};
    return {};
  }
  /// The cache is sized from the configuration; the tensor length is not needed.
  [[nodiscard]] sender_state make_sender_state(std::uint64_t = 0) const {
    return aq_sgd_state<Storage>(samples, sample_size);
  }
  [[nodiscard]] receiver_state make_receiver_state(std::uint64_t = 0) const {
    return aq_sgd_state<Storage>(samples, sample_size);
  }
  friend constexpr bool operator==(const aq_sgd&, const aq_sgd&) = default;
};

static_assert(feedback<aq_sgd<>>);

namespace detail {

template <class Storage> struct feedback_ops<aq_sgd<Storage>> {
  using config = aq_sgd<Storage>;
  using state = aq_sgd_state<Storage>;

  template <class Policy, codec C>
  static std::uint64_t workspace_bytes(const Policy& p, const config& f, const C& c,
                                       std::uint64_t n) {
    return scratch_bytes(p, c, n, 1, f.sample_size);
  }
  template <codec C>
  static std::uint64_t max_payload_bytes(const config& f, const C& c, std::uint64_t n) {
    const std::uint64_t coded = commpress::max_payload_bytes(c, n);
    const std::uint64_t plain = commpress::max_payload_bytes(identity{}, n);
    return f.warmup_steps > 0 && plain > coded ? plain : coded;
  }

  static void check(const config& f, const state& st, std::span<const std::uint64_t> ids,
                    std::uint64_t n) {
    const status ok = f.can_implement(n);
    COMMPRESS_EXPECTS(ok, ok.code, "aq_sgd", ok.message);
    COMMPRESS_EXPECTS(st.samples() == f.samples && st.sample_size() == f.sample_size,
                      errc::size_mismatch, "aq_sgd", "state was made for another configuration");
    COMMPRESS_EXPECTS(ids.size() * f.sample_size == n, errc::size_mismatch, "aq_sgd",
                      std::to_string(ids.size()) + " sample ids for " +
                          std::to_string(n / f.sample_size) + " rows");
    for (std::uint64_t id : ids)
      COMMPRESS_EXPECTS(id < f.samples, errc::invalid_argument, "aq_sgd",
                        "sample id " + std::to_string(id) + " >= samples " +
                            std::to_string(f.samples));
  }

  /// Warm-up: m(id) = storage(t) where t is finite. Rows apply in order, on both sides alike.
  static std::size_t fill(state& st, std::span<const std::uint64_t> ids, std::span<const float> t,
                          std::span<float> row) {
    const std::uint64_t len = row.size();
    std::size_t held = 0;
    for (std::size_t r = 0; r < ids.size(); ++r) {
      st.storage().load_row(ids[r], row.data());
      for (std::uint64_t j = 0; j < len; ++j) {
        const float v = t[r * len + j];
        if (is_finite(v)) {
          row[j] = v;
        } else {
          ++held;
        }
      }
      st.storage().store_row(ids[r], row.data());
    }
    return held;
  }

  /// m(id) += t, finite sums only.
  static std::size_t add(state& st, std::span<const std::uint64_t> ids, std::span<const float> t,
                         std::span<float> row) {
    const std::uint64_t len = row.size();
    std::size_t held = 0;
    for (std::size_t r = 0; r < ids.size(); ++r) {
      st.storage().load_row(ids[r], row.data());
      held += add_finite(row, t.subspan(r * len, len), 1.0f);
      st.storage().store_row(ids[r], row.data());
    }
    return held;
  }

  template <class Policy, codec C, element T>
  static step_result encode(const Policy& p, const config& f, const C& c, state& st,
                            const context& ctx, std::span<const std::uint64_t> ids,
                            std::span<const T> in, std::span<std::byte> out,
                            std::span<std::byte> ws) {
    const std::uint64_t n = in.size();
    check(f, st, ids, n);
    check_fail_policy(ctx, in, "aq_sgd");
    scratch s(ws);
    std::span<float> t = s.floats(n);
    std::span<float> row = s.floats(f.sample_size);
    const std::uint64_t len = f.sample_size;
    if (ctx.step < f.warmup_steps) {
      const encode_result r = commpress::encode(p, identity{}, ctx, in, out, s.rest());
      commpress::decode(p, identity{}, std::span<const std::byte>(out.first(r.bytes)), t);
      return {r.bytes, r.nonfinite, fill(st, ids, t, row)};
    }
    std::size_t bad = 0;
    for (std::size_t r = 0; r < ids.size(); ++r) {
      st.storage().load_row(ids[r], row.data());
      for (std::uint64_t j = 0; j < len; ++j)
        t[r * len + j] = sub_rn(screen(to_float(in[r * len + j]), ctx.on_nonfinite, bad), row[j]);
    }
    const encode_result r = commpress::encode(p, c, ctx, std::span<const float>(t), out, s.rest());
    commpress::decode(p, c, std::span<const std::byte>(out.first(r.bytes)), t);
    return {r.bytes, bad, add(st, ids, t, row)};
  }

  template <class Policy, codec C, element T>
  static decode_result decode(const Policy& p, const config& f, const C& c, state& st,
                              std::span<const std::uint64_t> ids,
                              std::span<const std::byte> payload, std::span<T> out,
                              std::span<std::byte> ws) {
    const std::uint64_t n = out.size();
    check(f, st, ids, n);
    COMMPRESS_EXPECTS(payload.size() >= format::header_bytes, errc::truncated, "payload",
                      "payload shorter than the 64-byte header");
    scratch s(ws);
    std::span<float> t = s.floats(n);
    std::span<float> row = s.floats(f.sample_size);
    const std::uint64_t len = f.sample_size;
    // The step is only trusted once decode() below has verified the checksum over it.
    if (format::read_header(payload.data()).step < f.warmup_steps) {
      const payload_header h = commpress::decode(p, identity{}, payload, t);
      const std::size_t held = fill(st, ids, t, row);
      for (std::size_t i = 0; i < n; ++i)
        out[i] = from_float<T>(t[i]);
      return {h, held};
    }
    const payload_header h = commpress::decode(p, c, payload, t);
    const std::size_t held = add(st, ids, t, row);
    for (std::size_t r = 0; r < ids.size(); ++r) {
      st.storage().load_row(ids[r], row.data());
      for (std::uint64_t j = 0; j < len; ++j)
        out[r * len + j] = from_float<T>(row[j]);
    }
    return {h, held};
  }
};

} // namespace detail
} // namespace commpress
