// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Plain SGD with momentum over flat parameter views. A stand-in until the library ships
/// its own optimizers: the training loop only sees an `optimizer_fn`, so swapping this for a
/// library optimizer is a one-line change in the example.

#include <cstddef>
#include <functional>
#include <span>
#include <stdexcept>
#include <vector>

namespace commpress_examples {

/// @brief Called once per stage per step with that stage's flat parameters and gradients.
using optimizer_fn = std::function<void(std::size_t stage_index, std::span<float> params,
                                        std::span<const float> grads)>;

/// @brief v = momentum * v + g; p -= lr * v (the PyTorch convention: lr scales the whole
/// velocity, so changing lr mid-run takes effect immediately).
inline void sgd_momentum_step(std::span<float> params, std::span<const float> grads,
                              std::span<float> velocity, float lr, float momentum) {
  if (grads.size() != params.size() || velocity.size() != params.size())
    throw std::invalid_argument("sgd_momentum_step: params, grads and velocity sizes differ");
  float* p = params.data();
  const float* g = grads.data();
  float* v = velocity.data();
  for (std::size_t i = 0; i < params.size(); ++i) {
    v[i] = momentum * v[i] + g[i];
    p[i] -= lr * v[i];
  }
}

/// @brief Owns one velocity buffer per stage, created zeroed on first use.
class sgd_momentum {
public:
  sgd_momentum(float lr, float momentum) : lr_(lr), momentum_(momentum) {}

  void step(std::size_t stage_index, std::span<float> params, std::span<const float> grads) {
    if (stage_index >= velocity_.size())
      velocity_.resize(stage_index + 1);
    std::vector<float>& v = velocity_[stage_index];
    if (v.empty())
      v.assign(params.size(), 0.0f);
    sgd_momentum_step(params, grads, v, lr_, momentum_);
  }

  /// Adapter for the training loop. The optimizer must outlive the returned function.
  optimizer_fn as_function() {
    return [this](std::size_t s, std::span<float> p, std::span<const float> g) { step(s, p, g); };
  }

  float lr() const noexcept { return lr_; }
  void set_lr(float lr) noexcept { lr_ = lr; }

private:
  float lr_;
  float momentum_;
  std::vector<std::vector<float>> velocity_;
};

} // namespace commpress_examples
