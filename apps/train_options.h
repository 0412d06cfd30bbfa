// TrainOptions: the flags of `conveyor train` itself, typed, with their
// defaults; the pipeline's flags are Options (apps/options.h).
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "apps/options.h"

namespace conveyor::apps {

struct TrainOptions {
  std::string model = "lenet";                 // Default: lenet.
  double lr = 0.05, momentum = 0.9, weight_decay = 5e-4;  // Default: 0.05, 0.9, 5e-4 (SGD).
  enum class Schedule { cosine, constant } schedule = Schedule::cosine;  // Default: cosine.
  double val_fraction = 0.1;                   // Default: 0.1.
  std::string checkpoint, resume, plot;        // Default: none.
  std::size_t checkpoint_every = 0;            // batches; 0: at the end of each epoch only
  std::size_t stop_after = 0;                  // batches this run, then checkpoint and exit; 0: none
  bool deterministic = false;                  // LibTorch's deterministic kernels (make_deterministic). Default: off.
};
inline constexpr std::array<Choice<TrainOptions::Schedule>, 2> kSchedules{
    {{"cosine", TrainOptions::Schedule::cosine}, {"constant", TrainOptions::Schedule::constant}}};

// The pipeline's flags (train's own descriptions of --crop and --augment) and training's.
void add_train_flags(CLI::App& app, Options& o, TrainOptions& t);

// The outputs, the dataset flags and --transforms, checked before anything is loaded. With
// more than one rank, --checkpoint and --resume become FILE.rankR (each rank
// its own); --checkpoint through a link becomes the link's target. Throws
// UsageError naming the flag.
void check_train_outputs(const Options& o, TrainOptions& t);

// The device to train on: CUDA when both LibTorch and Conveyor have one;
// otherwise the host backend handing its buffers over, so the tensors are the
// batches. Throws UsageError for --device cuda where LibTorch has no CUDA.
std::shared_ptr<Device> open_training_device(const Options& o);

}  // namespace conveyor::apps
