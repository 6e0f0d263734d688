// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// Model-parallel compression on Fashion-MNIST (Rudakov et al., docs/methods.md section 4): the
// 4-stage 784-512-512-256-10 MLP trains with SGD + momentum while every one of its 3 stage
// boundaries sends the activations forward and the gradients backward through commpress
// channels (sender_end -> payload bytes -> receiver_end), each direction with its own codec and
// feedback policy. Every epoch the test set is evaluated twice: with the forward codec applied
// at inference, and without it.
//
//   model_parallel [--fwd SPEC] [--bwd SPEC] [--feedback none|ef|ef21|aq_sgd[:STORAGE]]
//                  [--bwd-feedback F] [--epochs 3] [--batch 128] [--eval-batch 100]
//                  [--lr 0.05] [--momentum 0.9] [--seed 1] [--train-subset N]
//                  [--data-dir DIR] [--csv PATH]
//
// SPEC: fp32 | q<bits>[:tensor|:block<N>|:column][:asym|:sym][:sr] | topk<percent>[:q<bits>]
// (see mp_channels.hpp). --feedback sets both directions, except aq_sgd, which is a forward
// (activation) method: its gradients go without feedback unless --bwd-feedback says otherwise.
// AQ-SGD warms up for one epoch (full activations, filling the per-sample buffers).

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/cli.hpp"
#include "common/fashion_mnist.hpp"
#include "common/mlp.hpp"
#include "common/random.hpp"
#include "common/sgd.hpp"
#include "common/training.hpp"
#include "fashion_mnist/mp_channels.hpp"

namespace ce = commpress_examples;

namespace {

struct options {
  std::string fwd = "fp32";
  std::string bwd = "fp32";
  std::string feedback = "none";
  std::optional<std::string> bwd_feedback;
  std::size_t epochs = 3;
  std::size_t batch = 128;
  std::size_t eval_batch = 100;
  float lr = 0.05f;
  float momentum = 0.9f;
  std::uint64_t seed = 1;
  std::size_t train_subset = 0; ///< 0: the whole training set
  std::string data_dir;
  std::string csv;
};

void print_usage(std::ostream& os) {
  os << "usage: model_parallel [--fwd SPEC] [--bwd SPEC] [--feedback none|ef|ef21|aq_sgd[:S]]\n"
        "                      [--bwd-feedback F] [--epochs N] [--batch N] [--eval-batch N]\n"
        "                      [--lr X] [--momentum X] [--seed N] [--train-subset N]\n"
        "                      [--data-dir DIR] [--csv PATH]\n"
        "  SPEC: fp32 | q<bits>[:tensor|:block<N>|:column][:asym|:sym][:sr] | "
        "topk<percent>[:q<bits>]\n"
        "  S (AQ-SGD buffer storage): f32 | bf16 | int8 | int4\n";
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
    if (flag == "--fwd")
      o.fwd = value;
    else if (flag == "--bwd")
      o.bwd = value;
    else if (flag == "--feedback")
      o.feedback = value;
    else if (flag == "--bwd-feedback")
      o.bwd_feedback = value;
    else if (flag == "--epochs")
      o.epochs = ce::parse_u64(flag, value);
    else if (flag == "--batch")
      o.batch = ce::parse_u64(flag, value);
    else if (flag == "--eval-batch")
      o.eval_batch = ce::parse_u64(flag, value);
    else if (flag == "--lr")
      o.lr = ce::parse_float(flag, value);
    else if (flag == "--momentum")
      o.momentum = ce::parse_float(flag, value);
    else if (flag == "--seed")
      o.seed = ce::parse_u64(flag, value);
    else if (flag == "--train-subset")
      o.train_subset = ce::parse_u64(flag, value);
    else if (flag == "--data-dir")
      o.data_dir = value;
    else if (flag == "--csv")
      o.csv = value;
    else
      throw std::invalid_argument("unknown option " + std::string(flag));
  }
  if (o.batch == 0 || o.eval_batch == 0)
    throw std::invalid_argument("--batch and --eval-batch must be positive");
  return o;
}

int run(const options& opt) {
  ce::boundary_config bc;
  bc.fwd = ce::parse_codec(opt.fwd);
  bc.bwd = ce::parse_codec(opt.bwd);
  bc.fwd_feedback = ce::parse_feedback(opt.feedback);
  bc.bwd_feedback = opt.bwd_feedback ? ce::parse_feedback(*opt.bwd_feedback)
                    : bc.fwd_feedback.k == ce::feedback_spec::kind::aq_sgd ? ce::feedback_spec{}
                                                                           : bc.fwd_feedback;

  const ce::fashion_mnist data = ce::load_fashion_mnist(opt.data_dir);
  const std::size_t n_train =
      opt.train_subset == 0 ? data.train.count : std::min(opt.train_subset, data.train.count);
  if (n_train < opt.batch)
    throw std::invalid_argument("training set (" + std::to_string(n_train) +
                                ") is smaller than one batch; nothing would be trained");
  if (data.test.count % opt.eval_batch != 0)
    throw std::invalid_argument("--eval-batch must divide the test set size (" +
                                std::to_string(data.test.count) + ")");
  const std::size_t steps_per_epoch = n_train / opt.batch;

  bc.train_rows = opt.batch;
  bc.eval_rows = opt.eval_batch;
  bc.samples = n_train;
  bc.warmup_steps = steps_per_epoch; // AQ-SGD: one warm-up epoch
  bc.seed = opt.seed;

  ce::mlp_config cfg;
  cfg.seed = opt.seed;
  ce::mlp model(cfg);
  ce::sgd_momentum sgd(opt.lr, opt.momentum);
  const ce::optimizer_fn step = sgd.as_function();
  ce::model_channels channels(model, bc);
  const ce::boundary_hooks train_hooks = channels.training_hooks();

  std::ofstream csv;
  if (!opt.csv.empty()) {
    csv.open(opt.csv);
    if (!csv)
      throw std::runtime_error("cannot write " + opt.csv);
    csv << "epoch,train_loss,test_acc_compressed,test_acc_uncompressed,bytes_per_step,wall_s,"
           "feedback_state_bytes\n";
  }

  std::uint64_t raw_bytes = 0; // what fp32 activations + gradients would take per step
  for (std::size_t b = 0; b < model.num_boundaries(); ++b)
    raw_bytes += 2 * 4 * opt.batch * model[b].out_width();
  std::printf("model_parallel: fwd %s (%s), bwd %s (%s), %zu train samples, batch %zu, lr %g, "
              "momentum %g, seed %llu\n",
              bc.fwd.text.c_str(), bc.fwd_feedback.text.c_str(), bc.bwd.text.c_str(),
              bc.bwd_feedback.text.c_str(), n_train, opt.batch, static_cast<double>(opt.lr),
              static_cast<double>(opt.momentum), static_cast<unsigned long long>(opt.seed));
  if (channels.state_bytes() > 0)
    std::printf("feedback buffers: %.1f MiB (both ends of every boundary)\n",
                static_cast<double>(channels.state_bytes()) / (1024.0 * 1024.0));
  std::fflush(stdout);

  for (std::size_t epoch = 1; epoch <= opt.epochs; ++epoch) {
    const std::vector<std::uint32_t> order = ce::epoch_permutation(n_train, opt.seed, epoch);
    channels.reset_bytes();
    const ce::epoch_stats st =
        ce::train_epoch(model, data.train, order, opt.batch, train_hooks, step);
    const double bytes_per_step =
        st.batches > 0 ? static_cast<double>(channels.bytes()) / static_cast<double>(st.batches)
                       : 0.0;
    const double acc_c = ce::evaluate(model, data.test, channels.eval_hooks(true), opt.eval_batch);
    const double acc_u = ce::evaluate(model, data.test, channels.eval_hooks(false), opt.eval_batch);
    std::printf("epoch %3zu  train_loss %.5f  test_acc compressed %.4f uncompressed %.4f  "
                "bytes/step %.0f (%.1fx less than fp32)  wall_s %.2f\n",
                epoch, st.mean_loss, acc_c, acc_u, bytes_per_step,
                static_cast<double>(raw_bytes) / bytes_per_step, st.wall_s);
    std::fflush(stdout);
    if (csv) {
      char line[256];
      std::snprintf(line, sizeof line, "%zu,%.6f,%.6f,%.6f,%.1f,%.4f,%llu\n", epoch, st.mean_loss,
                    acc_c, acc_u, bytes_per_step, st.wall_s,
                    static_cast<unsigned long long>(channels.state_bytes()));
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
    std::fprintf(stderr, "model_parallel: %s\n", e.what());
    print_usage(std::cerr);
    return 2;
  }
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "model_parallel: %s\n", e.what());
    return 1;
  }
}
