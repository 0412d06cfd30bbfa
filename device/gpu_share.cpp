#include "device/gpu_share.h"

#include <algorithm>
#include <chrono>
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
  return "; hint: --workers " + std::to_string(cores - 2) + " leaves the transfer thread that feeds the decoder a core (" +
         std::to_string(cores) + " here; docs/cuda.md)";
}

GpuDecodeChoice choose_gpu_decode(std::optional<double> wanted, ImageSource& probe, Device& device, std::size_t workers) {
  if (wanted == 0.0) return {};
  if (probe.augment().has_pixel_ops()) {  // the GPU path renders the crop only: every sample would stay on the CPU
    return {0, nullptr, "gpu decode: off, the CPU workers decode alone: the colour transforms run on the CPU"};
  }
  if (!wanted && device.backend() == Backend::host) {
    return {0, nullptr, "gpu decode: off (auto: the host backend has no GPU; a share runs its CPU twin)"};
  }
  std::string why;
  std::shared_ptr<JpegBatchDecoder> decoder = device.create_jpeg_decoder(probe.config().limits, why);
  if (!decoder) return {0, nullptr, "gpu decode: off, the CPU workers decode alone: " + why};
  const std::string on = " on " + decoder->describe() + gpu_decode_core_hint(workers, std::thread::hardware_concurrency());
  if (wanted) {
    char share[32];
    std::snprintf(share, sizeof share, "%g", *wanted);
    return {*wanted, decoder, std::string("gpu decode: share ") + share + on};
  }
  const GpuShare m = measure_gpu_share(probe, *decoder, device, workers);
  if (m.share == 0) return {0, nullptr, "gpu decode: off (auto: none of the first samples is a JPEG the GPU takes)"};
  return {m.share, decoder, "gpu decode: auto, " + m.describe(workers) + "," + on};
}

GpuShare measure_gpu_share(ImageSource& source, JpegBatchDecoder& decoder, Device& device, std::size_t workers,
                           std::size_t samples) {
  const Dataset& d = source.dataset();
  const std::uint64_t seed = 0;  // which crop each sample gets matters little to its cost
  // The decodable samples among the first 4 x samples, with their files and geometry.
  std::vector<std::size_t> picked;
  std::vector<DeferredDecode> files;
  ImageDecoder header(source.config().limits);
  for (std::size_t i = 0; i < d.size() && i < 4 * samples && picked.size() < samples; ++i) {
    DeferredDecode e;
    ImageInfo info;
    try {
      source.reader().read(i, e.file);
      info = header.open(e.file);
      Rng rng(seed, 0, i);
      e.geometry = source.augment().plan(info.width, info.height, rng);
    } catch (const std::exception&) {
      continue;  // a bad file is the run's to report, by its --on-error policy; the measure leaves it out
    }
    if (!gpu_decodable(info, e.geometry)) continue;
    e.width = info.width;
    e.height = info.height;
    e.name = d.name(i);
    picked.push_back(i);
    files.push_back(std::move(e));
  }
  GpuShare m;
  m.samples = picked.size();
  if (picked.empty()) return m;

  std::vector<unsigned char> out(source.sample_bytes());
  auto t0 = Clock::now();
  for (const std::size_t i : picked) {  // their headers parsed; a bad body throws, naming the file
    Rng rng(seed, 0, i);
    source.render_sample(i, rng, out, 0);
  }
  const double cpu_s = std::chrono::duration<double>(Clock::now() - t0).count();
  m.cpu_per_worker = double(picked.size()) / cpu_s;

  const std::size_t bytes = source.sample_bytes();
  auto slots = device.allocate(bytes * picked.size());
  auto stream = device.create_stream();
  std::vector<JpegItem> items;
  for (std::size_t k = 0; k < files.size(); ++k) {
    items.push_back(JpegItem{files[k].file, files[k].width, files[k].height, files[k].geometry,
                             static_cast<std::uint8_t*>(slots->data()) + k * bytes});
  }
  double gpu_s = 0;
  std::size_t accepted = 0;  // of the timed round: a file the decoder refuses goes to the CPU in a run
  for (int round = 0; round < 2; ++round) {  // the first round grows the decoder's memory
    t0 = Clock::now();
    const std::vector<std::string> refused = decoder.decode(items, *stream);
    decoder.render(items, refused, *stream);
    device.synchronize(*stream);
    gpu_s = std::chrono::duration<double>(Clock::now() - t0).count();
    accepted = std::size_t(std::count_if(refused.begin(), refused.end(), [](const std::string& r) { return r.empty(); }));
  }
  m.gpu = accepted > 0 ? double(accepted) / gpu_s : 0;  // share 0 below when it took none
  m.share = balanced_gpu_share(m.cpu_per_worker, workers, m.gpu);
  return m;
}

}  // namespace conveyor
