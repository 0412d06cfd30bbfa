// conveyor: run, measure and check an image input pipeline from the command line.
//
//   conveyor run                      the embedded default dataset, default settings
//   conveyor run --folder train/ --workers 8 --batch 256 --epochs 2 --compute-ms 40
//   conveyor bench --json out.json    throughput only, as figures
//   conveyor inspect --folder train/  decode every sample once; list what fails
//   conveyor make-dataset --out DIR   write the embedded default dataset
//   conveyor run --config configs/imagenet.toml --workers 16   (flags override the file)
//
// Exit status: 0 on success; 1 when a run fails or inspect finds unreadable
// files; 2 for bad input (unknown flag, bad value, missing file, malformed
// list line, unknown config key), always with one line on stderr; 130 or 143
// when SIGINT or SIGTERM ended `run` or `bench` early (after the step in
// progress, with the figures so far printed and the trace written).
//
// This file only dispatches: each subcommand is a part of its own, found by
// name: run and bench (apps/run.h: streaming, run_resident.cpp,
// run_serial.cpp), sweep (apps/sweep.h), inspect (apps/inspect.h), pack
// (apps/pack.h: WebDataset shards, their index and manifest), the trace
// (apps/trace.h), the figures and JSON (apps/report.h) and the one epoch loop
// (apps/epochs.h); the flags are apps/options.h; train is conveyor-train
// (apps/train.cpp).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/cli.h"
#include "conveyor/version.h"
#include "apps/inspect.h"
#include "apps/options.h"
#include "apps/pack.h"
#include "apps/run.h"
#include "apps/sweep.h"
#include "apps/toml_config.h"
#include "image/default_dataset.h"

using namespace conveyor;
using namespace conveyor::apps;

namespace {

// `conveyor train` is the conveyor-train program, built next to this one when
// LibTorch is found: a program of its own so that the other subcommands start
// without loading LibTorch (about 0.5 s).
int exec_train(int argc, char** argv) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto train = (ec ? std::filesystem::path(argv[0]) : self).parent_path() / "conveyor-train";
  if (!std::filesystem::exists(train)) {
    std::fprintf(stderr,
                 "conveyor: train: this build has no LibTorch (%s not built); install libtorch-dev and configure "
                 "with -DCONVEYOR_TORCH=ON (./go test does both)\n",
                 train.c_str());
    return 2;
  }
  std::vector<char*> args{const_cast<char*>(train.c_str())};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  ::execv(train.c_str(), args.data());
  std::fprintf(stderr, "conveyor: train: cannot run %s: %s\n", train.c_str(), std::strerror(errno));
  return 1;
}


constexpr const char* kSubcommands = "run, bench, sweep, inspect, pack, make-dataset, train";

// argv[1] when it is neither a flag nor a subcommand: named, with the valid ones.
void check_subcommand(int argc, char** argv, const CLI::App& app) {
  if (argc < 2) throw UsageError(std::string("no subcommand: give one of ") + kSubcommands + " (conveyor --help)");
  const std::string first = argv[1];
  if (first.starts_with("-")) return;  // --help, --version: CLI11's
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == first) return;
  }
  throw UsageError("unknown subcommand '" + first + "': give one of " + kSubcommands + " (conveyor --help)");
}

// The subcommand's word: the first argument after a leading --config FILE
// (`conveyor --config c.toml run` and `conveyor run --config c.toml` alike).
std::string subcommand_word(int argc, char** argv) {
  int i = 1;
  while (i < argc) {
    const std::string_view a = argv[i];
    if (a == "--config") {
      i += 2;
    } else if (a.starts_with("--config=")) {
      i += 1;
    } else {
      break;
    }
  }
  return i < argc ? argv[i] : "";
}

struct Subcommands {
  CLI::App *run, *bench, *sweep, *inspect, *pack, *make;
};

// Every subcommand with its flags, parsed into o.
Subcommands add_subcommands(CLI::App& app, Options& o) {
  app.option_defaults()->always_capture_default();  // every subcommand's --help shows each flag's default
  app.set_version_flag("--version", std::string("conveyor ") + CONVEYOR_VERSION_STRING);
  app.require_subcommand(1);
  app.footer(
      "Each subcommand lists its own flags: conveyor run --help\n"
      "Examples:\n"
      "  conveyor run                                      embedded default dataset\n"
      "  conveyor run --folder train/ --workers 8 --batch 256 --compute-ms 40\n"
      "  conveyor bench --config configs/imagenet.toml --json bench.json\n"
      "  conveyor sweep --workers 1,2,4 --host-queue 1,2,8 --csv sweep.csv --plot sweep.png\n"
      "  conveyor inspect --list train.txt\n"
      "  conveyor pack --folder train/ --out shards/ --shard-mb 256\n"
      "  conveyor train --model lenet --epochs 5 --checkpoint lenet.pt\n"
      "  conveyor make-dataset --out /tmp/shapes");
  Subcommands s;
  s.run = app.add_subcommand("run", "run the pipeline with a consumer for --epochs; per-epoch stats");
  s.bench = app.add_subcommand("bench", "throughput only: a table, and --json FILE with the figures");
  s.sweep = app.add_subcommand("sweep", "a grid of runs: one row per point (images/s, consumer idle %, peak RSS)");
  s.inspect = app.add_subcommand("inspect", "decode every sample once; counts by format, size, colour; unreadable files");
  s.pack = app.add_subcommand("pack", "write the dataset as WebDataset tar shards (KEY.jpg + KEY.cls) in --out DIR");
  s.make = app.add_subcommand("make-dataset", "write the embedded default dataset to --out DIR");
  app.add_subcommand("train", "train LeNet-5 or a small ResNet on the batches with LibTorch (conveyor train --help)");
  add_sweep_flags(*s.sweep, o);  // first: add_pipeline_flags leaves a flag sweep already has alone
  for (auto* sub : {s.run, s.bench, s.sweep}) {
    add_pipeline_flags(*sub, o);
    add_run_flags(*sub, o);
  }
  for (auto* sub : {s.run, s.bench}) sub->add_option("--json", o.json, "write the figures (and every skipped sample) as JSON");
  add_pipeline_flags(*s.inspect, o);
  add_dataset_flags(*s.pack, o);
  s.pack->add_option("--out", o.out, "folder for the shards (new, or empty); written in OUT/.partial-PID, moved up when whole")
      ->required();
  s.pack->add_option("--shard-mb", o.shard_mb, "start a new shard before one would pass this many MiB")
      ->check(CLI::Range(1, 1 << 20));
  s.pack->add_option("--max-side", o.max_side,
                     "lossy, opt-in: re-encode each image larger than N pixels on its longest side as a JPEG of that "
                     "size (FFCV's max_resolution); smaller ones are kept as they are")
      ->check(CLI::Range(1, 1 << 16));
  s.pack->add_option("--quality", o.quality, "with --max-side: the re-encoded JPEGs' quality, 1..100 (default 90)")
      ->check(CLI::Range(1, 100));
  s.pack->add_option("--raw", o.raw,
                     "store every image as decoded RGB pixels (a binary PPM, read without decoding; FFCV's RAW), "
                     "resized first when larger than N pixels on its longest side: for small images (CIFAR-like), "
                     "where decoding costs more than reading")
      ->check(CLI::Range(1, 1 << 16));
  s.pack->add_flag("--original-bytes", o.original_bytes,
                   "store each JPEG's bytes as they are; by default sequential JPEGs are re-encoded losslessly (the "
                   "same pixels) with restart markers, so that a crop decodes only the part of the file it covers");
  for (auto* sub : {s.run, s.bench, s.sweep, s.inspect, s.pack, s.make}) sub->fallthrough();  // `conveyor run --config F`
  s.make->add_option("--out", o.out, "folder to write (must not exist)")->required();
  s.make->add_option("--images-per-class", o.images_per_class, "images in each of the 10 classes")
      ->check(CLI::Range(1, 1000000));
  return s;
}

// Written into a hidden folder beside --out and renamed to it when whole: a
// signal, a full disk or a crash never leaves an --out that reads as a
// smaller dataset (a killed run leaves only the hidden folder).
int make_dataset(const Options& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (o.out.empty()) throw UsageError("--out: an empty path");
  fs::path out = fs::path(o.out).lexically_normal();
  if (!out.has_filename() && out.has_parent_path()) out = out.parent_path();  // "ds/"
  for (const fs::path& p : {fs::path(o.out), out}) {  // "FILE/" does not exist, "FILE" does
    if (fs::exists(fs::symlink_status(p, ec))) throw UsageError("--out " + o.out + ": already exists");
  }
  const fs::path tmp = out.parent_path() / ("." + out.filename().string() + ".partial-" + std::to_string(::getpid()));
  DefaultDatasetOptions d;
  d.images_per_class = o.images_per_class;
  catch_interrupts();
  d.cancelled = [] { return interrupt_signal() != 0; };
  try {
    fs::remove_all(tmp);
    write_default_dataset(tmp, d);
    // No replace: rename(2) would put the set over an empty folder made meanwhile.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), RENAME_NOREPLACE) != 0) {
      const int err = errno;
      if (err != EINVAL && err != ENOSYS) throw fs::filesystem_error("rename", tmp, out, std::error_code(err, std::generic_category()));
      // A file system without RENAME_NOREPLACE: look, then rename (a narrow race).
      if (fs::exists(fs::symlink_status(out, ec))) throw fs::filesystem_error("rename", tmp, out, std::make_error_code(std::errc::file_exists));
      fs::rename(tmp, out);
    }
  } catch (const DatasetCancelled& c) {
    fs::remove_all(tmp, ec);
    const int sig = interrupt_signal();
    std::printf("make-dataset: interrupted by %s after %zu of %zu images; nothing written\n", signal_word(sig),
                c.written, c.total);
    return 128 + sig;
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw std::runtime_error("make-dataset: --out " + o.out + ": " + e.code().message());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  std::printf("wrote the default dataset (%zu classes) to %s\n", default_dataset_classes().size(), o.out.c_str());
  return 0;
}

// --resident decodes each image once, with Resize + CenterCrop: a setting that
// asks for something else per epoch or per sample cannot apply to it.
void check_resident(const Options& o, const CLI::App& sub) {
  if (!o.resident) return;
  if (o.serial) throw UsageError("--resident: not with --serial (a resident set has no samples to fill per batch)");
  if (o.synthetic_ms > 0) throw UsageError("--resident: not with --synthetic-ms (the set is decoded once, for real)");
  if (sub.count("--augment") > 0 && o.augment != Augmentation::center) {
    throw UsageError("--resident: decodes each image once with Resize + CenterCrop (--augment center), not --augment " +
                     std::string(name_of(kAugments, o.augment)));
  }
}

// The parsed subcommand, its inputs checked first: every output file before
// the run rather than found unwritable after it.
int dispatch(const Subcommands& s, const Options& o) {
  check_shard(o);
  if (*s.make) return make_dataset(o);
  if (*s.pack) return pack(o);
  check_outputs(o);
  check_writable("--trace", o.trace);
  check_writable("--json", o.json);
  check_writable("--csv", o.csv);
  check_writable("--plot", o.plot);
  check_normalize(o);  // one usage error, not a failed row per sweep point
  if ((o.synthetic_stall_ms > 0 || o.synthetic_stall_every > 0) &&
      (o.synthetic_ms <= 0 || o.synthetic_stall_ms <= 0 || o.synthetic_stall_every == 0)) {
    throw UsageError("--synthetic-stall-ms and --synthetic-stall-every: both, and with --synthetic-ms");
  }
  if ((o.compute_stall_ms > 0) != (o.compute_stall_every > 0)) {
    throw UsageError("--compute-stall-ms and --compute-stall-every: both or neither");
  }
  (void)transforms_of(o);
  check_device_transforms(o);
  for (const CLI::App* sub : {s.run, s.bench, s.sweep}) {
    if (sub->parsed()) check_resident(o, *sub);
  }
  (void)gpu_decode_share(o);
  if (*s.inspect) return inspect(o);
  if (*s.sweep) return sweep(o);
  return run_command(o, s.bench->parsed() ? RunKind::bench : RunKind::run);
}

}  // namespace

int main(int argc, char** argv) {
  // conveyor-train holds its own: it must see a closed stdout as closed.
  if (argc > 1 && std::string_view(argv[1]) == "train") return exec_train(argc, argv);
  hold_standard_fds();
  CLI::App app{"conveyor: an input pipeline for C++ training code (decode workers -> delivery thread, which copies to the device -> your step)"};
  Options o;
  const Subcommands subcommands = add_subcommands(app, o);
  // --config is the program's (CLI11 reads config files for the top-level app
  // only); its keys set the flags of the subcommand named first.
  const std::string section = subcommand_word(argc, argv);
  add_config_option(app, section, section, argc, argv);
  strict_values(app);
  try {
    check_subcommand(argc, argv, app);
    shard_from_environment(o);
    app.parse(argc, argv);
    if (*subcommands.sweep) refuse_empty_list_elements(*subcommands.sweep, argc, argv);
    o.config = config_file(app);
    return finish_stdout("conveyor", dispatch(subcommands, o));
  } catch (...) {
    return exit_status("conveyor", app, section);
  }
}
