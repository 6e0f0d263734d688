// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// Data-parallel compressed gradient exchange on Fashion-MNIST (LoCo, Xie et al.; docs/methods.md
// section 7): N workers (threads of an in-process loopback communicator) each hold a replica of the
// 784-512-512-256-10 MLP, compute the gradient of their share of every global batch, and exchange
// it through commpress::data_parallel (compress, all-gather the payloads, average them in rank
// order, Adam/AdamW step), one exchange per model stage. The same world can run 1-bit Adam
// (commpress::onebit_adam, sign compression of the momentum with error feedback).
//
//   data_parallel [--codec fp32|q<bits>[:block<N>][:sym|:asym][:sr][:rot<k>]]
//                 [--feedback none|ef|loco[:int8|:bf16|:f32]] [--beta 0.8] [--reset-every 1024]
//                 [--optimizer adam|adamw|onebit_adam] [--freeze-fraction 0.2]
//                 [--eps X] [--variance-floor 0] [--workers 4] [--batch-per-worker 32] [--lr 0.001]
//                 [--weight-decay X]
//                 [--epochs 3] [--seed 1] [--train-subset N] [--data-dir DIR]
//                 [--csv PATH] [--steps-csv PATH] [--log-every 20]
//
// The per-epoch CSV has epoch,train_loss,test_acc,bytes_per_step,wall_s; bytes_per_step is the
// payload one worker contributes to the all-gather per step (all stages). --steps-csv writes the
// loss curve: step,train_loss averaged over the workers and the last --log-every steps.

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/sign.hpp"
#include "commpress/comm/loopback.hpp"
#include "commpress/compress/identity.hpp"
#include "commpress/compress/quantize.hpp"
#include "commpress/compress/sign.hpp"
#include "commpress/optim/adam.hpp"
#include "commpress/optim/data_parallel.hpp"
#include "commpress/optim/onebit_adam.hpp"
#include "commpress/pipeline/pipeline.hpp"

#include "common/cli.hpp"
#include "common/fashion_mnist.hpp"
#include "common/mlp.hpp"
#include "common/random.hpp"
#include "common/training.hpp"
#include "fashion_mnist/mp_channels.hpp"

namespace ce = commpress_examples;
namespace cp = commpress;

namespace {

struct options {
  std::string codec = "fp32";
  std::string feedback = "none";
  float beta = 0.8f;
  std::uint64_t reset_every = 1024;
  std::string optimizer = "adam";
  float freeze_fraction = 0.2f;
  float eps = -1.0f;           ///< < 0: the optimizer's default
  float variance_floor = 0.0f; ///< 1-bit Adam's floor on the frozen variance
  int workers = 4;
  std::size_t batch_per_worker = 32;
  float lr = 1e-3f;
  float weight_decay = -1.0f; ///< < 0: the optimizer's default
  std::size_t epochs = 3;
  std::uint64_t seed = 1;
  std::size_t train_subset = 0;
  std::string data_dir;
  std::string csv;
  std::string steps_csv;
  std::size_t log_every = 20;
};

void print_usage(std::ostream& os) {
  os << "usage: data_parallel [--codec fp32|q<bits>[:block<N>][:sym|:asym][:sr][:rot<k>]]\n"
        "                     [--feedback none|ef|loco[:int8|:bf16|:f32]] [--beta X]\n"
        "                     [--reset-every N] [--optimizer adam|adamw|onebit_adam]\n"
        "                     [--freeze-fraction X] [--eps X] [--variance-floor X]\n"
        "                     [--workers N] [--batch-per-worker N]\n"
        "                     [--lr X] [--weight-decay X] [--epochs N] [--seed N]\n"
        "                     [--train-subset N] [--data-dir DIR] [--csv PATH]\n"
        "                     [--steps-csv PATH] [--log-every N]\n";
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
    if (flag == "--codec")
      o.codec = value;
    else if (flag == "--feedback")
      o.feedback = value;
    else if (flag == "--beta")
      o.beta = ce::parse_float(flag, value);
    else if (flag == "--reset-every")
      o.reset_every = ce::parse_u64(flag, value);
    else if (flag == "--optimizer")
      o.optimizer = value;
    else if (flag == "--freeze-fraction")
      o.freeze_fraction = ce::parse_float(flag, value);
    else if (flag == "--eps")
      o.eps = ce::parse_float(flag, value);
    else if (flag == "--variance-floor")
      o.variance_floor = ce::parse_float(flag, value);
    else if (flag == "--workers")
      o.workers = static_cast<int>(ce::parse_u64(flag, value));
    else if (flag == "--batch-per-worker")
      o.batch_per_worker = ce::parse_u64(flag, value);
    else if (flag == "--lr")
      o.lr = ce::parse_float(flag, value);
    else if (flag == "--weight-decay")
      o.weight_decay = ce::parse_float(flag, value);
    else if (flag == "--epochs")
      o.epochs = ce::parse_u64(flag, value);
    else if (flag == "--seed")
      o.seed = ce::parse_u64(flag, value);
    else if (flag == "--train-subset")
      o.train_subset = ce::parse_u64(flag, value);
    else if (flag == "--data-dir")
      o.data_dir = value;
    else if (flag == "--csv")
      o.csv = value;
    else if (flag == "--steps-csv")
      o.steps_csv = value;
    else if (flag == "--log-every")
      o.log_every = ce::parse_u64(flag, value);
    else
      throw std::invalid_argument("unknown option " + std::string(flag));
  }
  if (o.workers < 1 || o.batch_per_worker == 0 || o.log_every == 0)
    throw std::invalid_argument("--workers, --batch-per-worker and --log-every must be positive");
  if (o.optimizer != "adam" && o.optimizer != "adamw" && o.optimizer != "onebit_adam")
    throw std::invalid_argument("--optimizer must be adam, adamw or onebit_adam");
  return o;
}

/// What every worker needs, shared read-only (the output files are rank 0's).
struct run_setup {
  const options* opt = nullptr;
  const ce::fashion_mnist* data = nullptr;
  std::size_t n_train = 0;
  std::size_t steps_per_epoch = 0;
  std::ofstream* csv = nullptr;
  std::ofstream* steps_csv = nullptr;
};

/// The per-stage exchange of one worker: `Exchange` is data_parallel or onebit_adam.
template <class Exchange> struct stage_exchange {
  Exchange ex;
  typename Exchange::feedback_state fb;
  cp::adam_state os;
};

/// Runs one worker: every epoch, every global batch, its share of the batch, then one exchange
/// per stage. `make` builds the exchange of a stage (params count n) for this worker's comm.
template <class Exchange, class Make, class Step>
void run_worker(const run_setup& su, cp::loopback_communicator& comm, Make&& make, Step&& step) {
  const options& opt = *su.opt;
  ce::mlp_config cfg;
  cfg.seed = opt.seed;
  ce::mlp model(cfg); // same seed on every rank: identical replicas
  std::vector<stage_exchange<Exchange>> stages;
  stages.reserve(model.num_stages());
  for (std::size_t s = 0; s < model.num_stages(); ++s)
    stages.push_back(make(comm, model[s].parameters().size()));

  const std::size_t b = opt.batch_per_worker;
  const std::size_t global = b * static_cast<std::size_t>(comm.size());
  const auto rank = static_cast<std::size_t>(comm.rank());
  std::uint64_t global_step = 0;
  std::uint64_t bytes = 0;
  double window_loss = 0.0;
  std::size_t window = 0;
  ce::matrix x;
  std::vector<std::uint8_t> y;
  const ce::boundary_hooks no_hooks;

  const ce::optimizer_fn exchange = [&](std::size_t s, std::span<float> params,
                                        std::span<const float> grads) {
    const cp::context ctx{
        .seed = opt.seed, .step = global_step, .tensor_id = static_cast<std::uint32_t>(s)};
    bytes += step(stages[s], ctx, params, grads).payload_bytes;
  };

  for (std::size_t epoch = 1; epoch <= opt.epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<std::uint32_t> order = ce::epoch_permutation(su.n_train, opt.seed, epoch);
    double loss_sum = 0.0;
    bytes = 0;
    for (std::size_t k = 0; k < su.steps_per_epoch; ++k, ++global_step) {
      const std::span<const std::uint32_t> ids =
          std::span<const std::uint32_t>(order).subspan(k * global + rank * b, b);
      ce::detail::gather_batch(su.data->train, ids, x, y);
      float loss = ce::train_step(model, x, y, ids, no_hooks, exchange);
      comm.all_reduce_sum(std::span<float>(&loss, 1)); // for the log only
      loss /= static_cast<float>(comm.size());
      loss_sum += loss;
      window_loss += loss;
      if (++window == opt.log_every) {
        if (rank == 0 && su.steps_csv != nullptr && *su.steps_csv)
          *su.steps_csv << global_step + 1 << ',' << window_loss / double(window) << '\n';
        window_loss = 0.0;
        window = 0;
      }
    }
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rank == 0) {
      const double acc = ce::evaluate(model, su.data->test, no_hooks);
      const double mean_loss = loss_sum / double(su.steps_per_epoch);
      const double per_step = double(bytes) / double(su.steps_per_epoch);
      std::printf("epoch %3zu  train_loss %.5f  test_acc %.4f  bytes/step/worker %.0f  "
                  "wall_s %.2f\n",
                  epoch, mean_loss, acc, per_step, wall);
      std::fflush(stdout);
      if (su.csv != nullptr && *su.csv) {
        char line[192];
        std::snprintf(line, sizeof line, "%zu,%.6f,%.6f,%.1f,%.4f\n", epoch, mean_loss, acc,
                      per_step, wall);
        *su.csv << line;
        su.csv->flush();
      }
      if (su.steps_csv != nullptr && *su.steps_csv)
        su.steps_csv->flush();
    }
  }
}

template <class Pipe> void run_adam(const run_setup& su, const Pipe& pipe) {
  const options& opt = *su.opt;
  cp::loopback_world world(opt.workers);
  const auto run = [&]<class Opt>(const Opt& o) {
    using ex_t = cp::data_parallel<cp::loopback_communicator, Pipe, Opt>;
    world.run([&](cp::loopback_communicator& comm) {
      run_worker<ex_t>(
          su, comm,
          [&](cp::loopback_communicator& c, std::size_t n) {
            ex_t ex(c, pipe, o, n);
            auto fb = ex.make_feedback_state();
            auto os = ex.make_optimizer_state();
            return stage_exchange<ex_t>{std::move(ex), std::move(fb), std::move(os)};
          },
          [](stage_exchange<ex_t>& st, const cp::context& ctx, std::span<float> p,
             std::span<const float> g) {
            return st.ex.step(cp::cpu::seq, ctx, st.fb, st.os, p, g);
          });
    });
  };
  if (opt.optimizer == "adamw") {
    cp::adamw o{.lr = opt.lr};
    if (opt.weight_decay >= 0.0f)
      o.weight_decay = opt.weight_decay;
    if (opt.eps >= 0.0f)
      o.eps = opt.eps;
    run(o);
  } else {
    cp::adam o{.lr = opt.lr};
    if (opt.weight_decay >= 0.0f)
      o.weight_decay = opt.weight_decay;
    if (opt.eps >= 0.0f)
      o.eps = opt.eps;
    run(o);
  }
}

template <class Pipe> void run_onebit(const run_setup& su, const Pipe& pipe) {
  const options& opt = *su.opt;
  cp::onebit_adam_config cfg{.lr = opt.lr, .variance_floor = opt.variance_floor};
  if (opt.weight_decay >= 0.0f)
    cfg.weight_decay = opt.weight_decay;
  if (opt.eps >= 0.0f)
    cfg.eps = opt.eps;
  // DeepSpeed's advice: 15-25% of the run as uncompressed warm-up.
  cfg.freeze_step = static_cast<std::uint64_t>(
      std::llround(double(opt.freeze_fraction) * double(su.steps_per_epoch * opt.epochs)));
  std::printf("1-bit Adam: %llu warm-up steps of %zu\n",
              static_cast<unsigned long long>(cfg.freeze_step), su.steps_per_epoch * opt.epochs);
  using ex_t = cp::onebit_adam<cp::loopback_communicator, Pipe>;
  cp::loopback_world world(opt.workers);
  world.run([&](cp::loopback_communicator& comm) {
    run_worker<ex_t>(
        su, comm,
        [&](cp::loopback_communicator& c, std::size_t n) {
          ex_t ex(c, pipe, cfg, n);
          auto fb = ex.make_feedback_state();
          auto os = ex.make_state();
          return stage_exchange<ex_t>{std::move(ex), std::move(fb), std::move(os)};
        },
        [](stage_exchange<ex_t>& st, const cp::context& ctx, std::span<float> p,
           std::span<const float> g) { return st.ex.step(cp::cpu::seq, ctx, st.os, st.fb, p, g); });
  });
}

/// Instantiates the exchange for the configured feedback, then for the codec.
template <class Codec> void run_codec(const run_setup& su, const Codec& codec) {
  const options& opt = *su.opt;
  const std::string& f = opt.feedback;
  if (f == "none")
    run_adam(su, cp::pipeline<cp::none, Codec>{cp::none{}, codec});
  else if (f == "ef")
    run_adam(su, cp::pipeline<cp::ef, Codec>{cp::ef{}, codec});
  else if (f == "loco" || f == "loco:int8")
    run_adam(su, cp::pipeline<cp::loco<cp::store_int8>, Codec>{
                     {.beta = opt.beta, .reset_every = opt.reset_every}, codec});
  else if (f == "loco:bf16")
    run_adam(su, cp::pipeline<cp::loco<cp::store_bf16>, Codec>{
                     {.beta = opt.beta, .reset_every = opt.reset_every}, codec});
  else if (f == "loco:f32")
    run_adam(su, cp::pipeline<cp::loco<cp::store_f32>, Codec>{
                     {.beta = opt.beta, .reset_every = opt.reset_every}, codec});
  else
    throw std::invalid_argument("--feedback must be none, ef or loco[:int8|:bf16|:f32]");
}

int run(const options& opt) {
  const ce::fashion_mnist data = ce::load_fashion_mnist(opt.data_dir);
  run_setup su;
  su.opt = &opt;
  su.data = &data;
  su.n_train =
      opt.train_subset == 0 ? data.train.count : std::min(opt.train_subset, data.train.count);
  su.steps_per_epoch = su.n_train / (opt.batch_per_worker * static_cast<std::size_t>(opt.workers));
  if (su.steps_per_epoch == 0)
    throw std::invalid_argument("the training set is smaller than one global batch");

  std::ofstream csv;
  if (!opt.csv.empty()) {
    csv.open(opt.csv);
    if (!csv)
      throw std::runtime_error("cannot write " + opt.csv);
    csv << "epoch,train_loss,test_acc,bytes_per_step,wall_s\n";
    su.csv = &csv;
  }
  std::ofstream steps_csv;
  if (!opt.steps_csv.empty()) {
    steps_csv.open(opt.steps_csv);
    if (!steps_csv)
      throw std::runtime_error("cannot write " + opt.steps_csv);
    steps_csv << "step,train_loss\n";
    su.steps_csv = &steps_csv;
  }
  std::printf("data_parallel: %d workers x batch %zu, %s, codec %s, feedback %s (beta %g), "
              "lr %g, %zu train samples, %zu steps/epoch, seed %llu\n",
              opt.workers, opt.batch_per_worker, opt.optimizer.c_str(), opt.codec.c_str(),
              opt.feedback.c_str(), static_cast<double>(opt.beta), static_cast<double>(opt.lr),
              su.n_train, su.steps_per_epoch, static_cast<unsigned long long>(opt.seed));
  std::fflush(stdout);

  if (opt.optimizer == "onebit_adam") {
    // DeepSpeed's compressor: sign with an RMS scale, error-compensated on the worker.
    if (opt.codec != "sign" || opt.feedback != "ef")
      throw std::invalid_argument("onebit_adam runs with --codec sign --feedback ef");
    run_onebit(su, cp::pipeline<cp::ef, cp::sign>{
                       cp::ef{}, cp::sign{.granularity = cp::sign_granularity::tensor,
                                          .block = 0,
                                          .scale = cp::sign_scale::rms}});
    return 0;
  }
  const ce::codec_spec spec = ce::parse_codec(opt.codec);
  switch (spec.k) {
  case ce::codec_spec::kind::identity:
    run_codec(su, cp::identity{});
    break;
  case ce::codec_spec::kind::quantize:
    if (spec.column_scales)
      throw std::invalid_argument("--codec: column scales need a row width; use block<N>");
    if (spec.rotate_log2 != 0)
      run_codec(su, cp::rotated<cp::quantize>{spec.q, static_cast<std::uint8_t>(spec.rotate_log2)});
    else
      run_codec(su, spec.q);
    break;
  case ce::codec_spec::kind::top_k:
    throw std::invalid_argument("--codec: the LoCo comparison takes fp32 or q<bits>");
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  options opt;
  try {
    opt = parse_args(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "data_parallel: %s\n", e.what());
    print_usage(std::cerr);
    return 2;
  }
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "data_parallel: %s\n", e.what());
    return 1;
  }
}
