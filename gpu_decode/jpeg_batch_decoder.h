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

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "device/device.h"
#include "image/augment.h"
#include "image/decode.h"

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
};

// A decoder for `device`'s backend, whose streams it runs on, or null with
// `why` set to one line saying why there is none (on CUDA: no nvJPEG library,
// see gpu_decode/nvjpeg_library.h; a build without CUDA on a CUDA device).
// `limits`: the source's (ImageConfig::limits), for decoders that check them.
// Start-up: it may load a library and allocate. Thread-safe.
std::unique_ptr<JpegBatchDecoder> create_jpeg_decoder(Device& device, const DecodeLimits& limits, std::string& why);

}  // namespace conveyor
