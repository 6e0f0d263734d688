// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// A small Linear+ReLU MLP split into pipeline stages. Each stage keeps its parameters and
/// gradients in one contiguous float buffer, so optimizers and compressors can work on flat
/// std::span views without knowing the layer structure.

// The examples claim bit-reproducible runs for a seed; Eigen's OpenMP GEMM splits work by
// thread count, which would change the summation order, so keep it single-threaded.
#ifndef EIGEN_DONT_PARALLELIZE
#define EIGEN_DONT_PARALLELIZE
#endif
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "random.hpp"

namespace commpress_examples {

/// Batch matrices are row-major: one sample per row, so a sample's activations are contiguous
/// (what a per-sample compressor or a network send wants).
using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using row_vector = Eigen::Matrix<float, 1, Eigen::Dynamic>;

/// @brief Where one tensor lives inside a stage's flat parameter (and gradient) buffer.
struct param_block {
  std::size_t offset = 0; ///< first element in the flat buffer
  std::size_t rows = 0;   ///< weight: fan_in; bias: 1
  std::size_t cols = 0;   ///< fan_out
  std::size_t layer = 0;  ///< global layer index in the model
  bool is_bias = false;
  std::size_t size() const noexcept { return rows * cols; }
};

/// @brief Description of one Linear layer in a stage.
struct layer_spec {
  std::size_t in = 0;
  std::size_t out = 0;
  bool relu = true;
  std::size_t global_index = 0; ///< seeds the init, so results don't depend on the split
};

/// @brief A contiguous run of Linear(+ReLU) layers: y = relu(x W + b), W is in x out.
///
/// forward() caches what backward() needs, so calls must alternate forward, backward per
/// micro-batch. backward() overwrites (does not accumulate) the gradient buffer with the
/// gradient of the loss for that batch.
class stage {
public:
  /// @param compute_input_grad false for the first stage: nobody consumes d loss / d input,
  ///   and skipping it saves one GEMM as large as the first layer's forward.
  stage(std::vector<layer_spec> layers, std::uint64_t seed, bool compute_input_grad = true)
      : specs_(std::move(layers)), compute_input_grad_(compute_input_grad) {
    if (specs_.empty())
      throw std::invalid_argument("stage: no layers");
    std::size_t total = 0;
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      const layer_spec& s = specs_[i];
      if (s.in == 0 || s.out == 0)
        throw std::invalid_argument("stage: zero-width layer");
      if (i > 0 && specs_[i - 1].out != s.in)
        throw std::invalid_argument("stage: layer widths do not chain");
      blocks_.push_back({total, s.in, s.out, s.global_index, false});
      total += s.in * s.out;
      blocks_.push_back({total, 1, s.out, s.global_index, true});
      total += s.out;
    }
    params_.assign(total, 0.0f);
    grads_.assign(total, 0.0f);
    outputs_.resize(specs_.size());
    init(seed);
  }

  std::size_t in_width() const noexcept { return specs_.front().in; }
  std::size_t out_width() const noexcept { return specs_.back().out; }
  std::span<const layer_spec> layers() const noexcept { return specs_; }

  /// Flat views. The layout is [W0 (in x out, row-major), b0, W1, b1, ...]; see blocks().
  std::span<float> parameters() noexcept { return params_; }
  std::span<const float> parameters() const noexcept { return params_; }
  std::span<float> gradients() noexcept { return grads_; }
  std::span<const float> gradients() const noexcept { return grads_; }
  std::span<const param_block> blocks() const noexcept { return blocks_; }

  /// Training forward: caches inputs and post-activation outputs for backward().
  matrix forward(const matrix& in) {
    check_width(in.cols(), in_width(), "forward input");
    // Copy: the caller may change `in` afterwards, and the weight gradient must use exactly
    // what this stage consumed. Later layers read their input from outputs_[i - 1].
    input_ = in;
    for (std::size_t i = 0; i < specs_.size(); ++i)
      apply_layer(i, i == 0 ? input_ : outputs_[i - 1], outputs_[i]);
    // A copy again: boundary hooks edit the returned activations in place, while backward()
    // needs the unmodified outputs for the ReLU masks.
    return outputs_.back();
  }

  /// Inference forward: no caching, so it leaves a pending backward() untouched.
  matrix infer(const matrix& in) const {
    check_width(in.cols(), in_width(), "infer input");
    matrix x = in;
    matrix y;
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      apply_layer(i, x, y);
      x.swap(y);
    }
    return x;
  }

  /// Backward for the batch of the last forward(): fills gradients() and returns
  /// d loss / d input (an empty matrix if constructed with compute_input_grad = false).
  matrix backward(const matrix& grad_out) {
    check_width(grad_out.cols(), out_width(), "backward gradient");
    if (grad_out.rows() != outputs_.back().rows())
      throw std::invalid_argument("stage: backward batch size differs from forward");
    matrix g = grad_out;
    matrix g_in;
    for (std::size_t k = specs_.size(); k-- > 0;) {
      const layer_spec& s = specs_[k];
      if (s.relu)
        g.array() = (outputs_[k].array() > 0.0f).select(g.array(), 0.0f);
      const matrix& x = k == 0 ? input_ : outputs_[k - 1];
      weight_map(grads_.data(), k).noalias() = x.transpose() * g;
      bias_map(grads_.data(), k) = g.colwise().sum();
      if (k == 0 && !compute_input_grad_)
        return matrix();
      g_in.noalias() = g * cweight_map(params_.data(), k).transpose();
      g.swap(g_in);
    }
    return g;
  }

private:
  using weight_view = Eigen::Map<matrix>;
  using cweight_view = Eigen::Map<const matrix>;
  using bias_view = Eigen::Map<row_vector>;
  using cbias_view = Eigen::Map<const row_vector>;

  weight_view weight_map(float* base, std::size_t k) const {
    const param_block& b = blocks_[2 * k];
    return weight_view(base + b.offset, static_cast<Eigen::Index>(b.rows),
                       static_cast<Eigen::Index>(b.cols));
  }
  cweight_view cweight_map(const float* base, std::size_t k) const {
    const param_block& b = blocks_[2 * k];
    return cweight_view(base + b.offset, static_cast<Eigen::Index>(b.rows),
                        static_cast<Eigen::Index>(b.cols));
  }
  bias_view bias_map(float* base, std::size_t k) const {
    const param_block& b = blocks_[2 * k + 1];
    return bias_view(base + b.offset, static_cast<Eigen::Index>(b.cols));
  }
  cbias_view cbias_map(const float* base, std::size_t k) const {
    const param_block& b = blocks_[2 * k + 1];
    return cbias_view(base + b.offset, static_cast<Eigen::Index>(b.cols));
  }

  void apply_layer(std::size_t k, const matrix& x, matrix& y) const {
    y.resize(x.rows(), static_cast<Eigen::Index>(specs_[k].out));
    y.noalias() = x * cweight_map(params_.data(), k);
    y.rowwise() += cbias_map(params_.data(), k);
    if (specs_[k].relu)
      y = y.cwiseMax(0.0f);
  }

  /// He-uniform init, W ~ U(-sqrt(6 / fan_in), +sqrt(6 / fan_in)), b = 0: keeps the ReLU
  /// activations' variance roughly constant through depth. Each layer draws from its own
  /// stream keyed by the global layer index, so re-splitting the model into different stages
  /// gives identical weights.
  void init(std::uint64_t seed) {
    for (std::size_t k = 0; k < specs_.size(); ++k) {
      splitmix64 rng(derive_seed(seed, specs_[k].global_index));
      const float bound = std::sqrt(6.0f / static_cast<float>(specs_[k].in));
      const param_block& w = blocks_[2 * k];
      for (std::size_t i = 0; i < w.size(); ++i)
        params_[w.offset + i] = rng.uniform(-bound, bound);
    }
  }

  static void check_width(Eigen::Index got, std::size_t want, const char* what) {
    if (static_cast<std::size_t>(got) != want)
      throw std::invalid_argument(std::string("stage: ") + what + " has " + std::to_string(got) +
                                  " columns, expected " + std::to_string(want));
  }

  std::vector<layer_spec> specs_;
  std::vector<param_block> blocks_;
  // Eigen's vectorised GEMM rounds differently depending on where the operands sit relative
  // to a SIMD boundary, so two replicas whose buffers happened to be allocated at different
  // offsets would drift apart bit by bit. Aligning to EIGEN_MAX_ALIGN_BYTES (the layer blocks
  // keep that alignment when the widths are multiples of 16) makes the result a function of
  // the values only.
  std::vector<float, Eigen::aligned_allocator<float>> params_;
  std::vector<float, Eigen::aligned_allocator<float>> grads_;
  matrix input_;                ///< the stage input seen by the last forward()
  std::vector<matrix> outputs_; ///< per layer: post-activation output of the last forward()
  bool compute_input_grad_;
};

/// @brief Shape of the MLP and where it is cut into stages.
struct mlp_config {
  /// Layer widths, input first, classes last. Every layer but the last has a ReLU.
  std::vector<std::size_t> widths{784, 512, 512, 256, 10};
  /// Number of Linear layers in each stage, in order; must sum to widths.size() - 1.
  /// Empty means one layer per stage, i.e. a boundary after every hidden ReLU.
  std::vector<std::size_t> layers_per_stage{};
  std::uint64_t seed = 1;
};

/// @brief The whole model as a list of stages. Stage i's output feeds stage i + 1; the
/// training loop, not this class, chains them, so it can put a channel on each boundary.
class mlp {
public:
  explicit mlp(const mlp_config& cfg) {
    if (cfg.widths.size() < 2)
      throw std::invalid_argument("mlp: need at least two widths");
    const std::size_t n_layers = cfg.widths.size() - 1;
    std::vector<std::size_t> split = cfg.layers_per_stage;
    if (split.empty())
      split.assign(n_layers, 1);
    std::size_t sum = 0;
    for (std::size_t n : split) {
      if (n == 0)
        throw std::invalid_argument("mlp: a stage with no layers");
      sum += n;
    }
    if (sum != n_layers)
      throw std::invalid_argument("mlp: layers_per_stage sums to " + std::to_string(sum) +
                                  ", the model has " + std::to_string(n_layers) + " layers");
    std::size_t next = 0;
    for (std::size_t s = 0; s < split.size(); ++s) {
      std::vector<layer_spec> specs;
      for (std::size_t j = 0; j < split[s]; ++j, ++next)
        specs.push_back({cfg.widths[next], cfg.widths[next + 1], next + 1 < n_layers, next});
      stages_.emplace_back(std::move(specs), cfg.seed, /*compute_input_grad=*/s != 0);
    }
  }

  std::size_t num_stages() const noexcept { return stages_.size(); }
  std::size_t num_boundaries() const noexcept { return stages_.size() - 1; }
  stage& operator[](std::size_t i) { return stages_[i]; }
  const stage& operator[](std::size_t i) const { return stages_[i]; }
  std::span<stage> stages() noexcept { return stages_; }
  std::span<const stage> stages() const noexcept { return stages_; }

  std::size_t num_parameters() const noexcept {
    std::size_t n = 0;
    for (const stage& s : stages_)
      n += s.parameters().size();
    return n;
  }

private:
  std::vector<stage> stages_;
};

/// @brief Mean softmax cross-entropy over the batch. Writes d loss / d logits into `grad`
/// (already divided by the batch size, so parameter gradients are batch means).
inline float softmax_cross_entropy(const matrix& logits, std::span<const std::uint8_t> labels,
                                   matrix& grad) {
  const Eigen::Index n = logits.rows();
  if (static_cast<std::size_t>(n) != labels.size())
    throw std::invalid_argument("softmax_cross_entropy: batch and label counts differ");
  // Subtracting the row max keeps exp() from overflowing; it cancels in the softmax.
  const Eigen::VectorXf row_max = logits.rowwise().maxCoeff();
  grad = (logits.colwise() - row_max).array().exp().matrix();
  const Eigen::VectorXf row_sum = grad.rowwise().sum();
  double loss = 0.0;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const Eigen::Index y = labels[static_cast<std::size_t>(i)];
    loss += std::log(row_sum(i)) + row_max(i) - logits(i, y);
    grad.row(i) *= inv_n / row_sum(i);
    grad(i, y) -= inv_n;
  }
  return static_cast<float>(loss / static_cast<double>(n));
}

/// @brief Index of the largest logit in each row (first one on ties).
inline void argmax_rows(const matrix& logits, std::span<std::uint8_t> out) {
  for (Eigen::Index i = 0; i < logits.rows(); ++i) {
    Eigen::Index best = 0;
    logits.row(i).maxCoeff(&best);
    out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(best);
  }
}

} // namespace commpress_examples
