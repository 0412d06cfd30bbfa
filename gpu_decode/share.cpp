#include "gpu_decode/share.h"

#include <algorithm>
#include <chrono>
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

std::string GpuShare::describe(std::size_t workers) const {
  char line[200];
  std::snprintf(line, sizeof line, "share %.2f: CPU %.0f samples/s per worker x %zu, GPU %.0f samples/s (%zu samples)",
                share, cpu_per_worker, workers, gpu, samples);
  return line;
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

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
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
  if (m.share == 0) return {0, {}, 0, "gpu decode: off (auto: none of the first samples is a JPEG the GPU takes)"};
  return {m.share, std::move(decoders), threads, "gpu decode: auto, " + m.describe(workers) + "," + on};
}

namespace {
// The decodable samples among the first 4 x `samples` of the source's dataset
// (epoch 0's random streams, seed 0: which crop each gets matters little to its
// cost), with their files and geometry; `picked` gets their indices. Files that
// cannot be read or parsed are left out (the run reports them by its policy).
std::vector<DeferredDecode> pick_decodable(ImageSource& source, std::size_t samples, std::vector<std::size_t>& picked) {
  const Dataset& d = source.dataset();
  std::vector<DeferredDecode> files;
  ImageDecoder header(source.config().limits);
  for (std::size_t i = 0; i < d.size() && i < 4 * samples && picked.size() < samples; ++i) {
    DeferredDecode e;
    ImageInfo info;
    try {
      source.reader().read(i, e.file);
      info = header.open(e.file);
      Rng rng(0, 0, i);
      e.geometry = source.augment().plan(info.width, info.height, rng);
    } catch (const std::exception&) {
      continue;
    }
    if (!gpu_decodable(info, e.geometry)) continue;
    e.width = info.width;
    e.height = info.height;
    e.name = d.name(i);
    picked.push_back(i);
    files.push_back(std::move(e));
  }
  return files;
}

// Samples/s of `decoders` decoding and rendering `files` all at once, each on
// its own thread and stream, as the feed's threads run them: the median of
// three rounds after one that grows their memory. Files a decoder refuses count
// as none (a run decodes them on the CPU).
double gpu_rate(const std::vector<DeferredDecode>& files, std::size_t sample_bytes,
                std::span<const std::shared_ptr<JpegBatchDecoder>> decoders, Device& device) {
  struct Lane {
    std::unique_ptr<Buffer> slots;
    std::unique_ptr<Stream> stream;
    std::vector<JpegItem> items;
    std::size_t accepted = 0;
    std::exception_ptr error;
  };
  std::vector<Lane> lanes(decoders.size());
  for (Lane& l : lanes) {
    l.slots = device.allocate(sample_bytes * files.size());
    l.stream = device.create_stream();
    for (std::size_t k = 0; k < files.size(); ++k) {
      l.items.push_back(JpegItem{files[k].file, files[k].width, files[k].height, files[k].geometry,
                                 static_cast<std::uint8_t*>(l.slots->data()) + k * sample_bytes});
    }
  }
  const auto round = [&] {  // seconds for every lane's batch, and how many samples they took
    std::vector<std::thread> threads;
    const auto t0 = Clock::now();
    for (std::size_t k = 0; k < lanes.size(); ++k) {
      threads.emplace_back([&, k] {
        Lane& l = lanes[k];
        try {
          const std::vector<std::string> refused = decoders[k]->decode(l.items, *l.stream);
          decoders[k]->render(l.items, refused, *l.stream);
          device.synchronize(*l.stream);
          l.accepted = std::size_t(std::count_if(refused.begin(), refused.end(), [](const std::string& r) { return r.empty(); }));
        } catch (...) {
          l.error = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    std::size_t accepted = 0;
    for (const Lane& l : lanes) {
      if (l.error) std::rethrow_exception(l.error);
      accepted += l.accepted;
    }
    return double(accepted) / std::chrono::duration<double>(Clock::now() - t0).count();
  };
  (void)round();  // grows the decoders' memory
  return median_of({round(), round(), round()});
}
}  // namespace

GpuShare measure_gpu_share(ImageSource& source, std::span<const std::shared_ptr<JpegBatchDecoder>> decoders,
                           Device& device, std::size_t workers, std::size_t samples) {
  if (decoders.empty()) throw std::invalid_argument("measure_gpu_share: no decoder");
  std::vector<std::size_t> picked;
  const std::vector<DeferredDecode> files = pick_decodable(source, samples, picked);
  GpuShare m;
  m.samples = picked.size();
  if (picked.empty()) return m;
  // The CPU path, three rounds: one round's rate varied by a third between
  // identical runs (the first reads the files cold, and a core's clock moves).
  std::vector<unsigned char> out(source.sample_bytes());
  std::vector<double> cpu_rates;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = Clock::now();
    for (const std::size_t i : picked) {  // their headers parsed; a bad body throws, naming the file
      Rng rng(0, 0, i);
      source.render_sample(i, rng, out, 0);
    }
    cpu_rates.push_back(double(picked.size()) / std::chrono::duration<double>(Clock::now() - t0).count());
  }
  m.cpu_per_worker = median_of(cpu_rates);
  m.gpu = gpu_rate(files, source.sample_bytes(), decoders, device);  // 0 when it took none: share 0 below
  m.share = balanced_gpu_share(m.cpu_per_worker, workers, m.gpu);
  return m;
}

}  // namespace conveyor
