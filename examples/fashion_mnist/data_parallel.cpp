// SPDX-FileCopyrightText: 2026 commpress authors
// SPDX-License-Identifier: Apache-2.0

// Data-parallel compressed gradient exchange on Fashion-MNIST (LoCo, Xie et al.; docs/methods.md
// section 7): N workers (threads of an in-process loopback communicator) each hold a replica of the
// 784-512-512-256-10 MLP, compute the gradient of their share of every global batch, and exchange
// it through commpress::data_parallel (compress, all-gather the payloads, average them in rank
// order, Adam/AdamW/SGD step), one exchange per model stage. The same world can run 1-bit Adam
// (commpress::onebit_adam, sign compression of the momentum with error feedback), Deep Gradient
// Compression and PowerSGD:
//
// - `--optimizer onebit_adam --codec sign --feedback ef` is 1-bit Adam (Tang et al. 2021). Its
//   compression stage all-gathers the compressed momenta (`--onebit-exchange gather`, the
//   default, one error-feedback point) or runs DeepSpeed's compressed_allreduce
//   (`--onebit-exchange sharded`: worker errors, all-to-all of the chunks, server errors on the
//   averaged shards, all-gather), whose bytes per worker do not grow with --workers.
// - `--feedback dgc --codec topk<p> --optimizer sgd` is DGC (Lin et al. 2018; docs/methods.md
//   section 17): the momentum moves from the optimizer into the feedback (momentum correction),
//   so the averaged payloads are applied by SGD without momentum; --momentum is DGC's. One top-k
//   selection per stage (its weights and bias together). The top-k density follows
//   commpress::dgc_warmup, from --dgc-initial in the first epoch down to p% by a factor of 4 per
//   epoch (the paper's warm-up training); --dgc-initial equal to p/100 turns the warm-up off.
// - `--codec powersgd<r>` is PowerSGD (Vogels et al. 2019; docs/methods.md section 18) of rank r
//   on every weight matrix, with its own error feedback and warm start; biases are averaged
//   uncompressed, as PyTorch's PowerSGD hook does with 1-D tensors. The workers are ranks of the
//   loopback communicator, so each step is all_reduce_powersgd: two all-reduces, of P and of Q.
//   A weight is stored fan_in x fan_out, row-major, so that is its matrix here: the transpose of
//   PyTorch's out x in view. P is then fan_in x r and Q fan_out x r; a step sends the same
//   (rows + columns) r floats and is the same one step of subspace iteration, from the other
//   side of the matrix.
//
//   data_parallel [--codec fp32|q<bits>[:block<N>][:sym|:asym][:sr][:rot<k>]|topk<p>[:q<b>]|
//                          powersgd<r>]
//                 [--feedback none|ef|loco[:int8|:bf16|:f32]|dgc] [--beta 0.8] [--reset-every 1024]
//                 [--optimizer adam|adamw|sgd|onebit_adam] [--momentum 0.9] [--clip-norm 0]
//                 [--dgc-initial 0.25] [--freeze-fraction 0.2] [--onebit-exchange gather|sharded]
//                 [--eps X] [--variance-floor 0] [--workers 4] [--batch-per-worker 32] [--lr 0.001]
//                 [--weight-decay X]
//                 [--epochs 3] [--seed 1] [--train-subset N] [--data-dir DIR]
//                 [--csv PATH] [--steps-csv PATH] [--log-every 20] [--min-elements N]
//
// With `--min-elements N` (N > 0) every weight and bias of a stage is its own tensor, and
// commpress::layer_policy sends 1-D tensors (the biases) and tensors of fewer than N elements
// as fp32 in the same all-gather; without it a stage's parameters are one compressed tensor.
//
// The per-epoch CSV has epoch,train_loss,test_acc,bytes_per_step,wall_s; bytes_per_step is the
// payload one worker contributes to the all-gather per step (all stages); for PowerSGD, the
// floats it puts into the all-reduces (P and Q, and the biases) times 4; for 1-bit Adam's sharded
// exchange, the payloads it encodes (its chunks and its shard). 1-bit Adam also prints the bytes
// a worker sends per step in each stage. --steps-csv writes the loss curve: step,train_loss
// averaged over the workers and the last --log-every steps.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "commpress/backend/cpu/identity.hpp"
#include "commpress/backend/cpu/quantize.hpp"
#include "commpress/backend/cpu/sign.hpp"
#include "commpress/backend/cpu/top_k.hpp"
#include "commpress/collective/powersgd.hpp"
#include "commpress/comm/loopback.hpp"
#include "commpress/compress/identity.hpp"
#include "commpress/compress/quantize.hpp"
#include "commpress/compress/sign.hpp"
#include "commpress/compress/top_k.hpp"
#include "commpress/feedback/dgc.hpp"
#include "commpress/optim/adam.hpp"
#include "commpress/optim/data_parallel.hpp"
#include "commpress/optim/onebit_adam.hpp"
#include "commpress/optim/sgd.hpp"
#include "commpress/pipeline/layer_policy.hpp"
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
  float momentum = 0.9f;     ///< sgd's momentum; under --feedback dgc, DGC's
  float clip_norm = 0.0f;    ///< dgc: local gradient clipping threshold (0: off)
  float dgc_initial = 0.25f; ///< dgc: top-k density of the first warm-up epoch
  float freeze_fraction = 0.2f;
  std::string onebit_exchange = "gather"; ///< 1-bit Adam's compression-stage exchange
  float eps = -1.0f;                      ///< < 0: the optimizer's default
  float variance_floor = 0.0f;            ///< 1-bit Adam's floor on the frozen variance
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
  std::uint64_t min_elements = 0; ///< > 0: a layer policy per weight and bias (data_parallel)
};

void print_usage(std::ostream& os) {
  os << "usage: data_parallel [--codec fp32|q<bits>[:block<N>][:sym|:asym][:sr][:rot<k>]|\n"
        "                             topk<p>[:q<b>]|powersgd<r>]\n"
        "                     [--feedback none|ef|loco[:int8|:bf16|:f32]|dgc] [--beta X]\n"
        "                     [--reset-every N] [--optimizer adam|adamw|sgd|onebit_adam]\n"
        "                     [--momentum X] [--clip-norm X] [--dgc-initial X]\n"
        "                     [--freeze-fraction X] [--onebit-exchange gather|sharded]\n"
        "                     [--eps X] [--variance-floor X]\n"
        "                     [--workers N] [--batch-per-worker N]\n"
        "                     [--lr X] [--weight-decay X] [--epochs N] [--seed N]\n"
        "                     [--train-subset N] [--data-dir DIR] [--csv PATH]\n"
        "                     [--steps-csv PATH] [--log-every N] [--min-elements N]\n"
        "DGC: --feedback dgc --codec topk<p> --optimizer sgd (--momentum is DGC's; SGD wants a\n"
        "larger --lr than Adam, e.g. 0.05). PowerSGD: --codec powersgd<r> --feedback none.\n"
        "1-bit Adam: --optimizer onebit_adam --codec sign --feedback ef; --onebit-exchange\n"
        "sharded is DeepSpeed's two-error-point compressed_allreduce (default gather).\n"
        "--min-elements N: biases and tensors under N elements go uncompressed (layer policy).\n";
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
    else if (flag == "--momentum")
      o.momentum = ce::parse_float(flag, value);
    else if (flag == "--clip-norm")
      o.clip_norm = ce::parse_float(flag, value);
    else if (flag == "--dgc-initial")
      o.dgc_initial = ce::parse_float(flag, value);
    else if (flag == "--freeze-fraction")
      o.freeze_fraction = ce::parse_float(flag, value);
    else if (flag == "--onebit-exchange")
      o.onebit_exchange = value;
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
    else if (flag == "--min-elements")
      o.min_elements = ce::parse_u64(flag, value);
    else
      throw std::invalid_argument("unknown option " + std::string(flag));
  }
  if (o.workers < 1 || o.batch_per_worker == 0 || o.log_every == 0)
    throw std::invalid_argument("--workers, --batch-per-worker and --log-every must be positive");
  if (o.optimizer != "adam" && o.optimizer != "adamw" && o.optimizer != "sgd" &&
      o.optimizer != "onebit_adam")
    throw std::invalid_argument("--optimizer must be adam, adamw, sgd or onebit_adam");
  // DGC's momentum correction replaces the optimizer's momentum (docs/methods.md section 17):
  // the averaged payloads must be applied by momentum-free SGD.
  if (o.feedback == "dgc" && o.optimizer != "sgd")
    throw std::invalid_argument("--feedback dgc runs with --optimizer sgd");
  if (o.onebit_exchange != "gather" && o.onebit_exchange != "sharded")
    throw std::invalid_argument("--onebit-exchange must be gather or sharded");
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
template <class Exchange, class OptState> struct stage_exchange {
  Exchange ex;
  typename Exchange::feedback_state fb;
  OptState os;
};

/// Runs one worker: every epoch, every global batch, its share of the batch, then one exchange
/// per stage. `make(comm, stage)` builds the per-stage exchange state; `step(state, ctx, params,
/// grads)` runs one exchange and returns the bytes this worker sent; `begin_epoch(state, comm,
/// stage index, stage, epoch)` runs on every stage before each epoch (DGC's warm-up re-sizes its
/// top-k there).
template <class Make, class Step, class BeginEpoch>
void run_worker(const run_setup& su, cp::loopback_communicator& comm, Make&& make, Step&& step,
                BeginEpoch&& begin_epoch) {
  const options& opt = *su.opt;
  ce::mlp_config cfg;
  cfg.seed = opt.seed;
  ce::mlp model(cfg); // same seed on every rank: identical replicas
  using state_t = std::invoke_result_t<Make&, cp::loopback_communicator&, const ce::stage&>;
  std::vector<state_t> stages;
  stages.reserve(model.num_stages());
  for (std::size_t s = 0; s < model.num_stages(); ++s)
    stages.push_back(make(comm, std::as_const(model[s])));

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
    bytes += step(stages[s], ctx, params, grads);
  };

  for (std::size_t epoch = 1; epoch <= opt.epochs; ++epoch) {
    for (std::size_t s = 0; s < model.num_stages(); ++s)
      begin_epoch(stages[s], comm, s, std::as_const(model[s]), epoch);
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

/// Nothing to do between epochs.
constexpr auto no_epoch_hook = [](auto&&...) {};

/// The optimizer the options name (adam, adamw or sgd), passed to `run(optimizer)`. Under DGC
/// the SGD has no momentum: DGC applies it before the compression (momentum correction).
template <class Run> void with_optimizer(const options& opt, Run&& run) {
  if (opt.optimizer == "sgd") {
    cp::sgd o{.lr = opt.lr, .momentum = opt.feedback == "dgc" ? 0.0f : opt.momentum};
    if (opt.weight_decay >= 0.0f)
      o.weight_decay = opt.weight_decay;
    run(o);
  } else if (opt.optimizer == "adamw") {
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

/// A stage's weights and biases as the tensors a layer policy judges: "layer<L>.weight"
/// (fan_in x fan_out) and "layer<L>.bias" (fan_out), in the order of the flat buffer.
class stage_tensors {
public:
  explicit stage_tensors(const ce::stage& st) {
    for (const ce::param_block& b : st.blocks()) {
      names_.push_back("layer" + std::to_string(b.layer) + (b.is_bias ? ".bias" : ".weight"));
      shapes_.push_back(b.is_bias ? std::vector<std::uint64_t>{b.cols}
                                  : std::vector<std::uint64_t>{b.rows, b.cols});
    }
    for (std::size_t i = 0; i < names_.size(); ++i)
      infos_.push_back({names_[i], shapes_[i]});
  }
  std::span<const cp::tensor_info> infos() const noexcept { return infos_; }

private:
  std::vector<std::string> names_;
  std::vector<std::vector<std::uint64_t>> shapes_;
  std::vector<cp::tensor_info> infos_;
};

/// One data_parallel exchange per stage with the pipeline `pipe_for(epoch)` (1-based epoch).
/// With `resize_each_epoch` the exchange is rebuilt before every epoch from that epoch's
/// pipeline, keeping the feedback and optimizer states: a top-k's payload size depends on its
/// density, and data_parallel sizes its buffers once.
template <class Pipe, class PipeFor>
void run_data_parallel(const run_setup& su, PipeFor&& pipe_for, bool resize_each_epoch) {
  const options& opt = *su.opt;
  cp::loopback_world world(opt.workers);
  with_optimizer(opt, [&]<class Opt>(const Opt& o) {
    using ex_t = cp::data_parallel<cp::loopback_communicator, Pipe, Opt>;
    using state_t = stage_exchange<ex_t, typename ex_t::optimizer_state>;
    auto exchange = [&](cp::loopback_communicator& c, const Pipe& pipe, const ce::stage& st) {
      if (opt.min_elements == 0)
        return ex_t(c, pipe, o, st.parameters().size());
      const stage_tensors tensors(st);
      return ex_t(c, pipe, o, tensors.infos(), cp::layer_policy{.min_elements = opt.min_elements});
    };
    world.run([&](cp::loopback_communicator& comm) {
      run_worker(
          su, comm,
          [&](cp::loopback_communicator& c, const ce::stage& st) {
            ex_t ex = exchange(c, pipe_for(1), st);
            auto fb = ex.make_feedback_state();
            auto os = ex.make_optimizer_state();
            return state_t{std::move(ex), std::move(fb), std::move(os)};
          },
          [](state_t& st, const cp::context& ctx, std::span<float> p, std::span<const float> g) {
            return st.ex.step(cp::cpu::seq, ctx, st.fb, st.os, p, g).payload_bytes;
          },
          [&](state_t& st, cp::loopback_communicator& c, std::size_t, const ce::stage& stage,
              std::size_t epoch) {
            if (resize_each_epoch && epoch > 1)
              st.ex = exchange(c, pipe_for(epoch), stage);
          });
    });
  });
}

template <class Pipe> void run_fixed(const run_setup& su, const Pipe& pipe) {
  run_data_parallel<Pipe>(
      su, [&](std::size_t) { return pipe; }, false);
}

/// 1-bit Adam with the compression-stage exchange `Exchange` (commpress::gather_exchange or
/// commpress::sharded_exchange), one optimizer per stage.
template <class Exchange, class Pipe> void run_onebit(const run_setup& su, const Pipe& pipe) {
  const options& opt = *su.opt;
  cp::onebit_adam_config cfg{.lr = opt.lr, .variance_floor = opt.variance_floor};
  if (opt.weight_decay >= 0.0f)
    cfg.weight_decay = opt.weight_decay;
  if (opt.eps >= 0.0f)
    cfg.eps = opt.eps;
  // DeepSpeed's advice: 15-25% of the run as uncompressed warm-up.
  cfg.freeze_step = static_cast<std::uint64_t>(
      std::llround(double(opt.freeze_fraction) * double(su.steps_per_epoch * opt.epochs)));
  std::printf("1-bit Adam: %llu warm-up steps of %zu, %s exchange\n",
              static_cast<unsigned long long>(cfg.freeze_step), su.steps_per_epoch * opt.epochs,
              opt.onebit_exchange.c_str());
  using ex_t = cp::onebit_adam<cp::loopback_communicator, Pipe, Exchange>;
  using state_t = stage_exchange<ex_t, decltype(std::declval<const ex_t&>().make_state())>;
  std::size_t warmup_wire = 0, compressed_wire = 0; // rank 0's, all stages
  cp::loopback_world world(opt.workers);
  world.run([&](cp::loopback_communicator& comm) {
    run_worker(
        su, comm,
        [&](cp::loopback_communicator& c, const ce::stage& st) {
          ex_t ex(c, pipe, cfg, st.parameters().size(), Exchange{});
          if (c.rank() == 0) {
            warmup_wire += ex.warmup_wire_bytes();
            compressed_wire += ex.compressed_wire_bytes();
          }
          auto fb = ex.make_feedback_state();
          auto os = ex.make_state();
          return state_t{std::move(ex), std::move(fb), std::move(os)};
        },
        [](state_t& st, const cp::context& ctx, std::span<float> p, std::span<const float> g) {
          return st.ex.step(cp::cpu::seq, ctx, st.os, st.fb, p, g).payload_bytes;
        },
        no_epoch_hook);
  });
  std::printf("1-bit Adam: bytes sent per step per worker: warm-up %zu, compression stage %zu\n",
              warmup_wire, compressed_wire);
}

/// Instantiates the exchange for the configured feedback, then for the codec.
template <class Codec> void run_codec(const run_setup& su, const Codec& codec) {
  const options& opt = *su.opt;
  const std::string& f = opt.feedback;
  if (f == "none")
    run_fixed(su, cp::pipeline<cp::none, Codec>{cp::none{}, codec});
  else if (f == "ef")
    run_fixed(su, cp::pipeline<cp::ef, Codec>{cp::ef{}, codec});
  else if (f == "loco" || f == "loco:int8")
    run_fixed(su, cp::pipeline<cp::loco<cp::store_int8>, Codec>{
                      {.beta = opt.beta, .reset_every = opt.reset_every}, codec});
  else if (f == "loco:bf16")
    run_fixed(su, cp::pipeline<cp::loco<cp::store_bf16>, Codec>{
                      {.beta = opt.beta, .reset_every = opt.reset_every}, codec});
  else if (f == "loco:f32")
    run_fixed(su, cp::pipeline<cp::loco<cp::store_f32>, Codec>{
                      {.beta = opt.beta, .reset_every = opt.reset_every}, codec});
  else if (f == "dgc")
    throw std::invalid_argument("--feedback dgc runs with --codec topk<p>");
  else
    throw std::invalid_argument("--feedback must be none, ef, loco[:int8|:bf16|:f32] or dgc");
}

/// One top-k selection over a stage's flat gradient, keeping `density` of it; the kept values
/// are fp32, or b-bit quantized as in the model-parallel channels (mp_channels.hpp).
cp::top_k stage_top_k(const ce::codec_spec& spec, float density) {
  return cp::top_k{.fraction = density,
                   .count = 0,
                   .row_length = 0,
                   .values = cp::dtype::f32,
                   .value_quantizer = {.bits = spec.value_bits,
                                       .granularity = cp::scale_granularity::block,
                                       .group = 64,
                                       .range = cp::quant_range::asymmetric}};
}

/// DGC (Lin et al. 2018): momentum correction, momentum factor masking and local gradient
/// clipping in the feedback, top-k as the sparsifier, and the warm-up training schedule of the
/// density, from --dgc-initial in the first epoch down to the codec's percentage.
void run_dgc(const run_setup& su, const ce::codec_spec& spec) {
  const options& opt = *su.opt;
  const cp::dgc policy{.momentum = opt.momentum, .clip_norm = opt.clip_norm};
  cp::detail::throw_if(policy.can_implement(0), "dgc");
  const cp::dgc_warmup warmup{.initial = opt.dgc_initial,
                              .final_density = static_cast<float>(spec.percent / 100.0),
                              .factor = 0.25f};
  cp::detail::throw_if(warmup.can_implement(), "dgc_warmup");
  std::printf("DGC: momentum %g, clip_norm %g, density", static_cast<double>(policy.momentum),
              static_cast<double>(policy.clip_norm));
  for (std::size_t e = 1; e <= opt.epochs; ++e)
    std::printf(" %g%%", 100.0 * static_cast<double>(warmup.density(e - 1)));
  std::printf(" in epochs 1..%zu\n", opt.epochs);
  using pipe_t = cp::pipeline<cp::dgc, cp::top_k>;
  run_data_parallel<pipe_t>(
      su,
      [&](std::size_t epoch) {
        return pipe_t{policy, stage_top_k(spec, warmup.density(epoch - 1))};
      },
      true);
}

/// One tensor of a stage under PowerSGD: a weight matrix with its plan, state and workspace, or
/// a bias (no plan), averaged uncompressed.
struct powersgd_tensor {
  std::size_t offset = 0;
  std::size_t size = 0;
  std::uint32_t tensor_id = 0; ///< seeds Q's fresh draws; the same on every rank
  std::optional<cp::powersgd_plan> plan;
  cp::powersgd_state state;
  std::vector<std::byte> workspace;
};

/// PowerSGD (Vogels et al. 2019) of rank r on every weight matrix, then the optimizer on the
/// averaged gradient.
void run_powersgd(const run_setup& su, std::uint32_t rank) {
  const options& opt = *su.opt;
  // warm_start starts each step's power iteration from the last step's Q, which Vogels et al.
  // find makes one iteration per step enough; start_iter 0 compresses from the first step.
  const cp::powersgd cfg{
      .rank = rank, .warm_start = true, .orthogonalization_epsilon = 0.0f, .start_iter = 0};
  cp::loopback_world world(opt.workers);
  with_optimizer(opt, [&]<class Opt>(const Opt& o) {
    struct state_t {
      std::vector<powersgd_tensor> tensors;
      std::vector<float> mean; ///< the stage's averaged gradient
      typename Opt::state_type os;
    };
    world.run([&](cp::loopback_communicator& comm) {
      run_worker(
          su, comm,
          [&](cp::loopback_communicator& c, const ce::stage& st) {
            state_t s{{},
                      std::vector<float>(st.parameters().size()),
                      o.make_state(st.parameters().size())};
            for (const ce::param_block& b : st.blocks()) {
              powersgd_tensor t;
              t.offset = b.offset;
              t.size = b.size();
              t.tensor_id = static_cast<std::uint32_t>(2 * b.layer + (b.is_bias ? 1 : 0));
              if (!b.is_bias) {
                t.plan.emplace(cfg, b.rows, b.cols, static_cast<int>(c.size()));
                t.state = t.plan->make_state();
                t.workspace.resize(static_cast<std::size_t>(t.plan->workspace_bytes()));
              }
              s.tensors.push_back(std::move(t));
            }
            return s;
          },
          [&](state_t& st, const cp::context& ctx, std::span<float> p, std::span<const float> g) {
            std::size_t bytes = 0;
            const float inv = 1.0f / static_cast<float>(comm.size());
            for (powersgd_tensor& t : st.tensors) {
              const std::span<const float> in = g.subspan(t.offset, t.size);
              const std::span<float> out = std::span<float>(st.mean).subspan(t.offset, t.size);
              cp::context tctx = ctx;
              tctx.tensor_id = t.tensor_id;
              if (t.plan) {
                bytes += cp::all_reduce_powersgd(comm, *t.plan, t.state, tctx, in, out,
                                                 std::span<std::byte>(t.workspace))
                             .payload_bytes;
              } else {
                std::copy(in.begin(), in.end(), out.begin());
                comm.all_reduce_sum(out);
                for (float& v : out)
                  v *= inv;
                bytes += 4 * t.size;
              }
            }
            o.step(cp::cpu::seq, st.os, p, std::span<const float>(st.mean));
            return bytes;
          },
          no_epoch_hook);
    });
  });
}

/// `powersgd<r>`, r >= 1, or std::nullopt for another codec spec.
std::optional<std::uint32_t> parse_powersgd(std::string_view text) {
  if (!text.starts_with("powersgd"))
    return std::nullopt;
  const std::string_view digits = text.substr(8);
  std::uint32_t r = 0;
  if (digits.empty() || digits.size() > 6)
    throw std::invalid_argument("--codec: expected powersgd<rank>");
  for (char ch : digits) {
    if (ch < '0' || ch > '9')
      throw std::invalid_argument("--codec: expected powersgd<rank>");
    r = r * 10 + static_cast<std::uint32_t>(ch - '0');
  }
  if (r == 0)
    throw std::invalid_argument("--codec: the PowerSGD rank must be at least 1");
  return r;
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
    const cp::pipeline<cp::ef, cp::sign> pipe{cp::ef{},
                                              cp::sign{.granularity = cp::sign_granularity::tensor,
                                                       .block = 0,
                                                       .scale = cp::sign_scale::rms}};
    if (opt.onebit_exchange == "sharded")
      run_onebit<cp::sharded_exchange>(su, pipe);
    else
      run_onebit<cp::gather_exchange>(su, pipe);
    return 0;
  }
  if (const std::optional<std::uint32_t> rank = parse_powersgd(opt.codec)) {
    // PowerSGD keeps its own error (and the warm-started Q): no second feedback on top.
    if (opt.feedback != "none")
      throw std::invalid_argument("--codec powersgd<r> runs with --feedback none");
    run_powersgd(su, *rank);
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
    if (opt.feedback == "dgc")
      run_dgc(su, spec);
    else
      run_codec(su, stage_top_k(spec, static_cast<float>(spec.percent / 100.0)));
    break;
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
