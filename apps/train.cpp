// conveyor-train (`conveyor train`): trains LeNet-5 or a small ResNet with
// LibTorch on Conveyor's batches, as a C++ training program would.
//
//   conveyor train                                    LeNet-5, embedded dataset, 5 epochs
//   conveyor train --model resnet --crop 64 --epochs 10 --checkpoint run.pt --plot run.png
//   conveyor train --resume run.pt                    continue where run.pt left off
//   conveyor train --folder train/ --val-fraction 0.1 --lr 0.05 --workers 8
//
// The data path: workers decode and augment into pinned (CUDA) or plain host
// batch buffers; the delivery thread normalizes to float NCHW on the device
// (on the CPU for the host backend); to_tensors() wraps the result without a
// copy, and the batch goes back to the pipeline when autograd lets go of it.
// A validation split, held out by class before training, is scored after each
// epoch with Resize + CenterCrop. A checkpoint holds the model, the optimizer
// (momentum) and the pipeline's position, so --resume continues mid-epoch with
// the same batches, in the same order, as an uninterrupted run.
//
// SIGINT/SIGTERM: the step in progress finishes, the checkpoint is saved (with
// --checkpoint) and the program exits with status 130/143; a second one kills it.
// Exit status: 0; 1 when training fails; 2 for bad input (one line on stderr).
//
// The run's steps, each a function below: prepare (the dataset and its split,
// the model, the device, the optimizer), resume (the checkpoint, in
// apps/checkpoint.h), the epochs (the command's one epoch loop, apps/epochs.h:
// train_epoch, then end_epoch's validation, line, checkpoint and plot), and
// finish. The validation split is apps/validation.h.
#include <algorithm>
#include <array>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include <torch/cuda.h>
#include <torch/nn/functional.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include "apps/checkpoint.h"
#include "apps/cli.h"
#include "apps/epochs.h"
#include "apps/options.h"
#include "apps/toml_config.h"
#include "apps/train_options.h"
#include "apps/validation.h"
#include "conveyor/version.h"
#include "data/quote_bytes.h"
#include "image/image_source.h"
#include "libtorch/determinism.h"
#include "libtorch/models.h"
#include "libtorch/tensors.h"
#include "source/source.h"

using namespace conveyor;
using namespace conveyor::apps;

namespace {

int report_interrupt(int sig, std::size_t batches, std::uint64_t epoch, const std::string& checkpoint) {
  std::printf("interrupted by %s after %zu batch(es) of this run, in epoch %llu%s\n", signal_word(sig),
              batches, (unsigned long long)epoch + 1,  // counted from 1, as the epoch lines are
              checkpoint.empty() ? " (no --checkpoint: nothing saved)" : ("; saved; resume with --resume " + checkpoint).c_str());
  std::fflush(stdout);
  return 128 + sig;
}

// One training run, step by step; it prints each epoch's line as the epoch
// loop's reporter.
class Trainer final : public EpochReporter {
 public:
  Trainer(const Options& o, TrainOptions t) : o_(o), t_(std::move(t)) {}
  int run();

  std::string progress(const EpochFigures& f, std::size_t done, std::size_t total) const override;
  bool epoch_done(EpochFigures& f, int interrupted) override;

 private:
  void prepare();
  void resume();
  void start_pipelines();
  void print_header() const;
  void train_epoch(EpochTally& tally);
  void train_batch(DeviceBatch batch);
  void save() { save_checkpoint(t_.checkpoint, *model_, *optimizer_, identity_, {pipeline_->state(), sums_, history_}); }
  int finish() const;

  Options o_;
  TrainOptions t_;
  Dataset all_{{}, {}}, train_set_{{}, {}}, val_set_{{}, {}};
  int crop_ = 0;
  std::shared_ptr<Net> model_;
  std::shared_ptr<Device> device_;
  torch::Device where_{torch::kCPU};
  std::unique_ptr<torch::optim::SGD> optimizer_;
  std::string identity_;
  std::optional<PipelineState> resume_state_;
  Sums sums_;
  std::vector<EpochRow> history_;
  std::unique_ptr<ImageSource> images_;       // before the pipeline, whose filler refers to it
  std::unique_ptr<DevicePipeline> pipeline_;
  std::optional<Validation> validation_;      // one pass after each epoch of this run
  PipelineStats before_;                      // at the epoch's start: its figures are the loop's own
  std::size_t batches_this_run_ = 0;
  std::optional<int> stopped_;                // the exit status when the run stops early
};

// The most classes a `train` model is built for: a 100,000-class head is a few
// tens of MB; beyond, a label far past the others is a mistake far more often.
constexpr std::int64_t kMaxTrainClasses = 100000;

// The dataset and its split, the model, the device and the optimizer.
void Trainer::prepare() {
  // Before any CUDA work: cuBLAS reads its workspace setting when its handle is made.
  if (t_.deterministic) std::printf("%s\n", make_deterministic().c_str());
  // The whole dataset, also under --rank-by-shard: every rank holds out the
  // same validation split and sizes its model by every class; each then
  // trains on its own shards' share of the rest (below).
  Options whole = o_;
  whole.rank_by_shard = false;
  all_ = open_dataset(whole, Announce::when_made);
  if (all_.num_classes() < 2) throw UsageError("dataset: " + std::to_string(all_.num_classes()) + " class(es); training needs at least 2");
  // The model's last layer has a row per class, max label + 1: one stray
  // label of 10^18 asked LibTorch for exabytes (an error that names no
  // sample), and one of 10^6 trained a million-class head on a few labels.
  if (all_.num_classes() > kMaxTrainClasses) {
    std::size_t at = 0;
    while (all_.label(at) + 1 < all_.num_classes()) ++at;
    throw UsageError("dataset: " + all_.name(at) + " has label " + std::to_string(all_.label(at)) + ", which makes a " +
                     std::to_string(all_.num_classes()) + "-class model; train takes labels 0 to " +
                     std::to_string(kMaxTrainClasses - 1) + " (number the classes 0 to K-1)");
  }
  // --transforms sets the input side through its list's output (crop_size); else --crop or the model's default.
  crop_ = !o_.transforms.empty() ? crop_size(o_) : o_.crop ? o_.crop : int(default_input(t_.model));
  torch::manual_seed(o_.seed);  // the initial weights, like the batches, follow --seed
  try {
    model_ = make_model({t_.model, 3, all_.num_classes(), crop_});
  } catch (const std::invalid_argument& e) {
    if (o_.transforms.empty()) throw UsageError(e.what());
    throw UsageError(std::string("--transforms: its output side is the model's input; ").append(e.what()));
  }
  split(all_, t_.val_fraction, o_.seed, train_set_, val_set_);
  if (train_set_.size() == 0) throw UsageError("--val-fraction " + std::to_string(t_.val_fraction) + " leaves no training samples");
  if (o_.rank_by_shard) train_set_ = shards_of_rank(train_set_, o_);
  device_ = open_training_device(o_);
  where_ = torch_device(*device_);
  model_->to(where_);
  optimizer_ = std::make_unique<torch::optim::SGD>(
      model_->parameters(), torch::optim::SGDOptions(t_.lr).momentum(t_.momentum).weight_decay(t_.weight_decay));
  identity_ = run_identity(o_, t_, crop_, all_, dataset_digest(all_), train_set_.size());
}

// --resume: the model, the optimizer, the position and the sums of the checkpoint.
void Trainer::resume() {
  if (t_.resume.empty()) return;
  const std::string before = run_identity(o_, t_, crop_, all_, path_digest(all_), train_set_.size());
  CheckpointState saved = load_checkpoint(t_.resume, *model_, *optimizer_, identity_, before, where_);
  resume_state_ = std::move(saved.pipeline);
  sums_ = saved.sums;
  history_ = std::move(saved.history);
  std::printf("resumed from %s: epoch %llu, %zu batch(es) of it done\n", t_.resume.c_str(),
              (unsigned long long)resume_state_->epoch + 1, resume_state_->delivered.size());  // from 1
}

// The training pipeline (normalizing to float32 on the device; a RandomErasing
// of --transforms after it) and the validation split's.
void Trainer::start_pipelines() {
  TransferConfig tc;
  tc.normalize = TransferConfig::Normalization{std::size_t(crop_), std::size_t(crop_), 3, Normalize{}, DType::float32};
  tc.current_consumer_stream = torch_current_stream(*device_);  // LibTorch's current stream, asked at each next()
  TransferConfig val_tc = tc;  // validation erases nothing
  images_ = build_image_source(train_set_, image_config(o_, o_.augment, crop_), o_.workers, 0.0, *device_, tc).images;
  Config cfg = pipeline_config(o_);
  cfg.sample_bytes = images_->sample_bytes();
  try {
    cfg.validate();
  } catch (const ConfigError& e) {
    throw UsageError(e.what());
  }
  pipeline_ = std::make_unique<DevicePipeline>(cfg, train_set_.size(), images_->filler(), tc, device_, resume_state_);
  const std::uint64_t first_epoch = resume_state_ ? resume_state_->epoch : 0;
  if (val_set_.size()) validation_.emplace(val_set_, o_, crop_, o_.epochs - first_epoch, device_, val_tc);
}

void Trainer::print_header() const {
  std::int64_t parameters = 0;
  for (const auto& p : model_->parameters()) parameters += p.numel();
  std::printf("dataset: %s; %zu training and %zu validation images, %lld classes (chance %.1f%%); rank %zu of %zu\n"
              "model %s (%lld parameters), %dx%d inputs\n%s\n",
              embedded_dataset(o_) ? "the embedded default dataset" : all_.source().c_str(), train_set_.size(),
              val_set_.size(), (long long)all_.num_classes(), 100.0 / double(all_.num_classes()), o_.rank, o_.world_size,
              t_.model.c_str(), (long long)parameters, crop_, crop_, device_->describe().c_str());
}

int Trainer::run() {
  check_train_outputs(o_, t_);
  prepare();
  resume();
  const auto nothing_to_do = [&](std::uint64_t first) {
    if (first < o_.epochs) return false;
    std::printf("nothing to do: the checkpoint is at epoch %llu of --epochs %zu\n", (unsigned long long)first, o_.epochs);
    return true;
  };
  std::uint64_t first_epoch = resume_state_ ? resume_state_->epoch : 0;
  if (nothing_to_do(first_epoch)) return 0;
  start_pipelines();
  // Where the pipeline starts: a checkpoint whose epoch was wholly delivered
  // (not one this program writes) starts at the next epoch.
  first_epoch = pipeline_->state().epoch;
  if (nothing_to_do(first_epoch)) return 0;
  print_header();
  std::vector<EpochFigures> figures;
  (void)for_each_epoch(
      first_epoch, o_.epochs, *this, figures, pipeline_->started_at(),
      [&](std::uint64_t) { return pipeline_->batches_per_epoch(); },
      [&](std::uint64_t e) { return pipeline_->batches_per_epoch() - pipeline_->epoch(e).size(); },
      [&](EpochTally& tally) { train_epoch(tally); });
  return stopped_ ? *stopped_ : finish();
}

std::string Trainer::progress(const EpochFigures& f, std::size_t done, std::size_t total) const {
  char line[120];
  std::snprintf(line, sizeof line, "  epoch %llu %zu/%zu batches, loss %.3f", (unsigned long long)f.epoch, done, total,
                sums_.count ? sums_.loss / double(sums_.count) : 0.0);
  return line;
}

// One epoch's batches, a step each. Mid-epoch checkpoints (--checkpoint-every)
// and stops (--stop-after, a signal) happen here: the epoch's last batch is
// saved by end_epoch, with its validation row, so a checkpoint never holds a
// finished epoch without it.
void Trainer::train_epoch(EpochTally& tally) {
  before_ = pipeline_->stats();
  if (t_.schedule == TrainOptions::Schedule::cosine) {
    const double lr = t_.lr * 0.5 * (1 + std::cos(std::numbers::pi * double(tally.epoch()) / double(o_.epochs)));
    for (auto& g : optimizer_->param_groups()) static_cast<torch::optim::SGDOptions&>(g.options()).lr(lr);
  }
  for (auto& batch : pipeline_->epoch(tally.epoch())) {
    const std::uint64_t skipped = batch.host().skipped.size(), count_before = sums_.count;
    sums_.batches += batch_digest(batch.host());
    tally.filled(batch.host().filled_at, batch.host().size() + skipped);
    if (batch.size() > 0) train_batch(std::move(batch));  // the batch goes back to the pipeline in there
    ++batches_this_run_;
    tally.add(sums_.count - count_before, skipped);
    const bool mid_epoch = tally.done() < tally.total();
    const int interrupted = interrupt_signal();
    const bool stopping = mid_epoch && ((t_.stop_after && batches_this_run_ == t_.stop_after) || interrupted);
    if (!t_.checkpoint.empty() && mid_epoch &&
        (stopping || (t_.checkpoint_every && batches_this_run_ % t_.checkpoint_every == 0))) {
      save();
    }
    if (!stopping) continue;
    tally.wipe();
    tally.end_run();
    if (interrupted) {
      stopped_ = report_interrupt(interrupted, batches_this_run_, tally.epoch(), t_.checkpoint);
    } else {
      std::printf("stopped after %zu batch(es) (--stop-after) in epoch %llu%s\n", batches_this_run_,
                  (unsigned long long)tally.epoch() + 1,  // from 1
                  t_.checkpoint.empty() ? "" : ("; resume with --resume " + t_.checkpoint).c_str());
      stopped_ = 0;
    }
    return;
  }
}

void Trainer::train_batch(DeviceBatch batch) {
  TensorBatch tb = to_tensors(std::move(batch));
  const torch::Tensor& labels = tb.labels;  // on where_ already: they crossed with the images
  optimizer_->zero_grad();
  const torch::Tensor out = model_->forward(tb.images);
  // MixUp and CutMix give soft targets: cross-entropy against them (the
  // model's output is log-probabilities).
  const torch::Tensor loss =
      tb.soft_labels.defined() ? -(tb.soft_labels * out).sum(1).mean() : torch::nll_loss(out, labels);
  loss.backward();
  optimizer_->step();
  const auto n = labels.size(0);
  const double value = loss.item<double>();  // the sync the running mean needs anyway
  if (!std::isfinite(value)) {
    // Training on would only carry NaN into every later figure and checkpoint.
    throw std::runtime_error("the loss is " + std::to_string(value) + " in epoch " +
                             std::to_string(pipeline_->state().epoch + 1) +
                             ": the model diverged (lower --lr) or its weights are corrupt (the --resume file?)");
  }
  sums_.loss += value * double(n);
  sums_.correct += std::uint64_t(out.argmax(1).eq(labels).sum().item<std::int64_t>());
  sums_.count += std::uint64_t(n);
}  // tb dies here: the batch goes back to the pipeline

// The epoch's end: validation, its line, the checkpoint and the plot; then a
// signal or --stop-after ends the run (unless this was the last epoch).
bool Trainer::epoch_done(EpochFigures& f, int) {
  const std::uint64_t e = f.epoch;
  pipeline_->consumer_away();  // validation, the checkpoint and the plot are not the loop's time
  const PipelineStats epoch_stats = pipeline_->stats().since(before_);
  f.note_decoding(epoch_stats);
  const ValResult v = validate(*model_, validation_ ? &*validation_ : nullptr, where_);
  EpochRow row;
  row.epoch = e + 1;
  row.train_loss = sums_.count ? sums_.loss / double(sums_.count) : 0;
  row.train_acc = sums_.count ? double(sums_.correct) / double(sums_.count) : 0;
  row.val_loss = v.images ? v.loss : std::nan("");  // no split: gaps in the CSV and the plot, not zeros
  row.val_acc = v.images ? v.accuracy : std::nan("");
  row.images_per_s = f.images_per_s();
  row.consumer_idle = consumer_idle(epoch_stats);
  history_.push_back(row);
  char val[96] = "no validation split";
  if (v.images) {
    std::snprintf(val, sizeof val, "val loss %.4f acc %.1f%% (%zu images%s)", row.val_loss, 100 * row.val_acc, v.images,
                  v.skipped ? (", " + std::to_string(v.skipped) + " skipped").c_str() : "");
  }
  std::printf("epoch %llu/%zu: train loss %.4f acc %.1f%% | %s | %llu images, "
              "%.1f s, %.0f images/s, consumer idle %.0f%%%s%s | batches %016llx\n",
              (unsigned long long)e + 1, o_.epochs, row.train_loss, 100 * row.train_acc, val,
              (unsigned long long)f.images, f.seconds, row.images_per_s, 100 * row.consumer_idle,
              f.skipped ? (", " + std::to_string(f.skipped) + " skipped").c_str() : "", f.prefetch_note().c_str(),
              (unsigned long long)sums_.batches);
  std::printf("%s", epoch_stats.table().c_str());
  std::fflush(stdout);
  sums_ = Sums{};
  if (!t_.checkpoint.empty()) save();
  if (!t_.plot.empty()) plot_history(t_.plot, history_);
  if (e + 1 >= o_.epochs) return true;
  if (const int sig = interrupt_signal()) {
    stopped_ = report_interrupt(sig, batches_this_run_, e, t_.checkpoint);
    return false;
  }
  if (t_.stop_after && batches_this_run_ >= t_.stop_after) {
    std::printf("stopped after %zu batch(es) (--stop-after) at the end of epoch %llu%s\n", batches_this_run_,
                (unsigned long long)e, t_.checkpoint.empty() ? "" : ("; resume with --resume " + t_.checkpoint).c_str());
    stopped_ = 0;
    return false;
  }
  return true;
}

int Trainer::finish() const {
  const EpochRow& last = history_.back();
  if (val_set_.size()) {
    std::printf("final: val accuracy %.4f, val loss %.6f (chance %.4f)\n", last.val_acc, last.val_loss,
                1.0 / double(all_.num_classes()));
  } else {
    std::printf("final: train loss %.6f, train accuracy %.4f (no validation split)\n", last.train_loss, last.train_acc);
  }
  // Every sample --on-error skip left out, named by its reason (which names the
  // file), once, with the epochs it was left out of: training's and validation's.
  const auto print_skips = [](const char* what, const char* one, const char* many, const auto& skipped) {
    for (const auto& s : skipped) {
      const auto first = (unsigned long long)s.epoch + 1, final = (unsigned long long)std::max(s.epoch, s.last_epoch) + 1;
      if (s.times == 1) {
        std::printf("skipped (%s, %s %llu): %s\n", what, one, first, printable(s.reason).c_str());
      } else {
        std::printf("skipped (%s, %s %llu-%llu, %llu times): %s\n", what, many, first, final, (unsigned long long)s.times,
                    printable(s.reason).c_str());
      }
    }
  };
  print_skips("training", "epoch", "epochs", pipeline_->skipped());
  if (validation_) print_skips("validation", "pass", "passes", validation_->pipeline.skipped());
  if (!t_.checkpoint.empty()) std::printf("checkpoint: %s\n", t_.checkpoint.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  hold_standard_fds();
  CLI::App app{"conveyor train: train LeNet-5 or a small ResNet with LibTorch on Conveyor's batches"};
  app.option_defaults()->always_capture_default();  // --help shows each flag's default
  app.set_version_flag("--version", std::string("conveyor train ") + CONVEYOR_VERSION_STRING);
  add_config_option(app, "", "train", argc, argv);
  app.footer(
      "Examples:\n"
      "  conveyor train                                   LeNet-5 on the embedded dataset, 5 epochs\n"
      "  conveyor train --model resnet --epochs 10 --checkpoint run.pt --plot run.png\n"
      "  conveyor train --resume run.pt --checkpoint run.pt\n"
      "  conveyor train --folder train/ --workers 8 --lr 0.05");
  Options o;
  o.epochs = 5;
  o.augment = Augmentation::crop;
  TrainOptions t;
  add_train_flags(app, o, t);
  strict_values(app);
  try {
    shard_from_environment(o);
    app.parse(argc, argv);
    o.config = config_file(app);
    catch_interrupts();
    return finish_stdout("conveyor train", Trainer(o, std::move(t)).run());
  } catch (const c10::Error& e) {
    wipe_progress_line();
    // LibTorch's what() carries a backtrace: keep the message's first line.
    const std::string what = e.what_without_backtrace();
    std::fprintf(stderr, "conveyor train: LibTorch: %s\n", what.substr(0, what.find('\n')).c_str());
    return 1;
  } catch (...) {
    return exit_status("conveyor train", app, "");
  }
}
