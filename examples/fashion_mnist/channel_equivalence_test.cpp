// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// CI check of the model-parallel example (ctest: examples.fashion_mnist.channels). On a
// 12800-sample subset of Fashion-MNIST, 3 epochs of 100 steps each (the last at a tenth of
// the learning rate):
// 1. training with identity channels at every boundary, both directions, gives parameters
//    bit-identical to the uncompressed trainer (the channels add nothing but bytes), and
//    identical test accuracy;
// 2. 8-bit quantization of activations and gradients (per-tensor min-max, Rudakov's
//    quantize_custom) ends within 1 accuracy point of the uncompressed trainer.
// Exits 77 (ctest SKIP_RETURN_CODE) when the Debian package dataset-fashion-mnist is missing.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "common/fashion_mnist.hpp"
#include "common/mlp.hpp"
#include "common/random.hpp"
#include "common/sgd.hpp"
#include "common/training.hpp"
#include "fashion_mnist/mp_channels.hpp"

namespace ce = commpress_examples;

namespace {

constexpr std::size_t subset = 12800;
constexpr std::size_t batch = 128;
constexpr std::size_t epochs = 3;
constexpr std::size_t eval_batch = 100;
constexpr std::uint64_t seed = 7;
// The last epoch runs at a tenth of the rate: at a constant 0.05 the end-of-epoch accuracy
// swings by about a point between runs that differ in the last bit of one gradient, which would
// make a 1-point comparison a coin toss; the step decay settles the weights first.
constexpr float lr_of_epoch[epochs] = {0.05f, 0.05f, 0.005f};

struct outcome {
  std::vector<std::vector<float>> params; ///< per stage, after training
  double test_acc = 0.0;
  std::uint64_t bytes = 0; ///< payload bytes through the training channels
};

/// Trains with the given codecs at every boundary; empty specs mean no channels at all.
outcome train(const ce::fashion_mnist& data, const char* fwd, const char* bwd) {
  ce::mlp_config cfg;
  cfg.seed = seed;
  ce::mlp model(cfg);
  ce::sgd_momentum sgd(0.05f, 0.9f);
  const ce::optimizer_fn step = sgd.as_function();
  outcome out;
  if (fwd == nullptr) {
    const ce::boundary_hooks none;
    for (std::size_t e = 1; e <= epochs; ++e) {
      sgd.set_lr(lr_of_epoch[e - 1]);
      ce::train_epoch(model, data.train, ce::epoch_permutation(subset, seed, e), batch, none, step);
    }
    out.test_acc = ce::evaluate(model, data.test, none, eval_batch);
  } else {
    ce::boundary_config bc;
    bc.fwd = ce::parse_codec(fwd);
    bc.bwd = ce::parse_codec(bwd);
    bc.train_rows = batch;
    bc.eval_rows = eval_batch;
    bc.samples = subset;
    bc.seed = seed;
    ce::model_channels channels(model, bc);
    const ce::boundary_hooks hooks = channels.training_hooks();
    for (std::size_t e = 1; e <= epochs; ++e) {
      sgd.set_lr(lr_of_epoch[e - 1]);
      ce::train_epoch(model, data.train, ce::epoch_permutation(subset, seed, e), batch, hooks,
                      step);
    }
    out.test_acc = ce::evaluate(model, data.test, channels.eval_hooks(true), eval_batch);
    out.bytes = channels.bytes();
  }
  for (const ce::stage& s : model.stages())
    out.params.emplace_back(s.parameters().begin(), s.parameters().end());
  return out;
}

bool bit_identical(const outcome& a, const outcome& b) {
  if (a.params.size() != b.params.size())
    return false;
  for (std::size_t s = 0; s < a.params.size(); ++s)
    if (a.params[s].size() != b.params[s].size() ||
        std::memcmp(a.params[s].data(), b.params[s].data(), a.params[s].size() * sizeof(float)))
      return false;
  return true;
}

} // namespace

int main() {
  const std::filesystem::path dir = ce::fashion_mnist_dir();
  if (!std::filesystem::exists(dir / "train-images-idx3-ubyte.gz") &&
      !std::filesystem::exists(dir / "train-images-idx3-ubyte")) {
    std::printf("SKIP: no Fashion-MNIST in %s (install the Debian package "
                "dataset-fashion-mnist)\n",
                dir.string().c_str());
    return 77;
  }
  try {
    const ce::fashion_mnist data = ce::load_fashion_mnist();
    const outcome base = train(data, nullptr, nullptr);
    const outcome ident = train(data, "fp32", "fp32");
    const outcome q8 = train(data, "q8", "q8");
    std::printf("uncompressed %.4f, identity channels %.4f, 8-bit both directions %.4f\n",
                base.test_acc, ident.test_acc, q8.test_acc);

    int failures = 0;
    const auto check = [&](bool ok, const char* what) {
      std::printf("%s: %s\n", ok ? "PASS" : "FAIL", what);
      failures += ok ? 0 : 1;
    };
    check(bit_identical(base, ident),
          "identity channels give parameters bit-identical to the uncompressed trainer");
    check(ident.test_acc == base.test_acc,
          "identity channels give the uncompressed trainer's test accuracy");
    // Every step sends 3 boundaries x 2 directions of a 128-row batch as fp32 plus a header,
    // so the channels must have carried at least the raw tensors' bytes.
    const std::uint64_t raw_per_step = 2 * 4 * batch * (512 + 512 + 256);
    check(ident.bytes >= raw_per_step * (subset / batch) * epochs,
          "identity channels carry at least the fp32 bytes of every boundary tensor");
    check(q8.bytes * 3 < ident.bytes, "8-bit channels send under a third of the fp32 bytes");
    check(std::fabs(q8.test_acc - base.test_acc) <= 0.01,
          "8-bit quantization of both directions stays within 1 accuracy point");
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: %s\n", e.what());
    return 1;
  }
}
