// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Model-parallel stage boundaries through the library's channels (Rudakov et al.,
/// docs/methods.md section 4): every boundary gets one sender_end/receiver_end pair for the
/// activations going forward and one for the gradients coming back, each with its own codec and
/// feedback policy, configured from short text specs. The training loop only sees
/// `boundary_hooks`; the hooks send the batch, and replace it with what the receiver decoded.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/rotated.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/compress/identity.hpp"
#include "commpress/compress/quantize.hpp"
#include "commpress/compress/rotated.hpp"
#include "commpress/compress/top_k.hpp"
#include "commpress/pipeline/channel.hpp"
#include "commpress/pipeline/pipeline.hpp"

#include "common/mlp.hpp"
#include "common/training.hpp"

namespace commpress_examples {

namespace cp = commpress;

/// @brief A boundary codec, before it is sized for a boundary's width.
///
/// Text forms (what --fwd/--bwd and the sweep driver use):
/// - `fp32`, `id` or `q32`: the identity codec (lossless, 4 bytes per element);
/// - `q<b>[:tensor|:block<N>|:column][:asym|:sym][:sr]`, b in 1..8: b-bit quantization. The
///   default, per-tensor asymmetric min-max with round-to-nearest, is Rudakov's
///   `quantize_custom` (docs/methods.md 2.2); `column` is AQ-SGD's per-feature scale (4.2);
/// - `topk<p>[:q<b>]`, 0 < p <= 100: per-sample TopK keeping round(p% of the row) elements of
///   each sample (docs/methods.md 4.3), at least one; with `:q<b>`, b in 1..8, the kept values
///   are sent b-bit quantized, asymmetric, one scale per 64 kept values (docs/methods.md 3.4);
/// - `...:rot<k>` after any quantize spec, k in 3..12: the randomized Hadamard rotation in
///   windows of 2^k elements before the quantizer (rotated<quantize>, docs/methods.md 16).
struct codec_spec {
  enum class kind { identity, quantize, top_k };
  kind k = kind::identity;
  cp::quantize q{.bits = 8,
                 .granularity = cp::scale_granularity::tensor,
                 .group = 0,
                 .range = cp::quant_range::asymmetric,
                 .round = cp::rounding::nearest};
  bool column_scales = false; ///< quantize: one scale per feature (group = the row width)
  unsigned rotate_log2 = 0;   ///< quantize: log2 of the Hadamard rotation's window (0: none)
  double percent = 100.0;     ///< top_k: share of each sample's row that is kept, in percent
  unsigned value_bits = 0;    ///< top_k: bits of the quantized kept values (0: fp32 values)
  std::string text;

  /// Elements kept per row of `width` under top_k.
  std::uint64_t top_k_count(std::size_t width) const {
    const auto k = static_cast<std::uint64_t>(std::llround(percent / 100.0 * double(width)));
    return k < 1 ? 1 : (k > width ? width : k);
  }
};

namespace detail {

inline unsigned parse_uint(std::string_view s, std::string_view what) {
  if (s.empty() || s.size() > 9)
    throw std::invalid_argument(std::string("bad ") + std::string(what));
  unsigned v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      throw std::invalid_argument(std::string("bad ") + std::string(what));
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  return v;
}

} // namespace detail

/// @brief Parses a codec spec (see codec_spec); throws std::invalid_argument naming the spec.
inline codec_spec parse_codec(std::string_view text) {
  codec_spec s;
  s.text = std::string(text);
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument("codec spec '" + std::string(text) + "': " + why);
  };
  if (text == "fp32" || text == "id" || text == "q32")
    return s;
  if (text.starts_with("topk")) {
    s.k = codec_spec::kind::top_k;
    try {
      std::size_t used = 0;
      const std::string_view spec = text.substr(4);
      const std::string num(spec.substr(0, spec.find(':')));
      s.percent = std::stod(num, &used);
      if (used != num.size())
        fail("expected topk<percent>[:q<bits>]");
      if (num.size() < spec.size()) {
        const std::string_view values = spec.substr(num.size() + 1);
        if (!values.starts_with("q"))
          fail("expected topk<percent>[:q<bits>]");
        s.value_bits = detail::parse_uint(values.substr(1), "value bit count");
      }
    } catch (const std::logic_error&) {
      fail("expected topk<percent>[:q<bits>]");
    }
    if (!(s.percent > 0.0 && s.percent <= 100.0))
      fail("the percentage must lie in (0, 100]");
    if (s.value_bits > 8)
      fail("the kept values take 1..8 bits");
    return s;
  }
  if (!text.starts_with("q"))
    fail("expected fp32, q<bits>[:options] or topk<percent>");
  s.k = codec_spec::kind::quantize;
  std::string_view rest = text.substr(1);
  const std::size_t colon = rest.find(':');
  try {
    s.q.bits = detail::parse_uint(rest.substr(0, colon), "bit count");
  } catch (const std::invalid_argument&) {
    fail("expected q<bits>");
  }
  if (s.q.bits < 1 || s.q.bits > 8)
    fail("bits must be 1..8 (q32 is the identity)");
  rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
  while (!rest.empty()) {
    const std::size_t next = rest.find(':');
    const std::string_view opt = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view{} : rest.substr(next + 1);
    if (opt == "tensor") {
      s.q.granularity = cp::scale_granularity::tensor;
      s.q.group = 0;
      s.column_scales = false;
    } else if (opt == "column") {
      s.q.granularity = cp::scale_granularity::column;
      s.column_scales = true;
    } else if (opt.starts_with("block")) {
      s.q.granularity = cp::scale_granularity::block;
      s.column_scales = false;
      try {
        s.q.group = detail::parse_uint(opt.substr(5), "block size");
      } catch (const std::invalid_argument&) {
        fail("expected block<N>");
      }
    } else if (opt == "sym") {
      s.q.range = cp::quant_range::symmetric;
    } else if (opt == "asym") {
      s.q.range = cp::quant_range::asymmetric;
    } else if (opt == "sr") {
      s.q.round = cp::rounding::stochastic;
    } else if (opt.starts_with("rot")) {
      try {
        s.rotate_log2 = detail::parse_uint(opt.substr(3), "rotation window");
      } catch (const std::invalid_argument&) {
        fail("expected rot<log2 window>");
      }
      if (s.rotate_log2 < cp::hadamard_min_log2 || s.rotate_log2 > cp::hadamard_max_log2)
        fail("rot<k> takes k in 3..12");
    } else {
      fail("unknown option '" + std::string(opt) + "'");
    }
  }
  return s;
}

/// @brief Where error-feedback state is kept between steps (AQ-SGD's buffers).
enum class storage_kind { f32, bf16, int8, int4 };

/// @brief A feedback policy: `none`, `ef`, `ef21`, or `aq_sgd[:f32|:bf16|:int8|:int4]`.
struct feedback_spec {
  enum class kind { none, ef, ef21, aq_sgd };
  kind k = kind::none;
  storage_kind storage = storage_kind::f32;
  std::string text = "none";
};

inline feedback_spec parse_feedback(std::string_view text) {
  feedback_spec f;
  f.text = std::string(text);
  if (text == "none")
    return f;
  if (text == "ef") {
    f.k = feedback_spec::kind::ef;
    return f;
  }
  if (text == "ef21") {
    f.k = feedback_spec::kind::ef21;
    return f;
  }
  if (text.starts_with("aq_sgd")) {
    f.k = feedback_spec::kind::aq_sgd;
    const std::string_view st = text.substr(6);
    if (st.empty() || st == ":f32")
      f.storage = storage_kind::f32;
    else if (st == ":bf16")
      f.storage = storage_kind::bf16;
    else if (st == ":int8")
      f.storage = storage_kind::int8;
    else if (st == ":int4")
      f.storage = storage_kind::int4;
    else
      throw std::invalid_argument("feedback spec '" + std::string(text) +
                                  "': storage must be f32, bf16, int8 or int4");
    return f;
  }
  throw std::invalid_argument("feedback spec '" + std::string(text) +
                              "': expected none, ef, ef21 or aq_sgd[:storage]");
}

/// @brief One direction of one boundary: a sender_end and the matching receiver_end.
class boundary_direction {
public:
  virtual ~boundary_direction() = default;
  /// Sends `data` (rows x width, row-major) and overwrites it with what the receiver
  /// reconstructed; returns the payload bytes that crossed the boundary.
  virtual std::size_t transfer(Eigen::Ref<matrix> data, std::span<const std::uint32_t> ids) = 0;
  /// Inference switch: disabled ends send identity payloads and leave their state alone.
  virtual void set_enabled(bool on) = 0;
  /// Memory of the per-sample AQ-SGD caches at both ends (0 for the other policies).
  virtual std::uint64_t sample_cache_bytes() const = 0;
};

namespace detail {

template <class Pipe, bool PerSample> class channel_direction final : public boundary_direction {
public:
  channel_direction(const Pipe& pipe, std::size_t rows, std::size_t width, std::uint64_t seed,
                    std::uint32_t tensor_id)
      : rows_(rows), width_(width), tx_(pipe, rows * width, stream(seed, tensor_id)),
        rx_(pipe, rows * width, stream(seed, tensor_id)), ids_(rows) {}

  std::size_t transfer(Eigen::Ref<matrix> data, std::span<const std::uint32_t> ids) override {
    if (static_cast<std::size_t>(data.rows()) != rows_ ||
        static_cast<std::size_t>(data.cols()) != width_ || data.outerStride() != data.cols())
      throw std::invalid_argument("boundary channel: batch is not a contiguous " +
                                  std::to_string(rows_) + " x " + std::to_string(width_) +
                                  " matrix");
    const std::span<const float> in(data.data(), rows_ * width_);
    std::span<const std::byte> payload;
    std::span<const float> out;
    if constexpr (PerSample) {
      // The library keys samples by 64-bit ids; the training loop hands out 32-bit ones.
      std::copy(ids.begin(), ids.end(), ids_.begin());
      payload = tx_.send(ids_, in);
      out = rx_.receive(payload, ids_);
    } else {
      payload = tx_.send(in);
      out = rx_.receive(payload);
    }
    std::copy(out.begin(), out.end(), data.data());
    return payload.size();
  }

  void set_enabled(bool on) override { tx_.enabled = rx_.enabled = on; }

  std::uint64_t sample_cache_bytes() const override {
    if constexpr (PerSample)
      return tx_.state().storage().memory_bytes() + rx_.state().storage().memory_bytes();
    else
      return 0;
  }

private:
  static cp::context stream(std::uint64_t seed, std::uint32_t tensor_id) {
    return cp::context{.seed = seed, .step = 0, .tensor_id = tensor_id};
  }

  std::size_t rows_;
  std::size_t width_;
  cp::sender_end<Pipe> tx_;
  cp::receiver_end<Pipe> rx_;
  std::vector<std::uint64_t> ids_;
};

template <class Codec>
std::unique_ptr<boundary_direction>
make_with_codec(const Codec& codec, const feedback_spec& fb, std::size_t rows, std::size_t width,
                std::uint64_t samples, std::uint64_t warmup_steps, std::uint64_t seed,
                std::uint32_t tensor_id) {
  const auto make = [&]<class Feedback, bool PerSample>(const Feedback& f) {
    using pipe_t = cp::pipeline<Feedback, Codec>;
    return std::unique_ptr<boundary_direction>(
        new channel_direction<pipe_t, PerSample>(pipe_t{f, codec}, rows, width, seed, tensor_id));
  };
  const auto aq = [&]<class Storage>() {
    return make.template operator()<cp::aq_sgd<Storage>, true>(cp::aq_sgd<Storage>{
        .samples = samples, .sample_size = width, .warmup_steps = warmup_steps});
  };
  switch (fb.k) {
  case feedback_spec::kind::none:
    return make.template operator()<cp::none, false>(cp::none{});
  case feedback_spec::kind::ef:
    return make.template operator()<cp::ef, false>(cp::ef{});
  case feedback_spec::kind::ef21:
    return make.template operator()<cp::ef21, false>(cp::ef21{});
  case feedback_spec::kind::aq_sgd:
    switch (fb.storage) {
    case storage_kind::f32:
      return aq.template operator()<cp::store_f32>();
    case storage_kind::bf16:
      return aq.template operator()<cp::store_bf16>();
    case storage_kind::int8:
      return aq.template operator()<cp::store_int8>();
    case storage_kind::int4:
      return aq.template operator()<cp::store_int4>();
    }
  }
  throw std::logic_error("unknown feedback kind");
}

} // namespace detail

/// @brief A channel for `rows` x `width` batches with the given codec and feedback.
/// @param samples AQ-SGD: number of distinct sample ids (the training set size)
/// @param warmup_steps AQ-SGD: steps that send the whole activation (one epoch)
inline std::unique_ptr<boundary_direction>
make_boundary_direction(const codec_spec& c, const feedback_spec& fb, std::size_t rows,
                        std::size_t width, std::uint64_t samples, std::uint64_t warmup_steps,
                        std::uint64_t seed, std::uint32_t tensor_id) {
  switch (c.k) {
  case codec_spec::kind::identity:
    return detail::make_with_codec(cp::identity{}, fb, rows, width, samples, warmup_steps, seed,
                                   tensor_id);
  case codec_spec::kind::quantize: {
    cp::quantize q = c.q;
    if (c.column_scales)
      q.group = static_cast<std::uint32_t>(width);
    if (c.rotate_log2 != 0)
      return detail::make_with_codec(
          cp::rotated<cp::quantize>{q, static_cast<std::uint8_t>(c.rotate_log2)}, fb, rows, width,
          samples, warmup_steps, seed, tensor_id);
    return detail::make_with_codec(q, fb, rows, width, samples, warmup_steps, seed, tensor_id);
  }
  case codec_spec::kind::top_k: {
    const cp::top_k t{.fraction = 0.0f,
                      .count = c.top_k_count(width),
                      .row_length = static_cast<std::uint32_t>(width),
                      .values = cp::dtype::f32,
                      .value_quantizer = {.bits = c.value_bits,
                                          .granularity = cp::scale_granularity::block,
                                          .group = 64,
                                          .range = cp::quant_range::asymmetric}};
    return detail::make_with_codec(t, fb, rows, width, samples, warmup_steps, seed, tensor_id);
  }
  }
  throw std::logic_error("unknown codec kind");
}

/// @brief Everything a model-parallel run sends across its boundaries.
struct boundary_config {
  codec_spec fwd;                 ///< activations, stage b -> b + 1
  codec_spec bwd;                 ///< gradients, stage b + 1 -> b
  feedback_spec fwd_feedback;     ///< on the activation channels
  feedback_spec bwd_feedback;     ///< on the gradient channels
  std::size_t train_rows = 128;   ///< training batch size
  std::size_t eval_rows = 100;    ///< evaluation batch size (must divide the test set)
  std::uint64_t samples = 0;      ///< training samples (AQ-SGD's buffer rows)
  std::uint64_t warmup_steps = 0; ///< AQ-SGD warm-up steps
  std::uint64_t seed = 1;
};

/// @brief The channels of every boundary of a model: training channels (with feedback) in both
/// directions, and stateless evaluation channels for the forward direction.
///
/// Compressed inference runs the forward codec without feedback: test samples have no
/// AQ-SGD buffer, and an EF/EF21 state belongs to the training stream (Rudakov et al. also
/// evaluate the bare operator). Uncompressed inference runs the same evaluation channels with
/// `enabled = false`, so the payloads are identity payloads.
class model_channels {
public:
  model_channels(const mlp& model, const boundary_config& cfg) : cfg_(cfg) {
    const feedback_spec plain{};
    for (std::size_t b = 0; b < model.num_boundaries(); ++b) {
      const std::size_t width = model[b].out_width();
      const auto id = static_cast<std::uint32_t>(b);
      fwd_.push_back(make_boundary_direction(cfg.fwd, cfg.fwd_feedback, cfg.train_rows, width,
                                             cfg.samples, cfg.warmup_steps, cfg.seed, 2 * id));
      bwd_.push_back(make_boundary_direction(cfg.bwd, cfg.bwd_feedback, cfg.train_rows, width,
                                             cfg.samples, cfg.warmup_steps, cfg.seed, 2 * id + 1));
      eval_.push_back(
          make_boundary_direction(cfg.fwd, plain, cfg.eval_rows, width, 0, 0, cfg.seed, 2 * id));
      state_bytes_ += fwd_.back()->sample_cache_bytes() + bwd_.back()->sample_cache_bytes();
    }
  }

  /// Hooks for training: every boundary, both directions, counting payload bytes.
  boundary_hooks training_hooks() {
    boundary_hooks h;
    for (std::size_t b = 0; b < fwd_.size(); ++b) {
      h.forward.push_back(hook(*fwd_[b]));
      h.backward.push_back(hook(*bwd_[b]));
    }
    return h;
  }

  /// Hooks for evaluation, with the forward codec applied (`compressed`) or identity payloads.
  boundary_hooks eval_hooks(bool compressed) {
    boundary_hooks h;
    for (auto& d : eval_) {
      d->set_enabled(compressed);
      boundary_direction* dir = d.get();
      h.forward.push_back([dir](Eigen::Ref<matrix> data, std::span<const std::uint32_t> ids, bool) {
        dir->transfer(data, ids);
      });
    }
    return h;
  }

  /// Payload bytes sent by the training channels since the last reset_bytes().
  std::uint64_t bytes() const noexcept { return bytes_; }
  void reset_bytes() noexcept { bytes_ = 0; }
  /// Memory of the per-sample feedback buffers, both ends of every boundary (AQ-SGD only).
  std::uint64_t state_bytes() const noexcept { return state_bytes_; }
  const boundary_config& config() const noexcept { return cfg_; }

private:
  boundary_fn hook(boundary_direction& dir) {
    return [this, &dir](Eigen::Ref<matrix> data, std::span<const std::uint32_t> ids, bool) {
      bytes_ += dir.transfer(data, ids);
    };
  }

  boundary_config cfg_;
  std::vector<std::unique_ptr<boundary_direction>> fwd_;
  std::vector<std::unique_ptr<boundary_direction>> bwd_;
  std::vector<std::unique_ptr<boundary_direction>> eval_;
  std::uint64_t bytes_ = 0;
  std::uint64_t state_bytes_ = 0;
};

} // namespace commpress_examples
