// libFuzzer target: the image decode entry, as a worker runs it: bytes ->
// sniff -> header with limits -> RandomResizedCrop plan -> ROI/scaled decode ->
// resize + flip into a slot; and `conveyor pack`'s lossless re-encode of the
// same bytes (image/jpeg_restart.h), whose output is decoded the same way.
// Corrupt input must end in DecodeError; anything
// else (a crash, a sanitizer report, another exception, a leak, an allocation
// over -malloc_limit_mb) is a finding.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "image/augment.h"
#include "image/decode.h"
#include "image/image_ops.h"
#include "image/jpeg_restart.h"
#include "image/resize.h"

using namespace conveyor;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // 4 MP keeps each run fast; the limit path is the same as with 64 MP.
  static ImageDecoder decoder(DecodeLimits{4'000'000, std::uint64_t{64} << 20});
  static const Augment augment({RandomResizedCrop{{24, 32}}, RandomHorizontalFlip{}});
  static ResizeScratch scratch;
  static std::vector<unsigned char> slot(24 * 32 * 3);
  const auto decode_into_slot = [&](std::span<const unsigned char> bytes) {
    const ImageInfo info = decoder.open(bytes);
    Rng rng(size, 0, size > 0 ? data[0] : 0);
    const Geometry g = augment.plan(info.width, info.height, rng);
    const DecodeRequest want = decode_request(g, info.width, info.height);
    const DecodedView view = decoder.decode(want.region, want.min_scale);
    render(view, g, info.width, info.height, 0, slot, scratch);
    return info.format;
  };
  const std::span<const unsigned char> bytes(data, size);
  try {
    if (decode_into_slot(bytes) != ImageFormat::jpeg) return 0;
    if (const auto marked = add_restart_markers(bytes, DecodeLimits{4'000'000, std::uint64_t{64} << 20})) {
      decode_into_slot(*marked);
    }
  } catch (const DecodeError&) {
    // the expected outcome for bad bytes
  }
  return 0;
}
