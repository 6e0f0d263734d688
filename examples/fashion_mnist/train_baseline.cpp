// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// Uncompressed baseline: trains the 4-stage 784-512-512-256-10 MLP on Fashion-MNIST with
// SGD + momentum, passing activations and gradients across the three stage boundaries
// unchanged. The compressed examples insert their channels at the same boundary hooks, so
// their curves are directly comparable with this one for the same seed.
//
//   train_baseline [--epochs 3] [--batch 128] [--lr 0.05] [--momentum 0.9] [--seed 1]
//                  [--train-subset N] [--data-dir DIR] [--csv PATH]

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/fashion_mnist.hpp"
#include "common/mlp.hpp"
#include "common/random.hpp"
#include "common/sgd.hpp"
#include "common/training.hpp"

namespace ce = commpress_examples;

namespace {

struct options {
  std::size_t epochs = 3;
  std::size_t batch = 128;
  float lr = 0.05f;
  float momentum = 0.9f;
  std::uint64_t seed = 1;
  std::size_t train_subset = 0; ///< 0: the whole training set
  std::string data_dir;         ///< empty: $COMMPRESS_FASHION_MNIST_DIR or the Debian path
  std::string csv;
};

void print_usage(std::ostream& os) {
  os << "usage: train_baseline [--epochs N] [--batch N] [--lr X] [--momentum X] [--seed N]\n"
        "                      [--train-subset N] [--data-dir DIR] [--csv PATH]\n";
}

// Strict parsing: a typo such as "--lr 0,05" must fail rather than silently train with 0.
std::uint64_t parse_u64(std::string_view flag, const std::string& s) {
  std::size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty() || s[0] == '-')
    throw std::invalid_argument(std::string(flag) + " expects a non-negative integer, got '" + s +
                                "'");
  return v;
}

float parse_float(std::string_view flag, const std::string& s) {
  std::size_t used = 0;
  float v = 0.0f;
  try {
    v = std::stof(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty())
    throw std::invalid_argument(std::string(flag) + " expects a number, got '" + s + "'");
  return v;
}

options parse_args(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      print_usage(std::cout);
      std::exit(0);
    }
    if (i + 1 >= argc)
      throw std::invalid_argument(std::string(flag) + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--epochs")
      o.epochs = parse_u64(flag, value);
    else if (flag == "--batch")
      o.batch = parse_u64(flag, value);
    else if (flag == "--lr")
      o.lr = parse_float(flag, value);
    else if (flag == "--momentum")
      o.momentum = parse_float(flag, value);
    else if (flag == "--seed")
      o.seed = parse_u64(flag, value);
    else if (flag == "--train-subset")
      o.train_subset = parse_u64(flag, value);
    else if (flag == "--data-dir")
      o.data_dir = value;
    else if (flag == "--csv")
      o.csv = value;
    else
      throw std::invalid_argument("unknown option " + std::string(flag));
  }
  if (o.batch == 0)
    throw std::invalid_argument("--batch must be positive");
  return o;
}

int run(const options& opt) {
  const ce::fashion_mnist data = ce::load_fashion_mnist(opt.data_dir);
  const std::size_t n_train =
      opt.train_subset == 0 ? data.train.count : std::min(opt.train_subset, data.train.count);
  if (n_train < opt.batch)
    throw std::invalid_argument("training set (" + std::to_string(n_train) +
                                ") is smaller than one batch; nothing would be trained");

  ce::mlp_config cfg;
  cfg.seed = opt.seed;
  ce::mlp model(cfg);
  ce::sgd_momentum sgd(opt.lr, opt.momentum);
  const ce::optimizer_fn step = sgd.as_function();

  // The baseline's channels are identities: the boundaries are wired, with nothing on them.
  // A compressed run fills these with e.g. a compress -> decompress round trip.
  ce::boundary_hooks hooks;
  hooks.forward.resize(model.num_boundaries());
  hooks.backward.resize(model.num_boundaries());

  std::ofstream csv;
  if (!opt.csv.empty()) {
    csv.open(opt.csv);
    if (!csv)
      throw std::runtime_error("cannot write " + opt.csv);
    csv << "epoch,train_loss,test_acc,wall_s\n";
  }

  std::printf("fashion-mnist baseline: %zu stages, %zu parameters, %zu train samples, "
              "batch %zu, lr %g, momentum %g, seed %llu\n",
              model.num_stages(), model.num_parameters(), n_train, opt.batch,
              static_cast<double>(opt.lr), static_cast<double>(opt.momentum),
              static_cast<unsigned long long>(opt.seed));
  for (std::size_t epoch = 1; epoch <= opt.epochs; ++epoch) {
    // The subset is the first n_train samples; the permutation is a pure function of
    // (seed, epoch), so every run and every compressor sees the same batches.
    const std::vector<std::uint32_t> order = ce::epoch_permutation(n_train, opt.seed, epoch);
    const ce::epoch_stats st = ce::train_epoch(model, data.train, order, opt.batch, hooks, step);
    const double acc = ce::evaluate(model, data.test, hooks);
    std::printf("epoch %3zu  train_loss %.5f  test_acc %.4f  wall_s %.3f\n", epoch, st.mean_loss,
                acc, st.wall_s);
    std::fflush(stdout);
    if (csv) {
      char line[128];
      std::snprintf(line, sizeof line, "%zu,%.6f,%.6f,%.4f\n", epoch, st.mean_loss, acc, st.wall_s);
      csv << line;
      csv.flush();
    }
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  options opt;
  try {
    opt = parse_args(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_baseline: %s\n", e.what());
    print_usage(std::cerr);
    return 2;
  }
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_baseline: %s\n", e.what());
    return 1;
  }
}
