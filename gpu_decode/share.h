// The share of samples to decode on the GPU (`--gpu-decode auto`),
// from both sides' rates measured at the start of a run, at the same time
// after the GPU's warm-up, and kept for the run.
//
// The CPU workers decode (1 - s) of the samples at workers x cpu_per_worker
// samples/s, the GPU decoder s of them at gpu samples/s; both finish together
// at s = gpu / (gpu + workers x cpu_per_worker). Samples the GPU cannot take
// (gpu_decodable() false) stay on the CPU whatever s is, so the share applies
// to the rest.
//
//   GpuShare m = measure_gpu_share(images, *decoder, *device, workers);
//   ImageConfig ic; ic.gpu_share = m.share;   // then build the run's ImageSource
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "device/device.h"
#include "gpu_decode/jpeg_batch_decoder.h"
#include "gpu_decode/step.h"
#include "image/image_source.h"

namespace conveyor {

struct GpuShare {
  double cpu_per_worker = 0;  // samples/s of the CPU path on one worker (read, decode, render)
  double gpu = 0;             // samples/s the GPU decoder takes (decode, render, to completion); files it
                              // refuses count as none (a run decodes them on the CPU); 0 if it took none
  double share = 0;           // gpu / (gpu + workers x cpu_per_worker)
  std::size_t samples = 0;    // decodable samples measured on each side
  double warmup_s = 0;        // the GPU side's warm-up before the measure
  double measured_s = 0;      // how long both sides ran together
  // One line: "share 0.42: CPU 812 samples/s per worker x 16, GPU 9400
  // samples/s (64 samples; both sides at once for 1.0 s, after 1.6 s of the GPU's warm-up)".
  std::string describe(std::size_t workers) const;
};

// A run's GPU decode settings (the command's --gpu-decode, Python's
// gpu_decode=): the share and the device's decoder, or share 0 with the one
// line saying why the CPU workers decode alone. `line` is empty when off was
// asked for.
struct GpuDecodeChoice {
  double share = 0;
  // Two per feed thread (GpuDecodeFeed), or fewer when the device would not
  // make more; empty when off.
  std::vector<std::shared_ptr<JpegBatchDecoder>> decoders;
  std::size_t threads = 0;  // the feed's
  std::string line;
  // The transfer stage's settings for `source`, the run's ImageSource built
  // with ImageConfig::gpu_share = share: its deferred store, these decoders and
  // threads, and the source's error policy and limits for the CPU fall-back.
  GpuDecode transfer_for(const ImageSource& source) const {
    return {source.deferred_decodes(), decoders, source.config().on_error, source.config().limits, threads};
  }
};

// The GPU decode feed's threads when none is asked for. Each gets two
// decoders, so it decodes one batch while the delivery thread renders its
// last. Two, as measured on an H200 (docs/benchmarks.md, "GPU decode hybrid"):
// the GPU alone ran 1.3-1.4x its rate with one, the hybrid
// about the same or faster; 4 were slower than 2 on an H200 and an H100.
inline constexpr std::size_t kDefaultGpuDecodeThreads = 2;
inline constexpr std::size_t kMaxGpuDecodeThreads = 64;

// `wanted`: 0 for off, a share in (0, 1], or nullopt for auto (measured with
// measure_gpu_share on `probe`, a source over the run's dataset; off on the
// host backend, which has no GPU). A share asked for on the host backend runs
// its CPU twin (a test path). `threads`: the feed's (1 .. kMaxGpuDecodeThreads;
// 0: kDefaultGpuDecodeThreads).
GpuDecodeChoice choose_gpu_decode(std::optional<double> wanted, ImageSource& probe, Device& device, std::size_t workers,
                                  std::size_t threads = 0);

// The balancing share for those rates; 0 when the GPU rate is 0.
double balanced_gpu_share(double cpu_per_worker, std::size_t workers, double gpu);

// A hint for choose_gpu_decode's line when `workers` leave fewer than two of
// the machine's `cores` free (and it has at least 4): the delivery thread,
// which renders, and the GPU decode feed's threads then wait for a core. On an H100 with 16 cores the
// hybrid ran 1.93x the CPU alone with 14 workers, 1.71x with 16. Empty otherwise.
std::string gpu_decode_core_hint(std::size_t workers, std::size_t cores);

// Times `samples` GPU-decodable samples spread over the source's dataset
// (epoch 0's random streams; evenly spaced indices, others standing in for
// files that cannot be taken). First every decoder of `decoders` decodes and
// renders them, each on its own thread and stream of `device` as the feed runs
// them, until its rate settles (two 0.2 s windows within 5% of each other,
// after 1.5 s; 3 s at most): the device's decoders run slower for their first
// second. Then both sides at once for 1 s, as a run has them: the CPU path
// on min(workers, source.worker_slots()) threads (one worker slot each) and
// the decoders as before; each side's rate is what it completed. Run it
// before the pipeline starts; it takes 2.5-4 s.
// Files that cannot be read or parsed are left out (the run reports them by
// its error policy). Returns share 0 with samples 0 when the dataset has no
// decodable sample among 4 x samples evenly spaced ones, and share 0 when the decoder
// refuses every picked file. Throws what decoding a picked
// file throws ("<file>: <reason>") and what the device throws.
GpuShare measure_gpu_share(ImageSource& source, std::span<const std::shared_ptr<JpegBatchDecoder>> decoders,
                           Device& device, std::size_t workers, std::size_t samples = 64);

}  // namespace conveyor
