// conveyor-soak: the long-run check of docs/reliability.md. Many epochs over
// the embedded default dataset (or --folder) with broken files mixed in and
// --on-error skip, stopped and resumed from state() at random batches, against
// an uninterrupted run of the same settings. Checks, and exits 1 when one fails:
//   - every epoch accounts for every sample: delivered + skipped = dataset size;
//   - the resumed run's batches are bit-identical to the uninterrupted run's
//     (indices, labels, skipped samples and every byte, batch by batch);
//   - with the pipeline stopped (at each resume), open file descriptors and
//     threads are exactly what they were before the first pipeline; at every
//     epoch's end but the last, threads are that plus the workers and the
//     delivery thread, and descriptors at most that plus one file per worker;
//   - the peak resident set (VmHWM) grows after epoch 2 by no more than
//     --max-rss-growth (2%).
//
//   conveyor-soak --epochs 100 --stops 20                 # docs/reliability.md
//   conveyor-soak --images-per-class 20 --epochs 12      # the short CTest run
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/cli.h"
#include "pipeline/pipeline.h"
#include "data/dataset.h"
#include "data/files/image_folder.h"
#include "image/default_dataset.h"
#include "image/image_source.h"

using namespace conveyor;
using namespace conveyor::apps;
namespace fs = std::filesystem;

namespace {

std::size_t count_open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n - 1;  // the iterator's own descriptor
}

std::size_t count_threads() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/task")) ++n;
  return n;
}

struct EpochRow {
  std::uint64_t delivered = 0, skipped = 0;
  double rss_mib = 0, peak_mib = 0;
  std::size_t fds = 0, threads = 0;
};

// The flags. Default: the long run of docs/reliability.md.
struct SoakOptions {
  std::string folder;  // default: the embedded default dataset
  std::size_t images_per_class = 300, epochs = 100, stops = 20, broken = 6, workers = 2, batch = 32;
  int crop = 48;
  std::uint64_t seed = 1;
  double max_growth_pct = 2;
};

void add_flags(CLI::App& app, SoakOptions& o) {
  app.add_option("--folder", o.folder, "dataset folder (default: the embedded default dataset)")->check(CLI::ExistingDirectory);
  app.add_option("--images-per-class", o.images_per_class, "embedded dataset size per class (10 classes)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--epochs", o.epochs, "epochs")->check(CLI::Range(3, 100000));
  app.add_option("--stops", o.stops, "stop-and-resume points, at random batches")->check(CLI::Range(0, 100000));
  app.add_option("--broken", o.broken, "broken files mixed into the dataset")->check(CLI::Range(0, 1000));
  app.add_option("--workers", o.workers, "worker threads")->check(CLI::Range(1, 256));
  app.add_option("--batch", o.batch, "batch size")->check(CLI::Range(1, 4096));
  app.add_option("--crop", o.crop, "RandomResizedCrop size")->check(CLI::Range(8, 1024));
  app.add_option("--seed", o.seed, "seed of the order, the augmentation and the stop points");
  app.add_option("--max-rss-growth", o.max_growth_pct, "percent the RSS may grow after epoch 2")->check(CLI::Range(0.0, 1000.0));
}

// A temporary folder, removed with everything in it when this goes.
struct TempDir {
  fs::path path;
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// The dataset with broken files spread through it, written into tmp: random
// bytes, empty, a cut JPEG, text.
Dataset with_broken_files(const Dataset& good, const SoakOptions& o, const fs::path& tmp, std::mt19937_64& rng) {
  std::vector<fs::path> paths;
  std::vector<std::int64_t> labels;
  std::vector<unsigned char> first;
  read_file(good.path(0), std::uint64_t{1} << 30, first);
  for (std::size_t i = 0, b = 0; i < good.size(); ++i) {
    paths.push_back(good.path(i));
    labels.push_back(good.label(i));
    if (o.broken > 0 && b < o.broken && i % (good.size() / o.broken + 1) == 0) {
      const fs::path p = tmp / ("broken" + std::to_string(b) + ".jpg");
      std::FILE* f = std::fopen(p.c_str(), "wb");
      if (!f) throw std::runtime_error(p.string() + ": cannot write");
      if (b % 4 == 0) for (int k = 0; k < 500; ++k) std::fputc(int(rng() & 255), f);
      if (b % 4 == 2) std::fwrite(first.data(), 1, first.size() / 3, f);
      if (b % 4 == 3) std::fputs("not an image\n", f);
      std::fclose(f);
      paths.push_back(p);
      labels.push_back(0);
      ++b;
    }
  }
  return Dataset(paths, labels);
}

// What the soak run saw.
struct SoakRun {
  std::vector<EpochRow> rows;
  std::size_t base_fds = 0, base_threads = 0;
  std::size_t batches = 0, mismatches = 0, resumes = 0, stopped_checks = 0, stopped_off = 0;
};

// Stop-and-resume points: distinct random batch positions in [1, total).
std::vector<std::size_t> stop_points(std::size_t stops, std::size_t total, std::mt19937_64& rng) {
  std::vector<std::size_t> stop_at;
  std::uniform_int_distribution<std::size_t> pick(1, total - 1);
  for (std::size_t i = 0; i < stops; ++i) stop_at.push_back(pick(rng));
  std::sort(stop_at.begin(), stop_at.end());
  stop_at.erase(std::unique(stop_at.begin(), stop_at.end()), stop_at.end());
  return stop_at;
}

// At the end of an epoch: its memory, descriptors and threads (printed every 10th epoch).
void note_epoch_end(EpochRow& row, std::uint64_t epoch, std::size_t epochs) {
  row.rss_mib = double(current_rss_kib()) / 1024.0;
  row.peak_mib = double(peak_rss_kib()) / 1024.0;
  row.fds = count_open_fds();
  row.threads = count_threads();
  if (epoch % 10 == 0 || epoch + 1 == epochs) {
    std::printf("epoch %3llu: delivered %llu + skipped %llu = %llu, RSS %.1f MiB (peak %.1f), %zu fds, %zu threads\n",
                (unsigned long long)epoch, (unsigned long long)row.delivered, (unsigned long long)row.skipped,
                (unsigned long long)(row.delivered + row.skipped), row.rss_mib, row.peak_mib, row.fds, row.threads);
    std::fflush(stdout);
  }
}

// The soak run: the batches against the reference, stopped and resumed from
// state() at each stop point, with the resources checked while stopped.
SoakRun soak(const Config& cfg, std::size_t n, ImageSource& src, const std::vector<std::uint64_t>& reference,
             const std::vector<std::size_t>& stop_at) {
  SoakRun run;
  run.rows.resize(cfg.epochs);
  run.base_fds = count_open_fds();
  run.base_threads = count_threads();
  std::optional<Pipeline> p;
  p.emplace(cfg, n, StageFunctions{src.filler()});
  std::size_t next_stop = 0;
  while (auto b = p->next()) {
    const Batch& batch_ref = **b;
    if (run.batches >= reference.size() || batch_digest(batch_ref) != reference[run.batches]) ++run.mismatches;
    EpochRow& row = run.rows.at(batch_ref.epoch);
    row.delivered += batch_ref.size();
    row.skipped += batch_ref.skipped.size();
    const bool last = batch_ref.last_in_epoch;
    const std::uint64_t epoch = batch_ref.epoch;
    b.reset();
    ++run.batches;
    if (last) note_epoch_end(row, epoch, cfg.epochs);
    if (next_stop < stop_at.size() && run.batches == stop_at[next_stop]) {
      const PipelineState state = p->state();
      p.reset();  // stop mid-epoch: threads joined, buffers freed
      ++run.stopped_checks;
      if (count_open_fds() != run.base_fds || count_threads() != run.base_threads) ++run.stopped_off;
      p.emplace(cfg, n, StageFunctions{src.filler()}, state);
      ++next_stop;
      ++run.resumes;
    }
  }
  return run;
}

// The checks, one line each; returns the failures.
int check(const SoakRun& r, std::size_t reference_batches, std::size_t n, const SoakOptions& o) {
  int failures = 0;
  const auto check = [&](bool ok, const std::string& what) {
    std::printf("%s %s\n", ok ? "ok:  " : "FAIL:", what.c_str());
    failures += ok ? 0 : 1;
  };
  check(r.batches == reference_batches && r.mismatches == 0,
        std::to_string(r.batches) + " batches after " + std::to_string(r.resumes) + " resumes, " +
            std::to_string(r.mismatches) + " differ from the uninterrupted run");
  std::size_t unaccounted = 0;
  for (const auto& row : r.rows) unaccounted += row.delivered + row.skipped == n ? 0 : 1;
  check(unaccounted == 0, "every epoch: delivered + skipped = " + std::to_string(n) + " (" +
                              std::to_string(unaccounted) + " epochs off)");
  check(r.stopped_off == 0, "with the pipeline stopped (" + std::to_string(r.stopped_checks) + " times): " +
                                std::to_string(r.base_fds) + " descriptors and " + std::to_string(r.base_threads) +
                                " thread(s), as before the first (" + std::to_string(r.stopped_off) + " off)");
  // The last epoch ends after the workers have run out of work and left.
  std::size_t fds_max = 0, threads_off = 0;
  for (std::size_t e = 0; e + 1 < o.epochs; ++e) {
    fds_max = std::max(fds_max, r.rows[e].fds);
    threads_off += r.rows[e].threads == r.base_threads + o.workers + 1 ? 0 : 1;
  }
  check(threads_off == 0, "threads at every epoch's end: " + std::to_string(r.base_threads + o.workers + 1) +
                              " (main + workers + transfer; " + std::to_string(threads_off) + " epochs off)");
  check(fds_max <= r.base_fds + o.workers, "descriptors at epoch ends: at most " + std::to_string(fds_max) + " (limit " +
                                               std::to_string(r.base_fds + o.workers) + ": one file per worker)");
  const auto& rows = r.rows;
  const double growth = rows[2].peak_mib > 0 ? rows[o.epochs - 1].peak_mib / rows[2].peak_mib - 1 : 0;
  char line[200];
  std::snprintf(line, sizeof line, "peak RSS after epoch 2: %.1f MiB, after epoch %zu: %.1f MiB (%+.2f%%, limit %+.0f%%)",
                rows[2].peak_mib, o.epochs - 1, rows[o.epochs - 1].peak_mib, 100 * growth, o.max_growth_pct);
  check(growth * 100 <= o.max_growth_pct, line);
  return failures;
}

int soak_main(const SoakOptions& o) {
  DefaultDatasetOptions d;
  d.images_per_class = o.images_per_class;
  const fs::path root = o.folder.empty() ? ensure_default_dataset(d) : fs::path(o.folder);
  const TempDir tmp{fs::temp_directory_path() / ("conveyor-soak-" + std::to_string(::getpid()))};
  fs::create_directories(tmp.path);
  std::mt19937_64 rng(o.seed);
  const Dataset ds = with_broken_files(dataset_from_folder(root), o, tmp.path, rng);
  const std::size_t n = ds.size();

  ImageConfig ic;
  ic.transforms = {RandomResizedCrop{{o.crop, o.crop}}, RandomHorizontalFlip{}};
  ic.on_error = ErrorPolicy::skip;
  ImageSource src(ds, ic, o.workers);
  Config cfg;
  cfg.batch_size = o.batch;
  cfg.workers = o.workers;
  cfg.epochs = o.epochs;
  cfg.seed = o.seed;
  cfg.sample_bytes = src.sample_bytes();
  std::printf("soak: %zu samples (%zu broken), %zu epochs, batch %zu, %zu workers, %zu stop-and-resume points\n", n,
              std::min(o.broken, n), o.epochs, o.batch, o.workers, o.stops);

  // The uninterrupted run: the hash of every batch.
  std::vector<std::uint64_t> reference;
  {
    Pipeline p(cfg, n, {src.filler()});
    while (auto b = p.next()) reference.push_back(batch_digest(**b));
  }
  std::printf("uninterrupted run: %zu batches\n", reference.size());
  const SoakRun run = soak(cfg, n, src, reference, stop_points(o.stops, reference.size(), rng));
  return check(run, reference.size(), n, o) ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("conveyor-soak: many epochs with broken files, stopped and resumed at random batches");
  SoakOptions o;
  add_flags(app, o);
  CLI11_PARSE(app, argc, argv);
  try {
    return soak_main(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conveyor-soak: %s\n", e.what());
    return 1;
  }
}
