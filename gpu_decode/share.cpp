#include "gpu_decode/share.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <stdexcept>
#include <cstdio>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/rng.h"
#include "image/decode.h"
#include "data/file_system.h"
#include "image/gpu_decode_plan.h"

namespace conveyor {

double balanced_gpu_share(double cpu_per_worker, std::size_t workers, double gpu) {
  if (!(gpu > 0)) return 0;
  const double cpu = cpu_per_worker * double(workers);
  return cpu > 0 ? gpu / (gpu + cpu) : 1;
}


std::string gpu_decode_core_hint(std::size_t workers, std::size_t cores) {
  if (cores < 4 || workers + 2 <= cores) return {};
  return "; hint: --workers " + std::to_string(cores - 2) + " leaves the transfer thread and the GPU decode feed a core (" +
         std::to_string(cores) + " here; docs/cuda.md)";
}

namespace {
// Up to 2 x threads decoders from `device`, stopping at the first it will not
// make (the first one's reason in `why` when there is none).
std::vector<std::shared_ptr<JpegBatchDecoder>> make_decoders(Device& device, const DecodeLimits& limits,
                                                              std::size_t threads, std::string& why) {
  std::vector<std::shared_ptr<JpegBatchDecoder>> decoders;
  for (std::size_t k = 0; k < 2 * threads; ++k) {
    std::string later;
    std::shared_ptr<JpegBatchDecoder> d = create_jpeg_decoder(device, limits, decoders.empty() ? why : later);
    if (!d) break;
    decoders.push_back(std::move(d));
  }
  return decoders;
}

}  // namespace

GpuDecodeChoice choose_gpu_decode(std::optional<double> wanted, ImageSource& probe, Device& device, std::size_t workers,
                                  std::size_t threads) {
  if (wanted == 0.0) return {};
  if (probe.augment().has_pixel_ops()) {  // the GPU path renders the crop only: every sample would stay on the CPU
    return {0, {}, 0, "gpu decode: off, the CPU workers decode alone: the colour transforms run on the CPU"};
  }
  if (!wanted && device.backend() == Backend::host) {
    return {0, {}, 0, "gpu decode: off (auto: the host backend has no GPU; a share runs its CPU twin)"};
  }
  if (threads > kMaxGpuDecodeThreads) {
    throw std::invalid_argument("gpu decode threads: at most " + std::to_string(kMaxGpuDecodeThreads) + ", not " +
                                std::to_string(threads));
  }
  if (threads == 0) threads = kDefaultGpuDecodeThreads;
  std::string why;
  auto decoders = make_decoders(device, probe.config().limits, threads, why);
  if (decoders.empty()) return {0, {}, 0, "gpu decode: off, the CPU workers decode alone: " + why};
  threads = std::min(threads, decoders.size());
  const std::string on = " on " + decoders.front()->describe() + ", " + std::to_string(threads) + " feed thread(s) with " +
                         std::to_string(decoders.size()) + " decoders" +
                         gpu_decode_core_hint(workers, std::thread::hardware_concurrency());
  if (wanted) {
    char share[32];
    std::snprintf(share, sizeof share, "%g", *wanted);
    return {*wanted, std::move(decoders), threads, std::string("gpu decode: share ") + share + on};
  }
  // Measured as the feed runs: one decoder per thread at a time.
  std::vector<std::shared_ptr<JpegBatchDecoder>> measured;
  for (std::size_t t = 0; t < threads; ++t) measured.push_back(decoders[t]);
  const GpuShare m = measure_gpu_share(probe, measured, device, workers);
  if (m.share == 0) {
    return {0, {}, 0,
            m.samples == 0 ? std::string("gpu decode: off (auto: no sample spread over the dataset is a JPEG the GPU path takes)")
                           : "gpu decode: off (auto: the GPU decoder refused all " + std::to_string(m.samples) +
                                 " samples it was given)"};
  }
  return {m.share, std::move(decoders), threads, "gpu decode: auto, " + m.describe(workers) + "," + on};
}

namespace {
// Up to `samples` decodable samples spread over the source's dataset (epoch
// 0's random streams, seed 0: which crop each gets matters little to its
// cost), with their files and geometry; `picked` gets their indices. The
// candidates are n = min(size, 4 x samples) indices evenly spaced over the
// dataset, cut into `samples` cells of consecutive candidates; pass p takes
// the p-th candidate of every cell, so the first pass alone spans the dataset
// and the later ones stand in for files that cannot be taken (a dataset's
// first files may not be typical: the photos' first 64 are 5% smaller than
// their mean). Files that cannot be read or parsed are left out (the run
// reports them by its policy).
std::vector<DeferredDecode> pick_decodable(ImageSource& source, std::size_t samples, std::vector<std::size_t>& picked) {
  const Dataset& d = source.dataset();
  std::vector<DeferredDecode> files;
  ImageDecoder header(source.config().limits);
  const std::size_t n = std::min(d.size(), 4 * samples);
  const std::size_t cells = std::min(n, samples);
  const auto try_candidate = [&](std::size_t k) {
    const std::size_t i = k * d.size() / n;
    DeferredDecode e;
    ImageInfo info;
    try {
      source.reader().read(i, e.file);
      info = header.open(e.file);
      Rng rng(0, 0, i);
      e.geometry = source.augment().plan(info.width, info.height, rng);
    } catch (const std::exception&) {
      return;
    }
    if (!gpu_decodable(info, e.geometry)) return;
    e.width = info.width;
    e.height = info.height;
    e.name = d.name(i);
    picked.push_back(i);
    files.push_back(std::move(e));
  };
  // Cell c holds candidates [c x n / cells, (c + 1) x n / cells): at most 5.
  for (std::size_t pass = 0; picked.size() < samples; ++pass) {
    bool any = false;
    for (std::size_t c = 0; c < cells && picked.size() < samples; ++c) {
      const std::size_t k = c * n / cells + pass;
      if (k >= (c + 1) * n / cells) continue;
      any = true;
      try_candidate(k);
    }
    if (!any) break;  // every candidate tried
  }
  return files;
}

// The GPU side's lanes: each decoder with its own stream and output slots,
// decoding and rendering `files` as one batch per round, as the feed's threads
// run them (one thread per decoder).
struct GpuLanes {
  struct Lane {
    std::unique_ptr<Buffer> slots;
    std::unique_ptr<Stream> stream;
    std::vector<JpegItem> items;
  };
  std::vector<Lane> lanes;
  std::span<const std::shared_ptr<JpegBatchDecoder>> decoders;
  Device& device;

  GpuLanes(const std::vector<DeferredDecode>& files, std::size_t sample_bytes,
           std::span<const std::shared_ptr<JpegBatchDecoder>> d, Device& dev)
      : lanes(d.size()), decoders(d), device(dev) {
    for (Lane& l : lanes) {
      l.slots = device.allocate(sample_bytes * files.size());
      l.stream = device.create_stream();
      for (std::size_t k = 0; k < files.size(); ++k) {
        l.items.push_back(JpegItem{files[k].file, files[k].width, files[k].height, files[k].geometry,
                                   static_cast<std::uint8_t*>(l.slots->data()) + k * sample_bytes});
      }
    }
  }
  // Lane k's round: the samples its decoder took (files it refuses count as
  // none: a run decodes them on the CPU).
  std::size_t round(std::size_t k) {
    Lane& l = lanes[k];
    const std::vector<std::string> refused = decoders[k]->decode(l.items, *l.stream);
    decoders[k]->render(l.items, refused, *l.stream);
    device.synchronize(*l.stream);
    return taken_count(refused);
  }
};

// Runs body(k) for k in [0, n), each on a thread of its own, until each returns; the first error is rethrown.
// A body must end once its caller's stop flag is set (the caller sets it on a timer, and on an error).
template <class Body>
void on_threads(std::size_t n, Body body) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  try {
    for (std::size_t k = 0; k < n; ++k) {
      threads.emplace_back([&, k] {
        try {
          body(k);
        } catch (...) {
          errors[k] = std::current_exception();
        }
      });
    }
  } catch (...) {
    for (auto& t : threads) t.join();  // the bodies end when the caller's stop flag is set
    throw;
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

double seconds(Clock::time_point t0, Clock::time_point t1) { return std::chrono::duration<double>(t1 - t0).count(); }

// The GPU side alone, every lane at once, until its rate settles: the device's
// decoders run slower for their first second or so (docs/benchmarks.md, "GPU
// decode hybrid"; settled after 0.5 s, the rate an H200 gave still varied by
// a fifth between identical runs). Settled: two successive windows of kWindow
// within 5% of each other, after kWarmupMin; at most kWarmupMax. Returns the
// seconds spent.
constexpr double kWindow = 0.2, kWarmupMin = 1.5, kWarmupMax = 3.0;
constexpr double kMeasure = 1.0;  // then both sides at once, for this long
double warm_up(GpuLanes& gpu) {
  const auto t0 = Clock::now();
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> done{0};
  double settled_at = 0;
  std::exception_ptr error;
  std::thread watch([&] {
    std::vector<double> rates;  // per window, over the time that really passed
    std::size_t last = 0;
    Clock::time_point from = t0;
    for (;;) {
      std::this_thread::sleep_for(std::chrono::duration<double>(kWindow));
      const std::size_t now = done.load();
      const Clock::time_point at = Clock::now();
      rates.push_back(double(now - last) / seconds(from, at));
      last = now;
      from = at;
      const double t = seconds(t0, at);
      const std::size_t w = rates.size();
      const bool settled = w >= 2 && std::abs(rates[w - 1] - rates[w - 2]) <= 0.05 * std::max(rates[w - 1], rates[w - 2]);
      if ((settled && t >= kWarmupMin) || t >= kWarmupMax || stop.load()) {
        settled_at = t;
        stop = true;
        return;
      }
    }
  });
  try {
    on_threads(gpu.lanes.size(), [&](std::size_t k) {
      try {
        while (!stop.load()) done += gpu.round(k);
      } catch (...) {
        stop = true;  // the other lanes and the watcher end too
        throw;
      }
    });
  } catch (...) {
    error = std::current_exception();
  }
  stop = true;
  watch.join();
  if (error) std::rethrow_exception(error);
  return settled_at;
}
}  // namespace

std::string GpuShare::describe(std::size_t workers) const {
  char line[300];
  std::snprintf(line, sizeof line,
                "share %.2f: CPU %.0f samples/s per worker x %zu, GPU %.0f samples/s (%zu samples; both sides at once "
                "for %.1f s, after %.1f s of the GPU's warm-up)",
                share, cpu_per_worker, workers, gpu, samples, measured_s, warmup_s);
  return line;
}

GpuShare measure_gpu_share(ImageSource& source, std::span<const std::shared_ptr<JpegBatchDecoder>> decoders,
                           Device& device, std::size_t workers, std::size_t samples) {
  if (decoders.empty()) throw std::invalid_argument("measure_gpu_share: no decoder");
  std::vector<std::size_t> picked;
  const std::vector<DeferredDecode> files = pick_decodable(source, samples, picked);
  GpuShare m;
  m.samples = picked.size();
  if (picked.empty()) return m;
  // Each picked file's CPU render once, on this thread, before anything is
  // timed: a file that cannot be decoded throws here, naming it, and the first
  // reads of the files are not timed.
  std::vector<unsigned char> out(source.sample_bytes());
  for (const std::size_t i : picked) {
    Rng rng(0, 0, i);
    source.render_sample(i, rng, out, 0);
  }
  GpuLanes gpu(files, source.sample_bytes(), decoders, device);
  m.warmup_s = warm_up(gpu);
  // Then both sides at once, as a run has them: the CPU workers (as many as
  // the run's, up to the source's slots) rendering the picked samples over and
  // over, and every GPU lane decoding them; each side's rate from what it
  // completed. The workers' cores are the feed's too, so each side's rate is
  // the one it has beside the other.
  const std::size_t cpu_threads = std::max<std::size_t>(1, std::min(workers, source.worker_slots()));
  struct Count {
    std::size_t samples = 0;
    Clock::time_point last;
  };
  std::vector<Count> cpu(cpu_threads), lanes(gpu.lanes.size());
  std::atomic<bool> stop{false};
  const auto t0 = Clock::now();
  std::thread timer([&] {
    std::this_thread::sleep_for(std::chrono::duration<double>(kMeasure));
    stop = true;
  });
  std::exception_ptr error;
  try {
    on_threads(cpu_threads + gpu.lanes.size(), [&](std::size_t k) {
      struct StopOnError {  // an error ends every side's loop, not only this one's
        std::atomic<bool>& stop;
        ~StopOnError() {
          if (std::uncaught_exceptions() > 0) stop = true;
        }
      } guard{stop};
      if (k < cpu_threads) {
        std::vector<unsigned char> sample(source.sample_bytes());
        for (std::size_t j = 0; !stop.load(); j = (j + 1) % picked.size()) {
          Rng rng(0, 0, picked[j]);
          source.render_sample(picked[j], rng, sample, k);
          ++cpu[k].samples;
          cpu[k].last = Clock::now();
        }
      } else {
        Count& c = lanes[k - cpu_threads];
        while (!stop.load()) {
          c.samples += gpu.round(k - cpu_threads);
          c.last = Clock::now();
        }
      }
    });
  } catch (...) {
    error = std::current_exception();
  }
  stop = true;
  timer.join();
  if (error) std::rethrow_exception(error);
  const auto rate = [&](const Count& c) { return c.samples ? double(c.samples) / seconds(t0, c.last) : 0.0; };
  double cpu_rate = 0;
  for (const Count& c : cpu) cpu_rate += rate(c);
  for (const Count& c : lanes) m.gpu += rate(c);  // 0 when it took none: share 0 below
  m.cpu_per_worker = cpu_rate / double(cpu_threads);
  m.measured_s = seconds(t0, Clock::now());
  m.share = balanced_gpu_share(m.cpu_per_worker, workers, m.gpu);
  return m;
}

}  // namespace conveyor
