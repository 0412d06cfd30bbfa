// GPU decode plan (issue 22): which samples a GPU decoder takes, and the host
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

#include <cstdint>
#include <span>

#include "stages/augment.h"
#include "stages/decode.h"

namespace conveyor {

// Whether sample `index` goes to the GPU at this share (0 = none, 1 = all
// decodable ones): a hash of the index compared with the share, so about
// share x n of any n samples do, spread evenly over batches and epochs. Throws
// std::invalid_argument for a share outside [0, 1].
bool gpu_decodes(std::uint64_t index, double share);

// Whether the GPU path can take this image with this geometry: a sequential
// Huffman-coded 8-bit JPEG in grayscale or YCbCr (progressive, arithmetic,
// RGB-coded, CMYK and YCCK files, and every other format, stay on the CPU), and
// a crop box inside the image (padding is the CPU path's).
bool gpu_decodable(const ImageInfo& info, const Geometry& g);

// The GPU path on the host: the geometry's box of a full-size RGB8 decode
// (width x height pixels, row stride `stride` bytes) resized and flipped into
// dst (g.out.height x g.out.width x 3 bytes) through resize_value(), pixel by
// pixel as a kernel would. Requires gpu_decodable()'s box (inside the image).
void render_gpu_twin(const unsigned char* full, int width, int height, std::ptrdiff_t stride, const Geometry& g,
                     std::span<unsigned char> dst);

}  // namespace conveyor
