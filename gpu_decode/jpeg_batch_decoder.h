// JpegBatchDecoder: the GPU decode path's decoder of whole JPEG files in
// batches, and the factory that picks it by the device's backend: nvJPEG on
// CUDA (gpu_decode/cuda_jpeg_decoder.cu, the library opened at run time:
// gpu_decode/nvjpeg_library.h); on the host backend the host twin
// (gpu_decode/host_jpeg_decoder.cpp: libjpeg-turbo's full decode, then the
// same resize), so the path's logic runs and is tested without a GPU.
//
// Thread safety: one decoder is used by one thread at a time; decoders made
// for one device may run on several threads at once (on CUDA they share the
// device's nvJPEG handle, each with a decode state of its own). Ownership: a
// decoder must die before the Device it was made for. Its working memory grows
// to the largest batch seen and is reused after that.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "device/device.h"
#include "image/augment.h"
#include "image/decode.h"
#include "pipeline/stats.h"  // Clock, elapsed_ns

namespace conveyor {

// One JPEG for the GPU decode path: the whole file is decoded,
// then its geometry's box rendered into dst as uint8 HWC (geometry.out) with
// resize_math.h's arithmetic.
struct JpegItem {
  std::span<const unsigned char> file;
  int width = 0, height = 0;  // the image's, from its header
  Geometry geometry;          // a gpu_decodable() box
  std::uint8_t* dst = nullptr;  // device memory: the sample's place in its slot (set before render())
};

// What a decoder's decode() has spent on the host, summed over its calls since
// it was made, by part: parse (checking each file's header; growing the
// decoder's memory when a batch needs more), setup (preparing for a batch of
// another size), decode (the decoder's own call; on CUDA nvjpegDecodeBatched,
// which parses, stages the bitstreams and submits them), taps (the render's
// tap tables). The GPU decode feed reports them as parts of
// its busy time (the stats table, `--json`), which says where its threads go.
struct DecodeTimes {
  std::uint64_t calls = 0, setups = 0;  // decode() calls; how many of them prepared for a new batch size
  std::uint64_t parse_ns = 0, setup_ns = 0, decode_ns = 0, taps_ns = 0;

  // Each figure's growth since `earlier`, an earlier reading of the same decoder.
  DecodeTimes since(const DecodeTimes& earlier) const {
    return {calls - earlier.calls,       setups - earlier.setups,       parse_ns - earlier.parse_ns,
            setup_ns - earlier.setup_ns, decode_ns - earlier.decode_ns, taps_ns - earlier.taps_ns};
  }
  DecodeTimes& operator+=(const DecodeTimes& o) {
    calls += o.calls;
    setups += o.setups;
    parse_ns += o.parse_ns;
    setup_ns += o.setup_ns;
    decode_ns += o.decode_ns;
    taps_ns += o.taps_ns;
    return *this;
  }
};

// A decoder's DecodeTimes as it decodes on one thread, read from any other.
class DecodeTimeCounters {
 public:
  enum Part { parse, setup, decode, taps };
  void call() { calls_.fetch_add(1, std::memory_order_relaxed); }
  // Adds the time since t0 to `part` (a setup also counts one), and returns
  // now: the next part's t0.
  Clock::time_point add(Part part, Clock::time_point t0) {
    const Clock::time_point now = Clock::now();
    ns_[part].fetch_add(elapsed_ns(t0, now), std::memory_order_relaxed);
    if (part == setup) setups_.fetch_add(1, std::memory_order_relaxed);
    return now;
  }
  DecodeTimes read() const {
    const auto get = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    return {get(calls_), get(setups_), get(ns_[parse]), get(ns_[setup]), get(ns_[decode]), get(ns_[taps])};
  }

 private:
  std::atomic<std::uint64_t> calls_{0}, setups_{0};
  std::atomic<std::uint64_t> ns_[4]{};
};

class JpegBatchDecoder {
 public:
  virtual ~JpegBatchDecoder() = default;
  // One line: what decodes, e.g. "nvJPEG 12.3.4 (hardware backend)".
  virtual std::string describe() const = 0;
  // Decodes every item's file whole into the decoder's own memory, ordered on
  // `stream`. Returns one entry per item: empty, or the decoder's reason for
  // refusing that file. Call it only once the previous render()'s work is done
  // (it reuses that memory), and keep the files alive until this render()'s is.
  virtual std::vector<std::string> decode(std::span<const JpegItem> items, Stream& stream) = 0;
  // Renders each item whose `refused` entry is empty into its dst, on `stream`
  // after the work already there.
  virtual void render(std::span<const JpegItem> items, const std::vector<std::string>& refused, Stream& stream) = 0;
  // What decode() has spent so far (DecodeTimes); thread-safe. Zeros from a
  // decoder that keeps none.
  virtual DecodeTimes times() const { return {}; }
};

// The files a decode() took: its result's empty entries.
inline std::size_t taken_count(const std::vector<std::string>& refused) {
  return std::size_t(std::count_if(refused.begin(), refused.end(), [](const std::string& r) { return r.empty(); }));
}

// A decoder for `device`'s backend, whose streams it runs on, or null with
// `why` set to one line saying why there is none (on CUDA: no nvJPEG library,
// see gpu_decode/nvjpeg_library.h; a build without CUDA on a CUDA device).
// `limits`: the source's (ImageConfig::limits), for decoders that check them.
// Start-up: it may load a library and allocate. Thread-safe.
std::unique_ptr<JpegBatchDecoder> create_jpeg_decoder(Device& device, const DecodeLimits& limits, std::string& why);

}  // namespace conveyor
