// A conveyor-train checkpoint: the model, the optimizer (momentum), the
// pipeline's position, the epoch's running sums and the history of epoch rows,
// with the run's identity (every setting the batches and the model depend on),
// so that --resume continues exactly where the run stopped, or refuses a
// checkpoint of another run, naming what differs.
//
// Thread safety: the training thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/optim/sgd.h>

#include "apps/options.h"
#include "apps/train_options.h"
#include "libtorch/models.h"
#include "pipeline/state.h"
#include "data/dataset.h"

namespace conveyor::apps {

// One epoch of training as printed and plotted.
struct EpochRow {
  std::uint64_t epoch = 0;  // 1-based, as printed
  double train_loss = 0, train_acc = 0, val_loss = 0, val_acc = 0, images_per_s = 0, consumer_idle = 0;
};

// Running sums over an epoch's training batches (kept in the checkpoint, so a
// resumed epoch reports the same figures as an uninterrupted one).
struct Sums {
  double loss = 0;
  std::uint64_t correct = 0, count = 0;
  // Sum of batch_digest() over the epoch's batches so far (mod 2^64): two runs
  // that print the same value for an epoch received the same batches.
  std::uint64_t batches = 0;
  std::string serialize() const;
  // Throws UsageError naming the field.
  static Sums parse(const std::string& text);
};

// What a checkpoint holds besides the model's and the optimizer's tensors.
struct CheckpointState {
  PipelineState pipeline;
  Sums sums;
  std::vector<EpochRow> history;
};

// FNV-1a over every sample's relative_name() and label: the same dataset, not
// just the same size, wherever it lies and whether read from its folder, its
// list or the shards `conveyor pack` made of either.
std::string dataset_digest(const Dataset& d);

// What a checkpoint must agree on to be resumed: everything the batches and
// the model depend on, as one line. `digest`: dataset_digest(all), or
// path_digest(all) as older checkpoints have it.
std::string run_identity(const Options& o, const TrainOptions& t, int crop, const Dataset& all, const std::string& digest,
                         std::size_t train_size);
// The digest checkpoints held before: over each sample's path as given
// (path_view), so a moved folder or its shards read as another dataset. Still
// accepted by --resume.
std::string path_digest(const Dataset& d);
// The settings two run identities ("key=value ...") disagree on: "batch=64 there, 32 here; ...".
std::string differences(const std::string& there, const std::string& here);

// Writes FILE.tmp and renames it over FILE, so a crash mid-write leaves the
// previous checkpoint intact. Throws std::runtime_error naming the file when
// the write fails (a full disk), having removed FILE.tmp.
void save_checkpoint(const std::string& file, Net& model, torch::optim::SGD& optimizer, const std::string& identity,
                     const CheckpointState& state);
// Reads FILE into model and optimizer (their tensors onto `where`). Throws
// UsageError when it is no conveyor checkpoint, is malformed, or belongs to a
// run of another identity: neither `identity` nor `also` (the same run as an
// older checkpoint named it; "" for none).
CheckpointState load_checkpoint(const std::string& file, Net& model, torch::optim::SGD& optimizer,
                                const std::string& identity, const std::string& also, const torch::Device& where);

// The history as CSV (epoch,train_loss,...), as the checkpoint and --plot keep it.
std::string history_csv(const std::vector<EpochRow>& rows);
// --plot FILE: loss, validation accuracy and images/s per epoch, drawn by
// gnuplot from FILE.csv (a note instead where gnuplot is not installed).
void plot_history(const std::string& file, const std::vector<EpochRow>& rows);

}  // namespace conveyor::apps
