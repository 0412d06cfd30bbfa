// The memory guard's estimate (device/memory_budget.h) against what a pipeline
// really takes: for a grid of image shapes (batch 8 to 2^21, samples of 3 bytes
// to 600 KB, with and without normalize), a fresh process (a fork) builds an
// ImageSource and a DevicePipeline on the host backend, as `conveyor run`
// does, takes its first batch, and reports its peak RSS growth (VmHWM after,
// less VmRSS before, the peak reset through /proc/self/clear_refs). Every
// shape whose estimate or growth is at least kFloorMiB must come within 25%
// (an estimate far below the growth is the fault looked for); below it a
// process's fixed costs (thread stacks, the decoders' scratch, the allocator's
// arenas: a few MiB) are a large share of a small figure. Python's arrays=
// shapes are python/tests/test_memory_budget.py's.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include "catch_compat.h"
#include "device/device.h"
#include "device/device_pipeline.h"
#include "device/memory_budget.h"
#include "image/augment.h"
#include "data/dataset.h"
#include "data/files/image_folder.h"
#include "image/default_dataset.h"
#include "image/image_source.h"
#include "temp_dir.h"

using namespace conveyor;

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

constexpr double kMiB = double(1 << 20);
constexpr double kFloorMiB = 64;

// A /proc/self/status field in bytes ("VmRSS:", "VmHWM:"); -1 if missing.
double status_bytes(const char* field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field, 0) == 0) return std::stod(line.substr(std::strlen(field))) * 1024;
  }
  return -1;
}

struct Shape {
  std::size_t batch;
  int crop;
  bool normalize;
};

struct Measured {
  double estimate_mib = 0, grew_mib = 0;
};

// In a child process: the estimate, then the pipeline to its first batch.
Measured measure_here(const std::filesystem::path& folder, const Shape& s) {
  ImageConfig ic;
  ic.transforms = preset_transforms(AugmentPreset::rrc, s.crop);
  Dataset dataset = dataset_from_folder(folder);
  const std::size_t size = dataset.size();
  DeviceConfig dc;
  dc.backend = BackendChoice::host;
  auto device = open_device(dc);
  Config c;
  c.batch_size = s.batch;
  TransferConfig tc;
  std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM from here
  const double before = status_bytes("VmRSS:");
  ImageSource images(std::move(dataset), ic, c.workers);
  c.sample_bytes = images.sample_bytes();
  if (s.normalize) {
    tc.normalize = TransferConfig::Normalization{std::size_t(s.crop), std::size_t(s.crop), 3, Normalize{}, DType::float32};
  }
  Measured m;
  m.estimate_mib = double(estimate_memory(c, size, tc, *device).total()) / kMiB;
  DevicePipeline p(c, size, images.filler(), tc, device);
  auto b = p.next();
  if (!b) throw std::runtime_error("no first batch");
  m.grew_mib = (status_bytes("VmHWM:") - before) / kMiB;
  return m;
}

// Forks, measures in the child, reads the two figures back through a pipe.
std::optional<Measured> measure(const std::filesystem::path& folder, const Shape& s) {
  int fds[2];
  if (::pipe(fds) != 0) return std::nullopt;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    Measured m{-1, -1};
    try {
      m = measure_here(folder, s);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "shape batch %zu crop %d: %s\n", s.batch, s.crop, e.what());
    }
    const bool sent = ::write(fds[1], &m, sizeof m) == ssize_t(sizeof m);
    ::_exit(sent ? 0 : 1);
  }
  ::close(fds[1]);
  Measured m;
  const bool got = pid > 0 && ::read(fds[0], &m, sizeof m) == ssize_t(sizeof m);
  ::close(fds[0]);
  int status = 0;
  if (pid > 0) ::waitpid(pid, &status, 0);
  if (!got || m.estimate_mib < 0) return std::nullopt;
  return m;
}

}  // namespace

TEST_CASE("memory budget: the estimate is within 25% of the peak RSS at the first batch", "[memory]") {
  if (kSanitized) {
    WARN("skipped under a sanitizer: its allocator and shadow memory change the RSS measured");
    return;
  }
  conveyor::test::TempDir tmp;
  DefaultDatasetOptions small;
  small.images_per_class = 2;  // 20 small JPEGs: the pools, not the files, are measured
  write_default_dataset(tmp / "ds", small);
  const Shape shapes[] = {
      {8, 32, false},       // 3 KB samples: below the floor, reported only
      {2097152, 1, false},  // 3-byte samples, a huge batch: the per-slot bookkeeping dominates
      {16384, 16, false},   // 768 B
      {1024, 64, false},    // 12 KB
      {64, 224, false},     // 147 KB
      {32, 448, false},     // 588 KB
      {16, 256, true},      // normalized on the host backend: float32 device slots
  };
  for (const Shape& s : shapes) {
    const auto m = measure(tmp / "ds", s);
    REQUIRE(m);
    const double ratio = m->grew_mib / m->estimate_mib;
    std::printf("memory budget: batch %zu crop %d%s: estimate %.1f MiB, peak RSS growth %.1f MiB (%.2f)\n", s.batch,
                s.crop, s.normalize ? " normalize" : "", m->estimate_mib, m->grew_mib, ratio);
    INFO("batch " << s.batch << " crop " << s.crop << ": estimate " << m->estimate_mib << " MiB, grew " << m->grew_mib << " MiB");
    if (std::max(m->estimate_mib, m->grew_mib) >= kFloorMiB) {
      CHECK(ratio >= 0.75);
      CHECK(ratio <= 1.25);
    }
  }
}
