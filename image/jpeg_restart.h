// JPEG restart markers, so that decoding costs what the crop covers.
//
// A JPEG's entropy-coded data is one sequential bit stream: to reach a crop,
// a decoder must Huffman-decode every block above it and to its left. A restart
// marker (RSTn) every `interval` MCUs ends the stream's dependencies: each
// interval starts byte-aligned with its DC predictors reset, so it decodes on
// its own. Two halves:
//
//  - add_restart_markers (`conveyor pack`'s default): a lossless re-encode of a
//    sequential Huffman JPEG, the same DCT coefficients and so the same pixels,
//    with a restart marker every restart_interval_for() MCUs (a divisor of the
//    MCUs in a row, so the intervals line up with the rows; about 48 pixels
//    wide: docs/benchmarks.md weighs 32 to 128), through libjpeg's
//    coefficient API as jpegtran's `-restart N` does. Its Huffman tables are
//    the file's AC tables (its AC symbols are unchanged) and DC tables made
//    optimal for the new intervals; jpegtran's `-optimize` would count every
//    coefficient for them, which doubles the time for a fraction of a percent.
//
//  - restart_subset (the decoder, image/decode.cpp): of a JPEG whose intervals
//    line up with its rows, a smaller valid JPEG holding only the intervals
//    that cover a region, renumbered, under the original header with the
//    size patched. libjpeg-turbo decodes it as it would any file; its pixels
//    are the original's wherever the margin keeps the edges' upsampling away
//    (tests/test_jpeg_restart.cpp checks them bit for bit). The markers are
//    found by scanning the entropy data for 0xFF, which costs a small fraction
//    of decoding it, so any file that has them gains, packed or not, and the
//    shard index needs nothing new.
//
// Stateless but for the caller's scratch; one scratch per thread.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "image/decode.h"

namespace conveyor {

// The restart interval add_restart_markers gives a row of `mcus_per_row` MCUs
// of `mcu_width` pixels: the divisor of it nearest, in ratio, to
// kRestartTargetPixels wide (ties to the larger, which costs fewer bytes),
// never under half that: a row of a prime number of MCUs gets one per row.
inline constexpr int kRestartTargetPixels = 48;
int restart_interval_for(int mcus_per_row, int mcu_width);

// `jpeg` re-encoded losslessly with restart markers, or nullopt when it is not a sequential Huffman-coded JPEG
// (progressive and arithmetic-coded files are kept as they are). Every APPn
// and COM segment is carried over (EXIF, ICC, comments; JFIF and Adobe as the
// file had them, so a reader sees the same colour space); pixels are unchanged.
// Throws DecodeError for a file libjpeg cannot read to its end, or one over
// limits.max_pixels (the whole image's coefficients are held at once).
// keep_file_tables=false: every Huffman table optimized by libjpeg, its two
// passes (for tests; the default keeps the file's AC tables and counts only the
// DC differences, about twice as fast and within a fraction of a percent).
std::optional<std::vector<unsigned char>> add_restart_markers(std::span<const unsigned char> jpeg,
                                                              const DecodeLimits& limits = {},
                                                              bool keep_file_tables = true);

// Where a subset's pixels lie in the original image, in whole source pixels.
// x and y are multiples of the MCU's size, so a DCT-scaled decode (M/8) of the
// subset maps to the original's by a whole number of pixels.
struct RestartSubset {
  int x = 0, y = 0, width = 0, height = 0;
};

struct RestartScratch {
  std::vector<std::size_t> marker_ends;  // entropy data offsets just past each RST marker
};

// Into `out`: a JPEG made of the restart intervals of `jpeg` that cover
// `region` widened by `margin` source pixels each side (clamped to the image).
// nullopt, leaving `out` unspecified, when the file has no usable intervals
// (no DRI, intervals that do not divide a row, progressive, arithmetic, more
// than one scan, markers missing or out of sequence, a file cut short above
// the last interval the region needs) or when
// the subset would hold every row from the top and every column: then the
// caller decodes the file as it is. Never throws for bad data.
std::optional<RestartSubset> restart_subset(std::span<const unsigned char> jpeg, Rect region, int margin,
                                            std::vector<unsigned char>& out, RestartScratch& scratch);

}  // namespace conveyor
