// The GPU decode render's tap table layout (gpu_decode/taps_layout.h), checked
// without a GPU: every int32 array 4-aligned, every axis block 16-aligned, no
// two arrays overlapping, and the buffer's size covering them all, for odd and
// even output sizes and tap counts. An odd output width with make_resize_taps'
// odd tap count once put the y tables' int32 arrays 2 bytes off alignment,
// which faults on the GPU (cudaErrorMisalignedAddress) and ends the context.
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "catch_compat.h"

#include "gpu_decode/taps_layout.h"
#include "image/resize_math.h"

using namespace conveyor;

static_assert(taps_item_layout(0, 63, 3, 61, 3).y.first % 16 == 0);
static_assert(taps_axis_layout(1, 1, 1).first == 16);
static_assert(taps_axis_layout(32, 0, 5).end == 32);

namespace {

// One axis's arrays at `a` for `outputs` outputs and `taps` taps each: aligned,
// in order, without overlap, within [a.first, a.end).
void check_axis(const TapsAxisLayout& a, std::size_t at, std::size_t outputs, std::size_t taps) {
  CAPTURE(at, outputs, taps, a.first, a.count, a.weights, a.end);
  REQUIRE(a.first >= at);
  REQUIRE(a.first - at < kTapsBlockAlign);
  REQUIRE(a.first % 16 == 0);
  REQUIRE(a.count % alignof(std::int32_t) == 0);
  REQUIRE(a.weights % alignof(std::int16_t) == 0);
  REQUIRE(a.count == a.first + outputs * sizeof(std::int32_t));
  REQUIRE(a.weights == a.count + outputs * sizeof(std::int32_t));
  const std::size_t weights_end = a.weights + outputs * taps * sizeof(std::int16_t);
  REQUIRE(a.end >= weights_end);
  REQUIRE(a.end - weights_end < kTapsBlockAlign);
  REQUIRE(a.end % 16 == 0);
}

}  // namespace

TEST_CASE("the old packing put the y tables off alignment for an odd width and odd taps", "[taps-layout]") {
  // x: first and count (63 x 4 bytes each), weights 63 x 3 x 2 bytes: y's int32s started 2 bytes off.
  const std::size_t unrounded = 63 * 4 * 2 + 63 * 3 * 2;
  REQUIRE(unrounded % 4 == 2);
  REQUIRE(taps_item_layout(0, 63, 3, 61, 3).y.first == taps_align_up(unrounded));
}

TEST_CASE("tap table blocks: every int32 array 4-aligned, every block 16-aligned, the total covering all",
          "[taps-layout]") {
  const std::size_t sizes[] = {1, 2, 3, 5, 7, 61, 63, 64, 65, 223, 224, 225};
  const std::size_t taps[] = {1, 2, 3, 5, 7, 9, 129};
  for (const std::size_t w : sizes) {
    for (const std::size_t h : sizes) {
      for (const std::size_t tx : taps) {
        for (const std::size_t ty : taps) {
          // Three items back to back, as render() lays out a batch.
          std::size_t at = 0;
          for (int item = 0; item < 3; ++item) {
            const TapsItemLayout l = taps_item_layout(at, w, tx, h, ty);
            check_axis(l.x, at, w, tx);
            check_axis(l.y, l.x.end, h, ty);
            REQUIRE(l.y.first == l.x.end);
            REQUIRE(l.end == l.y.end);
            at = l.end;
          }
          REQUIRE(at % 16 == 0);
        }
      }
    }
  }
}

TEST_CASE("tap tables copied to their layout read back through the views a kernel gets", "[taps-layout]") {
  // Real tables (make_resize_taps: odd max_taps) for odd and even output
  // sizes, shrinking and enlarging, placed as render() places them into a
  // 16-aligned buffer; each view's pointers must be aligned and give the same
  // resize as the tables themselves.
  struct Case {
    int in_w, in_h, out_w, out_h;
  };
  const Case cases[] = {{300, 220, 63, 61}, {1000, 700, 63, 61}, {300, 220, 64, 64}, {40, 30, 63, 61},
                        {517, 389, 224, 224}, {517, 389, 225, 223}, {64, 64, 1, 1}};
  struct Placed {
    ResizeTaps x, y;
    TapsItemLayout at;
  };
  std::vector<Placed> placed;
  std::size_t total = 0;
  for (const Case& c : cases) {
    Placed p;
    make_resize_taps(0.5, c.in_w - 0.25, c.in_w, c.out_w, p.x);
    make_resize_taps(0.0, c.in_h, c.in_h, c.out_h, p.y);
    REQUIRE(p.x.max_taps % 2 == 1);
    p.at = taps_item_layout(total, p.x.first.size(), std::size_t(p.x.max_taps), p.y.first.size(),
                            std::size_t(p.y.max_taps));
    total = p.at.end;
    placed.push_back(std::move(p));
  }
  // 16-aligned, as cudaMalloc's and cudaHostAlloc's memory is (256).
  const std::unique_ptr<std::byte[]> storage(new std::byte[total + 16]);
  std::byte* base = storage.get() + (16 - reinterpret_cast<std::uintptr_t>(storage.get()) % 16) % 16;
  std::memset(base, 0xA5, total);
  const auto place = [&](const ResizeTaps& t, const TapsAxisLayout& a) {
    std::memcpy(base + a.first, t.first.data(), t.first.size() * sizeof(std::int32_t));
    std::memcpy(base + a.count, t.count.data(), t.count.size() * sizeof(std::int32_t));
    std::memcpy(base + a.weights, t.weights.data(), t.weights.size() * sizeof(std::int16_t));
  };
  for (const Placed& p : placed) {
    place(p.x, p.at.x);
    place(p.y, p.at.y);
  }
  for (std::size_t k = 0; k < placed.size(); ++k) {
    CAPTURE(k);
    const Placed& p = placed[k];
    const Case& c = cases[k];
    const auto view_at = [&](const ResizeTaps& t, const TapsAxisLayout& a) {
      const ResizeTapsView v{reinterpret_cast<const std::int32_t*>(base + a.first),
                             reinterpret_cast<const std::int32_t*>(base + a.count),
                             reinterpret_cast<const std::int16_t*>(base + a.weights), t.max_taps};
      REQUIRE(reinterpret_cast<std::uintptr_t>(v.first) % alignof(std::int32_t) == 0);
      REQUIRE(reinterpret_cast<std::uintptr_t>(v.count) % alignof(std::int32_t) == 0);
      REQUIRE(reinterpret_cast<std::uintptr_t>(v.weights) % alignof(std::int16_t) == 0);
      return v;
    };
    const ResizeTapsView x = view_at(p.x, p.at.x), y = view_at(p.y, p.at.y);
    std::vector<unsigned char> img(std::size_t(c.in_w) * std::size_t(c.in_h) * 3);
    for (std::size_t i = 0; i < img.size(); ++i) img[i] = static_cast<unsigned char>(i * 31 + i / 7);
    const std::ptrdiff_t stride = std::ptrdiff_t(c.in_w) * 3;
    for (int oy = 0; oy < c.out_h; ++oy) {
      for (int ox = 0; ox < c.out_w; ++ox) {
        for (int ch = 0; ch < 3; ++ch) {
          if (resize_value(img.data(), stride, x, y, ox, oy, ch) !=
              resize_value(img.data(), stride, view(p.x), view(p.y), ox, oy, ch)) {
            FAIL("a placed table differs at (" << ox << ", " << oy << ", " << ch << ")");
          }
        }
      }
    }
  }
}
