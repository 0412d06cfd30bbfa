#include "apps/train_options.h"

namespace conveyor::apps {

void add_train_flags(CLI::App& app, Options& o, TrainOptions& t) {
  add_pipeline_flags(app, o);
  // Host-backend simulation flags: training on the CPU always hands the
  // buffers over, so these would be taken and ignored. Not offered at all;
  // nor --transforms, since the model's input size follows --crop and --model.
  for (const char* flag : {"--link-gbps", "--host-transfer", "--transforms"}) app.remove_option(app.get_option(flag));
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

}  // namespace conveyor::apps
