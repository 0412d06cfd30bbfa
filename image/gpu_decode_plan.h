// GPU decode plan: which samples a GPU decoder takes, and the host
// twin of what it writes for them.
//
// The split between the CPU workers and the GPU is a function of the sample
// index and the share alone, so output stays bit-identical for a given share
// whatever the worker count or the timing:
//
//   if (gpu_decodable(info, g) && gpu_decodes(index, share)) -> the GPU path
//   else                                                      -> the CPU path
//
// The GPU path decodes the whole JPEG (nvJPEG has no region decode), then
// crops, resizes and flips with resize_math.h's arithmetic, the same function
// its kernel calls. render_gpu_twin() is that path on the host: a full-size
// decode by libjpeg-turbo, then the shared resize. It gives the bits a GPU
// gives for the same decoded pixels; the decoders themselves (libjpeg-turbo's
// and nvJPEG's IDCT and upsampling) may differ by a grey level.
//
// Stateless; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "image/augment.h"
#include "image/decode.h"

namespace conveyor {

// Whether sample `index` goes to the GPU at this share (0 = none, 1 = all
// decodable ones): a hash of the index compared with the share, so about
// share x n of any n samples do, spread evenly over batches and epochs. Throws
// std::invalid_argument for a share outside [0, 1].
bool gpu_decodes(std::uint64_t index, double share);

// Whether the GPU path can take this image with this geometry: a sequential
// Huffman-coded 8-bit JPEG in grayscale or YCbCr (progressive, arithmetic,
// RGB-coded, CMYK and YCCK files, and every other format, stay on the CPU), and
// a crop box inside the image and its window (padding is the CPU path's),
// not flipped vertically (the GPU render mirrors columns only; a sample whose
// RandomVerticalFlip was drawn is decoded and rendered on the CPU).
bool gpu_decodable(const ImageInfo& info, const Geometry& g);

// The GPU path on the host: the geometry's box of a full-size RGB8 decode
// (width x height pixels, row stride `stride` bytes) resized and flipped into
// dst (g.out.height x g.out.width x 3 bytes) through resize_value(), pixel by
// pixel as a kernel would. Requires gpu_decodable()'s box (inside the image,
// no vflip: throws std::invalid_argument for one).
void render_gpu_twin(const unsigned char* full, int width, int height, std::ptrdiff_t stride, const Geometry& g,
                     std::span<unsigned char> dst);

// One sample left to the GPU path: the worker read the file, checked its
// header and planned its geometry; the transfer stage decodes it.
struct DeferredDecode {
  std::string name;                // the sample's name (Dataset::name), for errors
  std::vector<unsigned char> file;  // the whole file
  int width = 0, height = 0;        // the image's, from its header
  Geometry geometry;
};

// The hand-off of deferred samples from the workers to the transfer stage,
// keyed by (epoch, dataset index): a worker put()s while filling the sample,
// the transfer stage take()s it for the batch that holds it. An index that
// appears twice in an epoch (a padded rank) is put and taken twice. Finished
// entries come back through recycle(), so their file buffers are reused (a
// map node per entry is the one allocation left). Thread-safe.
class DeferredDecodes {
 public:
  // An entry to fill (a recycled one when there is one).
  DeferredDecode blank();
  void put(std::uint64_t epoch, std::uint64_t index, DeferredDecode d);
  std::optional<DeferredDecode> take(std::uint64_t epoch, std::uint64_t index);
  void recycle(DeferredDecode d);
  // Entries put and not yet taken (batches in flight, or left by a stopped pipeline).
  std::size_t pending() const;
  // A pipeline that decodes these entries (DevicePipeline with
  // gpu_decode/step.h's GpuDecode step) attaches for its lifetime: attach() drops what
  // an earlier one left; an ImageSource defers only while one is attached,
  // since otherwise nothing would ever write the sample's slot.
  void attach();
  void detach();
  bool attached() const;

 private:
  mutable std::mutex mu_;
  std::multimap<std::pair<std::uint64_t, std::uint64_t>, DeferredDecode> pending_;
  std::vector<DeferredDecode> spare_;
  std::size_t attached_ = 0;
};

}  // namespace conveyor
