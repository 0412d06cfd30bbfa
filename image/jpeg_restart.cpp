#include "image/jpeg_restart.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include <jerror.h>

#include "image/jpeg_errors.h"

namespace conveyor {

namespace {

// The side, in pixels, of the MCU of a scan holding every component, across
// (max_sampling: the largest horizontal sampling factor) or down (the largest
// vertical one): one 8x8 block when the image has one component, else the
// iMCU. The re-encode sets its interval by it and the subset cuts by it, so
// both must count alike.
int mcu_side(int components, int max_sampling) { return components == 1 ? 8 : 8 * max_sampling; }

}  // namespace

int restart_interval_for(int mcus_per_row, int mcu_width) {
  const double target = double(kRestartTargetPixels) / mcu_width;  // in MCUs
  // Nothing under half the target: each marker costs bytes (about 4), so a
  // row of a prime number of MCUs gets one marker, not one per MCU.
  int best = mcus_per_row;
  double best_distance = std::abs(std::log(double(mcus_per_row) / target));
  for (int d = 1; d < mcus_per_row; ++d) {
    if (mcus_per_row % d != 0 || d < target / 2) continue;
    const double distance = std::abs(std::log(double(d) / target));
    if (distance < best_distance || (distance == best_distance && d > best)) {  // ties to the larger
      best = d;
      best_distance = distance;
    }
  }
  return best;
}

// ---- The lossless re-encode: libjpeg's coefficient API, as jpegtran uses it.

namespace {

// Which symbols a Huffman table has a code for.
using SymbolSet = bool[256];

// The re-encoded file, in a buffer this struct owns: jpeg_mem_dest would hand
// its own buffer back only at the end, so an error after it grew would leave
// the caller's pointer on freed memory.
struct Transcode {
  jpeg_decompress_struct in{};  // zeroed: jpeg_destroy_* is a no-op on a struct never created
  jpeg_compress_struct out{};
  detail::JpegErrors errors;
  jpeg_destination_mgr dest{};
  unsigned char* bytes = nullptr;  // malloc'd, grown by realloc; freed here
  std::size_t capacity = 0, size = 0;
  std::uint64_t max_pixels = 0;
  bool keep_file_tables = true;  // false: libjpeg's optimize pass makes every table
  bool kept_tables = false;       // the file's AC tables were in use (set_tables)
  // The AC tables as the first scan found them, and their symbols (a table
  // defined again after the scan replaces libjpeg's copy).
  JHUFF_TBL scan_ac[NUM_HUFF_TBLS]{};
  bool scan_ac_defined[NUM_HUFF_TBLS]{};
  SymbolSet scan_ac_coded[NUM_HUFF_TBLS]{};
  enum class Outcome { written, not_sequential, over_limit } outcome = Outcome::written;
  ~Transcode() {
    jpeg_destroy_compress(&out);
    jpeg_destroy_decompress(&in);
    std::free(bytes);
  }
};

Transcode& transcode_of(j_compress_ptr c) { return *static_cast<Transcode*>(c->client_data); }

extern "C" void transcode_dest_init(j_compress_ptr c) {
  Transcode& t = transcode_of(c);
  c->dest->next_output_byte = t.bytes;
  c->dest->free_in_buffer = t.capacity;
}

extern "C" boolean transcode_dest_grow(j_compress_ptr c) {  // libjpeg wants the whole buffer taken
  Transcode& t = transcode_of(c);
  auto* grown = static_cast<unsigned char*>(std::realloc(t.bytes, t.capacity * 2));
  if (grown == nullptr) ERREXIT1(c, JERR_OUT_OF_MEMORY, 0);  // t.bytes still owned, freed by ~Transcode
  t.bytes = grown;
  c->dest->next_output_byte = t.bytes + t.capacity;
  c->dest->free_in_buffer = t.capacity;
  t.capacity *= 2;
  return TRUE;
}

extern "C" void transcode_dest_term(j_compress_ptr c) {
  Transcode& t = transcode_of(c);
  t.size = t.capacity - c->dest->free_in_buffer;
}

bool is_marker(const jpeg_saved_marker_ptr m, int code, const char* tag, unsigned tag_length) {
  return m->marker == code && m->data_length >= tag_length && std::memcmp(m->data, tag, tag_length) == 0;
}

// ---- Huffman tables without libjpeg's optimize pass. optimize_coding makes
// libjpeg count every coefficient of the image before it writes (jchuff.c's
// htest_one_block), which was half of pack's time. A lossless re-encode needs
// little of it: its AC symbols are the file's own (the same coefficients, and
// the standard codes a block's coefficients one way only), so the file's AC
// tables serve as they are; only the DC differences change (each interval
// starts from a predictor of 0), and they are counted from the blocks' DC
// values alone.

// Whether the file's AC tables, as its scan found them (a table defined again
// after the scan replaces libjpeg's copy), can code the re-encode: the file is one scan
// (a file of one scan a component may define a table slot anew for each, and
// only the last definition is left), each component has a table holding the
// end-of-block symbol (the re-encode ends blocks with it where the file may
// have run out with zero runs, and codes the padding blocks of partial MCUs
// with it), and the decode saw no corrupt data (whose blocks libjpeg fills in
// with symbols the file never had). libjpeg-turbo's encoder does not check
// that a symbol has a code, so this must hold before the tables are kept.
bool file_ac_tables_fit(const Transcode& t) {
  const jpeg_decompress_struct& in = t.in;
  if (in.err->num_warnings != 0 || in.input_scan_number != 1) return false;
  for (int ci = 0; ci < in.num_components; ++ci) {
    const int slot = in.comp_info[ci].ac_tbl_no;
    if (!t.scan_ac_defined[slot] || !t.scan_ac_coded[slot][0x00]) return false;
  }
  return true;
}

constexpr int kDcCategories = 12;  // differences of up to 11 bits, 8-bit samples' limit

// The natural (row-major) index of each zigzag position: JPEG's fixed order
// (libjpeg's jpeg_natural_order is not part of its API).
constexpr unsigned char kZigzag[DCTSIZE2] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33, 40, 48,
    41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23,
    30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};

// Whether the re-encode can code a block's last coefficient (zigzag 63) with
// `ac`. A corrupt file whose run goes past a block's end has libjpeg put the
// value there (jpeg_natural_order's extra entries), with no warning; the
// re-encode then codes it after the zeros since the block's last other
// coefficient, a symbol the file may never have had. Every other symbol of a
// block is the file's own.
bool last_coefficient_fits(const JCOEF* block, const SymbolSet& ac) {
  int before = DCTSIZE2 - 2;
  while (before > 0 && block[kZigzag[before]] == 0) --before;
  const int zeros = DCTSIZE2 - 2 - before;
  const int size = std::bit_width(unsigned(std::abs(block[DCTSIZE2 - 1])));
  return size <= 10 && (zeros < 16 || ac[0xF0]) && ac[(zeros % 16) << 4 | size];
}

// How often each DC category (the bit length of a difference) is coded by a
// re-encode with a restart every `interval` MCUs, per DC table, walking the
// blocks in the order jctrans.c writes them. Padding blocks of a partial MCU
// copy the block before them: a difference of 0. False for a difference over 11
// bits (the optimize pass then rejects the file as it always did), or a last
// coefficient the AC table cannot code (last_coefficient_fits). Only libjpeg
// calls and trivial locals: libjpeg may longjmp out.
bool count_dc(j_decompress_ptr in, jvirt_barray_ptr* coefficients, unsigned interval, const SymbolSet (&ac)[NUM_HUFF_TBLS],
              long (&counts)[NUM_HUFF_TBLS][kDcCategories]) {
  const bool one = in->num_components == 1;  // a non-interleaved scan: one block an MCU
  const jpeg_component_info* first = &in->comp_info[0];
  const JDIMENSION per_row = one ? first->width_in_blocks
                                 : (in->image_width + JDIMENSION(8 * in->max_h_samp_factor) - 1) /
                                       JDIMENSION(8 * in->max_h_samp_factor);
  const JDIMENSION rows = one ? first->height_in_blocks
                              : (in->image_height + JDIMENSION(8 * in->max_v_samp_factor) - 1) /
                                    JDIMENSION(8 * in->max_v_samp_factor);
  int last[MAX_COMPONENTS] = {};
  JBLOCKARRAY blocks[MAX_COMPONENTS] = {};
  unsigned to_restart = interval;
  for (JDIMENSION row = 0; row < rows; ++row) {
    for (int ci = 0; ci < in->num_components; ++ci) {
      const JDIMENSION tall = one ? 1 : JDIMENSION(in->comp_info[ci].v_samp_factor);
      blocks[ci] = (*in->mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(in), coefficients[ci], row * tall, tall, FALSE);
    }
    for (JDIMENSION column = 0; column < per_row; ++column) {
      if (to_restart == 0) {
        std::fill(last, last + MAX_COMPONENTS, 0);
        to_restart = interval;
      }
      --to_restart;
      for (int ci = 0; ci < in->num_components; ++ci) {
        const jpeg_component_info& c = in->comp_info[ci];
        const JDIMENSION wide = one ? 1 : JDIMENSION(c.h_samp_factor), tall = one ? 1 : JDIMENSION(c.v_samp_factor);
        for (JDIMENSION y = 0; y < tall; ++y) {
          for (JDIMENSION x = 0; x < wide; ++x) {
            const JDIMENSION bx = column * wide + x, by = row * tall + y;
            int category = 0;
            if (bx < c.width_in_blocks && by < c.height_in_blocks) {
              const JCOEF* block = blocks[ci][y][bx];
              category = std::bit_width(unsigned(std::abs(block[0] - last[ci])));
              last[ci] = block[0];
              if (category >= kDcCategories) return false;
              if (block[DCTSIZE2 - 1] != 0 && !last_coefficient_fits(block, ac[c.ac_tbl_no])) return false;
            }
            ++counts[c.dc_tbl_no][category];
          }
        }
      }
    }
  }
  return true;
}

// An optimal JPEG Huffman table for the DC categories counted: the code lengths
// Huffman's algorithm gives, with a reserved symbol of least weight that takes
// the all-ones code (which JPEG forbids) and is then dropped, as the
// standard's section K.2 does. Every category gets a code, counted or not, so
// a table never lacks one. Written here because libjpeg's own
// (jpeg_gen_optimal_table) is not part of its API; 13 symbols need no length
// limit (at most 12 bits, of 16 allowed).
void optimal_dc_table(const long (&count)[kDcCategories], JHUFF_TBL& table) {
  constexpr int n = kDcCategories + 1, reserved = kDcCategories;
  long weight[n];
  int group[n], length[n] = {};
  for (int s = 0; s < kDcCategories; ++s) weight[s] = 2 * count[s] + 1;  // every category present
  weight[reserved] = 0;
  for (int s = 0; s < n; ++s) group[s] = s;
  for (int merges = 0; merges < n - 1; ++merges) {  // join the two lightest groups
    int a = -1, b = -1;
    for (int s = 0; s < n; ++s) {
      if (group[s] != s) continue;
      if (a < 0 || weight[s] < weight[a]) {
        b = a;
        a = s;
      } else if (b < 0 || weight[s] < weight[b]) {
        b = s;
      }
    }
    weight[a] += weight[b];
    for (int s = 0; s < n; ++s) {
      if (group[s] == b) group[s] = a;
      if (group[s] == a) ++length[s];
    }
  }
  // The reserved symbol must hold the last (all-ones) code of the longest length.
  const int longest = *std::max_element(length, length + n);
  for (int s = 0; s < kDcCategories && length[reserved] != longest; ++s) {
    if (length[s] == longest) std::swap(length[s], length[reserved]);
  }
  std::memset(table.bits, 0, sizeof table.bits);
  int k = 0;
  for (int l = 1; l <= longest; ++l) {
    for (int s = 0; s < kDcCategories; ++s) {
      if (length[s] != l) continue;
      ++table.bits[l];
      table.huffval[k++] = UINT8(s);
    }
  }
  table.sent_table = FALSE;
}

// The output's Huffman tables from the file's AC tables and DC tables counted
// for its new intervals; false when they cannot be used (the optimize pass
// then makes them).
bool set_tables(Transcode& t, jvirt_barray_ptr* coefficients) {
  if (!file_ac_tables_fit(t)) return false;
  long counts[NUM_HUFF_TBLS][kDcCategories] = {};
  if (!count_dc(&t.in, coefficients, t.out.restart_interval, t.scan_ac_coded, counts)) return false;
  const auto common = reinterpret_cast<j_common_ptr>(&t.out);
  bool dc_made[NUM_HUFF_TBLS] = {}, ac_copied[NUM_HUFF_TBLS] = {};
  for (int ci = 0; ci < t.in.num_components; ++ci) {
    const int dc = t.in.comp_info[ci].dc_tbl_no, ac = t.in.comp_info[ci].ac_tbl_no;
    t.out.comp_info[ci].dc_tbl_no = dc;
    t.out.comp_info[ci].ac_tbl_no = ac;
    if (!dc_made[dc]) {
      t.out.dc_huff_tbl_ptrs[dc] = jpeg_alloc_huff_table(common);
      optimal_dc_table(counts[dc], *t.out.dc_huff_tbl_ptrs[dc]);
      dc_made[dc] = true;
    }
    if (!ac_copied[ac]) {
      JHUFF_TBL* copy = jpeg_alloc_huff_table(common);
      *copy = t.scan_ac[ac];
      copy->sent_table = FALSE;
      t.out.ac_huff_tbl_ptrs[ac] = copy;
      ac_copied[ac] = true;
    }
  }
  return true;
}

// False (with t.errors.message) on a libjpeg error. Only libjpeg calls and
// trivially destructible locals here: a longjmp skips destructors.
bool transcode_safely(Transcode& t, std::span<const unsigned char> jpeg) {
  if (setjmp(t.errors.jump)) return false;
  t.in.err = detail::jpeg_errors_init(t.errors);
  t.out.err = &t.errors.pub;
  jpeg_create_decompress(&t.in);
  jpeg_create_compress(&t.out);
  jpeg_mem_src(&t.in, jpeg.data(), (unsigned long)jpeg.size());
  // Every marker is carried over, as `jpegtran -copy all` does: EXIF (its
  // orientation), ICC profiles and comments stay with the pixels.
  jpeg_save_markers(&t.in, JPEG_COM, 0xFFFF);
  for (int m = 0; m < 16; ++m) jpeg_save_markers(&t.in, JPEG_APP0 + m, 0xFFFF);
  jpeg_read_header(&t.in, TRUE);
  if (t.in.progressive_mode || t.in.arith_code) {
    t.outcome = Transcode::Outcome::not_sequential;
    return true;
  }
  for (int slot = 0; slot < NUM_HUFF_TBLS; ++slot) {  // read_header stops at the first scan's start
    if (t.in.ac_huff_tbl_ptrs[slot] == nullptr) continue;
    t.scan_ac[slot] = *t.in.ac_huff_tbl_ptrs[slot];
    t.scan_ac_defined[slot] = true;
    int symbols = 0;
    for (int length = 1; length <= 16; ++length) symbols += t.scan_ac[slot].bits[length];
    for (int k = 0; k < std::min(symbols, 256); ++k) t.scan_ac_coded[slot][t.scan_ac[slot].huffval[k]] = true;
  }
  // The coefficients of the whole image are held at once: no more of them
  // than the decoder would accept.
  if (std::uint64_t(t.in.image_width) * t.in.image_height > t.max_pixels) {
    t.outcome = Transcode::Outcome::over_limit;
    return true;
  }
  jvirt_barray_ptr* coefficients = jpeg_read_coefficients(&t.in);
  jpeg_copy_critical_parameters(&t.in, &t.out);
  // The JFIF and Adobe segments as the file had them: jpeg_copy_critical_parameters
  // asks for the colour space's usual ones, and an Adobe segment added to a
  // CMYK file that had none would invert its inks for a reader (decode.cpp's too).
  t.out.write_JFIF_header = t.in.saw_JFIF_marker;
  t.out.write_Adobe_marker = t.in.saw_Adobe_marker;
  // jpeg_write_coefficients writes one scan holding every component.
  const int mcu_width = mcu_side(t.in.num_components, t.in.max_h_samp_factor);
  const int mcus_per_row = int((t.in.image_width + JDIMENSION(mcu_width) - 1) / JDIMENSION(mcu_width));
  t.out.restart_interval = unsigned(restart_interval_for(mcus_per_row, mcu_width));
  t.kept_tables = t.keep_file_tables && set_tables(t, coefficients);
  t.out.optimize_coding = !t.kept_tables;
  t.out.client_data = &t;
  t.dest.init_destination = transcode_dest_init;
  t.dest.empty_output_buffer = transcode_dest_grow;
  t.dest.term_destination = transcode_dest_term;
  t.out.dest = &t.dest;
  jpeg_write_coefficients(&t.out, coefficients);
  for (jpeg_saved_marker_ptr m = t.in.marker_list; m != nullptr; m = m->next) {
    if (t.out.write_JFIF_header && is_marker(m, JPEG_APP0, "JFIF", 5)) continue;  // written by libjpeg already
    if (t.out.write_Adobe_marker && is_marker(m, JPEG_APP0 + 14, "Adobe", 5)) continue;
    jpeg_write_marker(&t.out, int(m->marker), m->data, m->data_length);
  }
  jpeg_finish_compress(&t.out);
  jpeg_finish_decompress(&t.in);
  return true;
}

}  // namespace

std::optional<std::vector<unsigned char>> add_restart_markers(std::span<const unsigned char> jpeg, const DecodeLimits& limits,
                                                              bool keep_file_tables) {
  Transcode t;
  t.max_pixels = limits.max_pixels;
  t.keep_file_tables = keep_file_tables;
  // Room for the file as it is and a little: the re-encode is about its size.
  t.capacity = jpeg.size() + jpeg.size() / 8 + 4096;
  t.bytes = static_cast<unsigned char*>(std::malloc(t.capacity));
  if (t.bytes == nullptr) throw std::bad_alloc();
  if (!transcode_safely(t, jpeg)) {
    // The file's own tables can fail where optimized ones do not: libjpeg's
    // encoder refuses a table that lists a symbol twice, which its decoder reads.
    if (t.kept_tables) return add_restart_markers(jpeg, limits, false);
    throw DecodeError(std::string("JPEG: ") + t.errors.message);
  }
  if (t.outcome == Transcode::Outcome::not_sequential) return std::nullopt;
  if (t.outcome == Transcode::Outcome::over_limit) {
    throw DecodeError("JPEG header claims " + std::to_string(t.in.image_width) + "x" + std::to_string(t.in.image_height) +
                      " pixels, over the limit of " + std::to_string(limits.max_pixels) + " (max_pixels)");
  }
  return std::vector<unsigned char>(t.bytes, t.bytes + t.size);
}

// ---- The subset. The header is read here by hand, not through libjpeg: the
// subset needs byte offsets (the SOF's size fields, the entropy data's start)
// and the restart markers' positions, none of which libjpeg's API gives.

namespace {

unsigned be16(const unsigned char* p) { return unsigned(p[0]) << 8 | p[1]; }

struct Header {
  std::size_t sof_payload = 0;  // offset of the SOF segment's precision byte
  std::size_t entropy = 0;      // first byte after the SOS segment
  int width = 0, height = 0, components = 0, scan_components = 0;
  int max_h = 1, max_v = 1;
  unsigned restart_interval = 0;
};

// The segments up to the first SOS. nullopt for anything but one baseline or
// extended sequential Huffman frame (SOF0/SOF1) of 8-bit samples.
std::optional<Header> read_header(std::span<const unsigned char> b) {
  if (b.size() < 4 || b[0] != 0xFF || b[1] != 0xD8) return std::nullopt;
  Header h;
  bool have_frame = false;
  std::size_t i = 2;
  for (;;) {
    if (i >= b.size() || b[i] != 0xFF) return std::nullopt;
    while (i < b.size() && b[i] == 0xFF) ++i;  // fill bytes
    if (i + 3 > b.size()) return std::nullopt;
    const unsigned marker = b[i++];
    if (marker < 0xC0 || marker == 0xC8) return std::nullopt;  // a stuffed zero, or a reserved marker
    const std::size_t length = be16(b.data() + i);
    if (length < 2 || i + length > b.size()) return std::nullopt;
    const unsigned char* p = b.data() + i + 2;
    const std::size_t n = length - 2;
    if (marker == 0xC0 || marker == 0xC1) {  // SOF0, SOF1: sequential, Huffman
      if (have_frame || n < 6 || p[0] != 8) return std::nullopt;
      h.sof_payload = i + 2;
      h.height = int(be16(p + 1));
      h.width = int(be16(p + 3));
      h.components = p[5];
      if (h.width < 1 || h.height < 1 || h.components < 1 || h.components > 4 || n < 6 + 3 * std::size_t(h.components)) {
        return std::nullopt;
      }
      for (int c = 0; c < h.components; ++c) {
        const int hs = p[7 + 3 * c] >> 4, vs = p[7 + 3 * c] & 15;
        if (hs < 1 || hs > 4 || vs < 1 || vs > 4) return std::nullopt;
        h.max_h = std::max(h.max_h, hs);
        h.max_v = std::max(h.max_v, vs);
      }
      have_frame = true;
    } else if (marker >= 0xC2 && marker <= 0xCF && marker != 0xC4) {
      return std::nullopt;  // progressive, lossless, hierarchical, arithmetic (and its DAC)
    } else if (marker == 0xDD) {  // DRI
      if (n < 2) return std::nullopt;
      h.restart_interval = be16(p);
    } else if (marker == 0xDA) {  // SOS
      if (!have_frame || n < 1) return std::nullopt;
      h.scan_components = p[0];
      h.entropy = i + length;
      return h;
    } else if (marker == 0xD8 || marker == 0xD9 || (marker >= 0xD0 && marker <= 0xD7)) {
      return std::nullopt;  // a marker without a length, out of place in a header
    }
    i += length;
  }
}

}  // namespace

std::optional<RestartSubset> restart_subset(std::span<const unsigned char> b, Rect region, int margin,
                                            std::vector<unsigned char>& out, RestartScratch& scratch) {
  const std::optional<Header> found = read_header(b);
  if (!found) return std::nullopt;
  const Header& h = *found;
  // One scan holding every component, as the re-encode writes.
  if (h.restart_interval == 0 || h.scan_components != h.components) return std::nullopt;
  const int mcu_w = mcu_side(h.components, h.max_h), mcu_h = mcu_side(h.components, h.max_v);
  const int mcus_per_row = (h.width + mcu_w - 1) / mcu_w, mcu_rows = (h.height + mcu_h - 1) / mcu_h;
  const int k = int(h.restart_interval);
  if (mcus_per_row % k != 0) return std::nullopt;
  const int per_row = mcus_per_row / k;  // intervals in a row of MCUs
  const std::size_t total = std::size_t(per_row) * std::size_t(mcu_rows);

  const int x0 = std::max(0, region.x - margin), x1 = std::min(h.width, region.x + region.w + margin);
  const int y0 = std::max(0, region.y - margin), y1 = std::min(h.height, region.y + region.h + margin);
  if (x0 >= x1 || y0 >= y1) return std::nullopt;
  const int c0 = x0 / (mcu_w * k), c1 = (x1 + mcu_w * k - 1) / (mcu_w * k);  // intervals across
  const int r0 = y0 / mcu_h, r1 = (y1 + mcu_h - 1) / mcu_h;                  // MCU rows
  if (r0 == 0 && c0 == 0 && c1 == per_row) return std::nullopt;  // the decoder skips nothing of it

  // Where each interval ends, as far as the last one needed: the restart
  // markers in order, RST0..RST7 repeating, then the scan's end (EOI).
  const std::size_t last = std::size_t(r1 - 1) * std::size_t(per_row) + std::size_t(c1 - 1);
  auto& ends = scratch.marker_ends;  // ends[j]: just past the marker that ends interval j
  ends.clear();
  std::size_t pos = h.entropy;
  while (ends.size() <= last) {
    const void* ff = pos < b.size() ? std::memchr(b.data() + pos, 0xFF, b.size() - pos) : nullptr;
    if (ff == nullptr) return std::nullopt;  // cut short
    const std::size_t at = std::size_t(static_cast<const unsigned char*>(ff) - b.data());
    if (at + 1 >= b.size()) return std::nullopt;
    const unsigned code = b[at + 1];
    if (code == 0x00 || code == 0xFF) {  // a stuffed 0xFF data byte, or a fill byte
      pos = at + (code == 0x00 ? 2 : 1);
      continue;
    }
    const bool rst = code >= 0xD0 && code <= 0xD7;
    if (rst ? (ends.size() + 1 >= total || code - 0xD0 != ends.size() % 8) : ends.size() + 1 != total) {
      return std::nullopt;  // a marker out of sequence, or too few or too many of them
    }
    ends.push_back(at + 2);
    pos = at + 2;
  }

  out.assign(b.begin(), b.begin() + std::ptrdiff_t(h.entropy));
  RestartSubset s;
  s.x = c0 * k * mcu_w;
  s.y = r0 * mcu_h;
  s.width = c1 == per_row ? h.width - s.x : (c1 - c0) * k * mcu_w;
  s.height = r1 == mcu_rows ? h.height - s.y : (r1 - r0) * mcu_h;
  unsigned char* sof = out.data() + h.sof_payload;
  sof[1] = (unsigned char)(s.height >> 8);
  sof[2] = (unsigned char)(s.height & 0xFF);
  sof[3] = (unsigned char)(s.width >> 8);
  sof[4] = (unsigned char)(s.width & 0xFF);
  unsigned written = 0;
  for (int r = r0; r < r1; ++r) {
    for (int c = c0; c < c1; ++c) {
      const std::size_t j = std::size_t(r) * std::size_t(per_row) + std::size_t(c);
      const std::size_t begin = j == 0 ? h.entropy : ends[j - 1], end = ends[j] - 2;
      if (written > 0) out.insert(out.end(), {0xFF, (unsigned char)(0xD0 + (written - 1) % 8)});
      out.insert(out.end(), b.begin() + std::ptrdiff_t(begin), b.begin() + std::ptrdiff_t(end));
      ++written;
    }
  }
  out.insert(out.end(), {0xFF, 0xD9});
  return s;
}

}  // namespace conveyor
