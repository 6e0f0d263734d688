// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// The pipeline training loop shared by the examples. It runs the stages of an `mlp` in
/// sequence on one process, but makes every stage-to-stage hand-off explicit: a boundary
/// callback sees the activations going forward and the gradients coming back, which is
/// exactly where a compressing communication channel sits in real pipeline parallelism.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <vector>

#include "fashion_mnist.hpp"
#include "mlp.hpp"
#include "sgd.hpp"

namespace commpress_examples {

/// @brief A stage-boundary hook. `data` is the batch (one row per sample) crossing the
/// boundary; the hook may rewrite it in place (e.g. compress + decompress), but not resize
/// it. `sample_ids` are the dataset indices of the rows, in row order (train-set indices when
/// `training`, test-set indices otherwise), so per-sample state such as error feedback can
/// be keyed on them.
using boundary_fn = std::function<void(Eigen::Ref<matrix> data,
                                       std::span<const std::uint32_t> sample_ids, bool training)>;

/// @brief Hooks per boundary; boundary b sits between stage b and stage b + 1. A vector may be
/// shorter than the number of boundaries or hold empty functions: those boundaries pass the
/// data through untouched.
struct boundary_hooks {
  std::vector<boundary_fn> forward;  ///< [b]: stage b's output, before stage b + 1 reads it
  std::vector<boundary_fn> backward; ///< [b]: d loss / d (stage b + 1 input), before stage b
};

namespace detail {
inline void run_hook(const std::vector<boundary_fn>& hooks, std::size_t b, matrix& data,
                     std::span<const std::uint32_t> ids, bool training) {
  if (b < hooks.size() && hooks[b])
    hooks[b](data, ids, training);
}

/// Copies the rows `ids` of `set` into `x` and their labels into `y`.
inline void gather_batch(const image_set& set, std::span<const std::uint32_t> ids, matrix& x,
                         std::vector<std::uint8_t>& y) {
  x.resize(static_cast<Eigen::Index>(ids.size()), static_cast<Eigen::Index>(image_set::pixels));
  y.resize(ids.size());
  for (std::size_t r = 0; r < ids.size(); ++r) {
    std::span<const float> img = set.image(ids[r]);
    x.row(static_cast<Eigen::Index>(r)) =
        Eigen::Map<const row_vector>(img.data(), static_cast<Eigen::Index>(img.size()));
    y[r] = set.labels[ids[r]];
  }
}
} // namespace detail

struct epoch_stats {
  double mean_loss = 0.0; ///< mean over the epoch's batches of the batch-mean loss
  std::size_t batches = 0;
  double wall_s = 0.0; ///< training time only (no evaluation)
};

/// @brief One training step on one batch: forward through every stage with the forward
/// hooks between them, loss, backward with the backward hooks, then `step` once per stage.
/// Returns the batch-mean loss.
inline float train_step(mlp& model, const matrix& batch, std::span<const std::uint8_t> labels,
                        std::span<const std::uint32_t> ids, const boundary_hooks& hooks,
                        const optimizer_fn& step) {
  const std::size_t n_stages = model.num_stages();
  matrix act = model[0].forward(batch);
  for (std::size_t s = 1; s < n_stages; ++s) {
    detail::run_hook(hooks.forward, s - 1, act, ids, /*training=*/true);
    act = model[s].forward(act);
  }
  matrix grad;
  const float loss = softmax_cross_entropy(act, labels, grad);
  for (std::size_t s = n_stages; s-- > 0;) {
    grad = model[s].backward(grad);
    if (s > 0)
      detail::run_hook(hooks.backward, s - 1, grad, ids, /*training=*/true);
  }
  // Update only after the whole backward pass, as a synchronous pipeline flush would.
  for (std::size_t s = 0; s < n_stages; ++s)
    step(s, model[s].parameters(), model[s].gradients());
  return loss;
}

/// @brief One epoch over `order` (a permutation of the training indices to use), in batches
/// of `batch_size`; a last partial batch is dropped so every step sees the same batch shape.
inline epoch_stats train_epoch(mlp& model, const image_set& train,
                               std::span<const std::uint32_t> order, std::size_t batch_size,
                               const boundary_hooks& hooks, const optimizer_fn& step) {
  if (batch_size == 0)
    throw std::invalid_argument("train_epoch: batch size is zero");
  const auto t0 = std::chrono::steady_clock::now();
  epoch_stats stats;
  matrix x;
  std::vector<std::uint8_t> y;
  double loss_sum = 0.0;
  for (std::size_t first = 0; first + batch_size <= order.size(); first += batch_size) {
    const std::span<const std::uint32_t> ids = order.subspan(first, batch_size);
    detail::gather_batch(train, ids, x, y);
    loss_sum += train_step(model, x, y, ids, hooks, step);
    ++stats.batches;
  }
  stats.mean_loss = stats.batches > 0 ? loss_sum / static_cast<double>(stats.batches) : 0.0;
  stats.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

/// @brief Top-1 accuracy on the whole of `set`, running the forward hooks with
/// training = false (so a channel can be evaluated at inference too).
inline double evaluate(const mlp& model, const image_set& set, const boundary_hooks& hooks,
                       std::size_t batch_size = 1000) {
  std::vector<std::uint32_t> ids(set.count);
  for (std::size_t i = 0; i < set.count; ++i)
    ids[i] = static_cast<std::uint32_t>(i);
  matrix x;
  std::vector<std::uint8_t> y;
  std::vector<std::uint8_t> pred;
  std::size_t correct = 0;
  for (std::size_t first = 0; first < set.count; first += batch_size) {
    const std::span<const std::uint32_t> batch_ids =
        std::span<const std::uint32_t>(ids).subspan(first, std::min(batch_size, set.count - first));
    detail::gather_batch(set, batch_ids, x, y);
    matrix act = model[0].infer(x);
    for (std::size_t s = 1; s < model.num_stages(); ++s) {
      detail::run_hook(hooks.forward, s - 1, act, batch_ids, /*training=*/false);
      act = model[s].infer(act);
    }
    pred.resize(batch_ids.size());
    argmax_rows(act, pred);
    for (std::size_t i = 0; i < pred.size(); ++i)
      correct += pred[i] == y[i] ? 1 : 0;
  }
  return set.count > 0 ? static_cast<double>(correct) / static_cast<double>(set.count) : 0.0;
}

} // namespace commpress_examples
