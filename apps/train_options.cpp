#include "apps/train_options.h"

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include <torch/cuda.h>

#include "apps/cli.h"

namespace conveyor::apps {

namespace {

// With more than one rank, each writes and reads its own checkpoint: FILE.rankR.
std::string per_rank(const std::string& file, const Options& o) {
  return file.empty() || o.world_size == 1 ? file : file + ".rank" + std::to_string(o.rank);
}

}  // namespace

void check_train_outputs(const Options& o, TrainOptions& t) {
  check_shard(o);
  (void)transforms_of(o);  // a bad list (or one with --crop) before the dataset is read
  if (!o.views.empty()) throw UsageError("--views: not with train, whose model takes one view of each sample");
  t.checkpoint = per_rank(t.checkpoint, o);
  t.resume = per_rank(t.resume, o);
  if (!t.resume.empty()) {
    std::error_code ec;
    const auto st = std::filesystem::status(t.resume, ec);
    if (!std::filesystem::exists(st)) throw UsageError("--resume " + t.resume + ": no such file");
    if (!std::filesystem::is_regular_file(st)) throw UsageError("--resume " + t.resume + ": not a regular file (a checkpoint is one)");
  }
  // The checkpoint is written beside FILE and renamed over it: a device or a
  // FIFO there would be replaced (as root, --checkpoint /dev/null replaced
  // /dev/null), a link by a file. A link is followed: latest.pt -> run5.pt
  // writes run5.pt; anything else but a regular file is refused.
  if (!t.checkpoint.empty()) {
    namespace fs = std::filesystem;
    std::error_code ec;
    // Link by link (weakly_canonical leaves a dangling one as it is: the
    // first checkpoint through latest.pt must create its target).
    fs::path p = t.checkpoint;
    for (int hops = 0; fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
      if (hops == 40) throw UsageError("--checkpoint " + t.checkpoint + ": too many levels of symbolic links");
      const fs::path target = fs::read_symlink(p, ec);
      p = target.is_absolute() ? target : p.parent_path() / target;
    }
    t.checkpoint = p.lexically_normal().string();
    const auto st = fs::status(t.checkpoint, ec);
    if (fs::exists(st) && !fs::is_regular_file(st)) {
      throw UsageError("--checkpoint " + t.checkpoint + ": not a regular file (a checkpoint is written beside it and renamed over it)");
    }
  }
  check_plot_name(t.plot);
  // Said, not refused: a config (configs/train-resnet.toml) may set the
  // interval for the runs that name a --checkpoint.
  if (t.checkpoint_every && t.checkpoint.empty()) {
    std::printf("note: --checkpoint-every %zu without --checkpoint: nothing will be saved\n", t.checkpoint_every);
  }
  apps::check_outputs(o, {{"--checkpoint", t.checkpoint},
                           {"--plot", t.plot, false, true},
                           {"--plot (its table)", t.plot.empty() ? "" : t.plot + ".csv"}});
  check_writable("--checkpoint", t.checkpoint + ".tmp");  // a temporary beside it is written, then renamed over it
  check_writable("--plot", t.plot);
}


void add_train_flags(CLI::App& app, Options& o, TrainOptions& t) {
  add_pipeline_flags(app, o);
  // Host-backend simulation flags: training on the CPU always hands the
  // buffers over, so these would be taken and ignored. Not offered at all.
  for (const char* flag : {"--link-gbps", "--host-transfer"}) app.remove_option(app.get_option(flag));
  app.get_option("--transforms")->description(
      "the training transforms as torchvision's Compose list, e.g. \"RandomResizedCrop(64), RandomHorizontalFlip()\" "
      "(image/transform_spec.h), in place of --augment and --crop: its output side is the model's input "
      "(lenet takes 32; validation center-crops to it)");
  app.get_option("--crop")->description("input size (default 32 for lenet, 64 for resnet)");
  app.get_option("--augment")->description(
      "crop: Resize + RandomCrop (padding 4) + flip (default) | rrc: RandomResizedCrop + flip | center: Resize + CenterCrop");
  app.add_option("--model", t.model, "lenet (32 x 32 inputs) or resnet (64..128 px; default --crop 64)")
      ->check(CLI::IsMember({"lenet", "resnet"}));
  app.add_option("--lr", t.lr, "SGD learning rate (the schedule's peak)")->check(CLI::Range(0.0, 100.0));
  app.add_option("--momentum", t.momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0));
  app.add_option("--weight-decay", t.weight_decay, "SGD weight decay")->check(CLI::Range(0.0, 1.0));
  add_choice(app, "--schedule", t.schedule, kSchedules, "learning rate per epoch: cosine (to 0 at --epochs) or constant");
  app.add_option("--val-fraction", t.val_fraction, "share of each class held out for validation")
      ->check(CLI::Range(0.0, 0.9));
  app.add_option("--checkpoint", t.checkpoint, "save model, optimizer and pipeline state to FILE after every epoch "
                 "(FILE.rankR with --world-size > 1)");
  app.add_option("--checkpoint-every", t.checkpoint_every, "also save every N batches (with --checkpoint)")->check(CLI::Range(1, 1 << 30));
  app.add_option("--resume", t.resume, "continue from a checkpoint (same dataset and settings)");
  app.add_option("--stop-after", t.stop_after, "stop after N batches of this run, saving the checkpoint (an interruption)")
      ->check(CLI::Range(1, 1 << 30));
  app.add_flag("--deterministic", t.deterministic,
               "reproducible bits on CUDA too: LibTorch's deterministic algorithms and cuDNN, no cuDNN benchmark, "
               "CUBLAS_WORKSPACE_CONFIG=:4096:8 (slower; docs/training.md)");
  app.add_option("--plot", t.plot, "draw loss, validation accuracy and images/s per epoch to FILE.png or FILE.svg");
}

std::shared_ptr<Device> open_training_device(const Options& o) {
  const DeviceConfig asked = device_config(o);  // refuses --gpu N with --device host
  if (o.device != BackendChoice::host && torch::cuda::is_available()) return open_device(asked);
  if (o.device == BackendChoice::cuda) throw UsageError("--device cuda: this LibTorch was built without CUDA");
  DeviceConfig dc;
  dc.backend = BackendChoice::host;
  dc.host_transfer = HostTransfer::handover;
  auto device = open_device(dc);
  if (!torch::cuda::is_available()) std::printf("note: this LibTorch has no CUDA: training on the CPU, on the host backend\n");
  return device;
}

}  // namespace conveyor::apps
