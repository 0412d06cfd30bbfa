// The CPU half of the GPU decode path: the resize arithmetic the
// kernel shares (resize_math.h) against the SIMD resize, the split of samples
// by index and share, which files and boxes the GPU may take, and the host twin
// of what the GPU writes. Images are generated here (image_writers.h).
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "catch_compat.h"

#include "image_writers.h"
#include "pipeline/rng.h"
#include "image/augment.h"
#include "image/decode.h"
#include "image/gpu_decode_plan.h"
#include "image/image_ops.h"
#include "image/resize.h"
#include "image/resize_math.h"

using namespace conveyor;
namespace t = conveyor::test;

TEST_CASE("resize_isa names the kernels in use: AVX2 where the CPU has it, unless CONVEYOR_RESIZE_ISA=sse2",
          "[gpu-plan][resize]") {
  const std::string isa = resize_isa();
  const char* force = std::getenv("CONVEYOR_RESIZE_ISA");
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (force && std::string(force) == "sse2") {
    REQUIRE(isa == "sse2");
  } else {
    REQUIRE(isa == (__builtin_cpu_supports("avx2") ? "avx2" : "sse2"));
  }
#else
  (void)force;
  REQUIRE((isa == "sse2" || isa == "scalar"));
#endif
}

TEST_CASE("resize math: pixel by pixel (the kernel's arithmetic) equals the SIMD resize bit for bit", "[gpu-plan][resize]") {
  INFO("resize kernels: " << resize_isa());
  const t::Rgb img = t::photo_like(301, 211, 7);
  Rng rng(9, 0, 0);
  ResizeScratch scratch;
  std::size_t cases = 0;
  for (const int ow : {1, 3, 17, 64, 224}) {
    for (const int oh : {1, 16, 61}) {
      for (int k = 0; k < 12; ++k) {
        // Boxes from 1/64 of the image (upscaling) to all of it (up to 64x shrinking), at fractional positions.
        const double bw = 301 * (0.01 + 0.99 * rng.uniform(0, 1)), bh = 211 * (0.01 + 0.99 * rng.uniform(0, 1));
        const double u0 = (301 - bw) * rng.uniform(0, 1), v0 = (211 - bh) * rng.uniform(0, 1);
        const bool mirror = k % 2 == 1;
        CAPTURE(ow, oh, u0, v0, bw, bh, mirror);
        std::vector<unsigned char> a(std::size_t(ow) * oh * 3 + 5, 0xEE), b = a;  // 5 guard bytes
        resize_triangle(img.px.data(), 301, 211, 301 * 3, u0, v0, u0 + bw, v0 + bh, a.data(), ow, oh, ow * 3, scratch, mirror);
        resize_reference(img.px.data(), 301, 211, 301 * 3, u0, v0, u0 + bw, v0 + bh, b.data(), ow, oh, ow * 3, mirror);
        REQUIRE(a == b);
        REQUIRE(a[a.size() - 1] == 0xEE);
        ++cases;
      }
    }
  }
  REQUIRE(cases == 5 * 3 * 12);
}

TEST_CASE("gpu decode plan: the split is a function of index and share, about share of the samples", "[gpu-plan]") {
  REQUIRE_THROWS_AS(gpu_decodes(0, -0.1), std::invalid_argument);
  REQUIRE_THROWS_AS(gpu_decodes(0, 1.5), std::invalid_argument);
  for (const double share : {0.0, 0.25, 0.5, 0.8, 1.0}) {
    CAPTURE(share);
    std::size_t on_gpu = 0;
    for (std::uint64_t i = 0; i < 20000; ++i) {
      const bool g = gpu_decodes(i, share);
      REQUIRE(g == gpu_decodes(i, share));  // a function: same answer every time
      if (g) {
        REQUIRE(gpu_decodes(i, std::min(1.0, share + 0.1)));  // a larger share keeps it on the GPU
      }
      on_gpu += g;
    }
    REQUIRE(double(on_gpu) / 20000 == Approx(share).margin(0.015));
  }
  // Spread over batches: any 64 consecutive indices at share 0.5 hold between 16 and 48 GPU samples.
  for (std::uint64_t start = 0; start < 20000; start += 64) {
    int n = 0;
    for (std::uint64_t i = start; i < start + 64; ++i) n += gpu_decodes(i, 0.5);
    REQUIRE(n >= 16);
    REQUIRE(n <= 48);
  }
}

TEST_CASE("gpu decode plan: only sequential Huffman JPEGs in gray or YCbCr, with the box inside the image", "[gpu-plan]") {
  const t::Rgb img = t::photo_like(64, 48, 3);
  ImageDecoder dec;
  Geometry inside{4, 2, 60, 40, {16, 16}, false};
  const auto decodable = [&](const std::vector<unsigned char>& file, const Geometry& g) {
    return gpu_decodable(dec.open(file), g);
  };
  REQUIRE(decodable(t::jpeg(img, {t::JpegKind::baseline, 90}), inside));
  REQUIRE(decodable(t::jpeg(img, {t::JpegKind::baseline, 90, false}), inside));  // 4:4:4
  REQUIRE(decodable(t::jpeg(img, {t::JpegKind::gray, 90}), inside));
  REQUIRE_FALSE(decodable(t::jpeg(img, {t::JpegKind::progressive, 90}), inside));
  REQUIRE_FALSE(decodable(t::jpeg(img, {t::JpegKind::arithmetic, 90}), inside));
  REQUIRE_FALSE(decodable(t::jpeg(img, {t::JpegKind::cmyk_adobe, 90}), inside));
  REQUIRE_FALSE(decodable(t::png(img, t::PngKind::rgb8), inside));
  const auto baseline = t::jpeg(img, {t::JpegKind::baseline, 90});
  REQUIRE(decodable(baseline, Geometry{0, 0, 64, 48, {16, 16}, true}));             // the whole image
  REQUIRE_FALSE(decodable(baseline, Geometry{-4, -4, 68, 52, {16, 16}, false}));    // padding (RandomCrop's)
  REQUIRE_FALSE(decodable(baseline, Geometry{10, 10, 80, 40, {16, 16}, false}));    // past the right edge (CenterCrop)
}

// Every RandomResizedCrop (+ flip) box of a plain baseline JPEG must stay on the
// GPU path, or the GPU's share silently shrinks. The box's edges and its window
// are computed apart and may differ by a rounding error; compared exactly, about
// 2% of the boxes went to the CPU, which only a GPU run (test_cuda) noticed. The
// images are test_cuda's (make_photos), and more sizes and draws; the host twin
// then renders each box as the CPU resize does, bit for bit.
TEST_CASE("gpu decode plan: every RandomResizedCrop box of a baseline or grey JPEG stays on the GPU path",
          "[gpu-plan]") {
  ImageDecoder header, full({}, {8});
  ResizeScratch scratch;
  int boxes = 0, off_edge = 0;
  for (const int out : {224, 64}) {
    const Augment augment({RandomResizedCrop{{out, out}}, RandomHorizontalFlip{}});
    for (int i = 0; i < 35; ++i) {
      const int w = 300 + 37 * (i % 7), h = 220 + 29 * (i % 5);
      const t::Rgb img = t::photo_like(w, h, std::uint64_t(i));
      const auto file = t::jpeg(img, {i % 6 == 5 ? t::JpegKind::gray : t::JpegKind::baseline, 90, i % 4 != 3});
      const ImageInfo info = header.open(file);
      full.open(file);
      const DecodedView whole = full.decode({0, 0, info.width, info.height}, 1.0);
      for (std::uint64_t draw = 0; draw < 40; ++draw) {
        CAPTURE(out, i, w, h, draw);
        Rng rng(5, draw, std::uint64_t(i));
        const Geometry g = augment.plan(info.width, info.height, rng);
        ++boxes;
        off_edge += g.x1 > g.window.u1 || g.y1 > g.window.v1 || g.x1 > info.width || g.y1 > info.height;
        REQUIRE(gpu_decodable(info, g));
        if (draw % 8 == 0) {  // the twin takes the box as the CPU resize does
          t::Rgb twin = t::Rgb::sized(out, out), rendered = twin;
          render_gpu_twin(whole.pixels, whole.width, whole.height, whole.stride, g, twin.px);
          render(whole, g, info.width, info.height, 0, rendered.px, scratch);
          REQUIRE(twin.px == rendered.px);
        }
      }
    }
  }
  INFO(off_edge << " of " << boxes << " boxes end a rounding error past their window or the image");
  CHECK(off_edge > 0);  // the sweep does reach the rounding case it guards
  // A box a rounding error past the image is inside; one a pixel past is padding.
  const t::Rgb img = t::photo_like(64, 48, 3);
  const ImageInfo info = header.open(t::jpeg(img, {t::JpegKind::baseline, 90}));
  REQUIRE(gpu_decodable(info, Geometry{0, 0, 64 + 1e-12, 48, {16, 16}, false}));
  REQUIRE(gpu_decodable(info, Geometry{-1e-12, 0, 64, 48 + 1e-12, {16, 16}, true}));
  REQUIRE_FALSE(gpu_decodable(info, Geometry{0, 0, 65, 48, {16, 16}, false}));
  REQUIRE_FALSE(gpu_decodable(info, Geometry{-1, 0, 63, 48, {16, 16}, false}));
  Geometry windowed{8, 8, 40, 40, {16, 16}, false};
  windowed.window = {8, 8, 40, 40};
  REQUIRE(gpu_decodable(info, windowed));
  windowed.x1 = 41;  // past its window: the resize would read pixels the crop removed
  REQUIRE_FALSE(gpu_decodable(info, windowed));
  // A vertical flip is the CPU path's: the GPU render mirrors columns only.
  Geometry upside_down{0, 0, 64, 48, {16, 16}, false};
  upside_down.vflip = true;
  REQUIRE_FALSE(gpu_decodable(info, upside_down));
  std::vector<unsigned char> out(16 * 16 * 3);
  REQUIRE_THROWS_AS(render_gpu_twin(img.px.data(), 64, 48, 64 * 3, upside_down, out), std::invalid_argument);
}

TEST_CASE("gpu decode plan: the host twin equals render() of a full decode, and stays close to the CPU path",
          "[gpu-plan][quality]") {
  const t::Rgb img = t::photo_like(1024, 768, 11);
  const auto file = t::jpeg(img, {t::JpegKind::baseline, 92});
  ImageDecoder cpu;  // the CPU path: ROI and reduced DCT scales
  ImageDecoder full({}, {8});
  ResizeScratch scratch;
  for (const int out : {64, 224}) {
    const Augment augment({RandomResizedCrop{{out, out}}, RandomHorizontalFlip{}});
    double worst = 1e9;
    int flips = 0;
    for (std::uint64_t i = 0; i < 30; ++i) {
      CAPTURE(out, i);
      Rng r1(4, 0, i), r2(4, 0, i);
      const ImageInfo info = cpu.open(file);
      const Geometry g = augment.plan(info.width, info.height, r1);
      REQUIRE(gpu_decodable(info, g));
      flips += g.flip;
      const DecodeRequest want = decode_request(g, info.width, info.height);
      t::Rgb cpu_out = t::Rgb::sized(out, out), twin = cpu_out, rendered = cpu_out;
      render(cpu.decode(want.region, want.min_scale), g, info.width, info.height, 0, cpu_out.px, scratch);

      full.open(file);
      const DecodedView whole = full.decode({0, 0, info.width, info.height}, 1.0);
      const Geometry g2 = augment.plan(info.width, info.height, r2);  // the same draws: the same box
      render_gpu_twin(whole.pixels, whole.width, whole.height, whole.stride, g2, twin.px);
      render(whole, g2, info.width, info.height, 0, rendered.px, scratch);
      REQUIRE(twin.px == rendered.px);  // the kernel's arithmetic is the CPU resize's, bit for bit
      worst = std::min(worst, t::psnr(twin, cpu_out));
    }
    INFO("output " << out << ": worst PSNR of the twin against the CPU path " << worst << " dB");
    CHECK(flips > 0);
    // The bar for nvJPEG against the CPU path (1 grey level, 40 dB); the twin (libjpeg-turbo's full decode, so
    // only the CPU path's reduced DCT scales differ) measured 50-51 dB worst here on 2026-11-24.
    REQUIRE(worst >= 40);
  }
  std::vector<unsigned char> small(10);
  REQUIRE_THROWS_AS(render_gpu_twin(img.px.data(), 1024, 768, 1024 * 3, Geometry{0, 0, 8, 8, {4, 4}, false}, small),
                    std::invalid_argument);
}
