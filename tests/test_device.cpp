// The device layer on the host backend: the float16/bfloat16 conversions and
// normalize math the CUDA kernels share, the backend choice, and the transfer
// stage's slot protocol under random delays, with a checksum of every batch the
// consumer reads and a poison pattern in every released buffer. Run under TSan
// by the test command: a protocol slip is a checksum mismatch or a data race.

#include <algorithm>
#include <atomic>
#include "catch_compat.h"
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unistd.h>
#include <filesystem>
#include "device/backends.h"
#include "device/device.h"
#include "device/device_pipeline.h"
#include "device/kernels/busy.h"
#include "device/kernels/gather.h"
#include "device/kernels/normalize.h"
#include "device/resident.h"
#include "support.h"
#include "device_support.h"

using namespace conveyor;
using namespace std::chrono_literals;

using namespace conveyor::test;

namespace {

// A float16's value, exactly (in double): sign, 5-bit exponent, 10-bit mantissa.
double half_value(std::uint16_t b) {
  const int e = (b >> 10) & 0x1f, m = b & 0x3ff;
  const double v = e == 0 ? std::ldexp(double(m), -24)
                   : e == 31 ? (m ? std::nan("") : HUGE_VAL)
                             : std::ldexp(double(1024 + m), e - 25);
  return (b & 0x8000) ? -v : v;
}

// float16 by the definition, as bfloat16 below (and not the compiler's own
// _Float16, which Clang before 15 lacks on x86-64): of f's two neighbours,
// the nearer in double arithmetic; a tie goes to the even mantissa; past the
// largest finite value, 65504, the next step up is 65536, which overflows to
// infinity. NaNs are the caller's.
std::uint16_t half_bits_reference(float f) {
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isinf(f)) return sign | 0x7c00;
  const double a = std::fabs(double(f));
  std::uint16_t lo = 0, hi = 0x7bff;  // the largest finite half at or below a, by bisection
  while (lo < hi) {
    const auto mid = static_cast<std::uint16_t>((lo + hi + 1) / 2);
    if (half_value(mid) <= a) lo = mid; else hi = static_cast<std::uint16_t>(mid - 1);
  }
  const auto up = static_cast<std::uint16_t>(lo + 1);  // 0x7c00 after 0x7bff: infinity
  const double d_lo = a - half_value(lo), d_up = (up == 0x7c00 ? 65536.0 : half_value(up)) - a;
  if (d_lo < d_up) return sign | lo;
  if (d_up < d_lo) return sign | up;
  return sign | ((lo & 1) ? up : lo);
}

// bfloat16 by the definition: of the two neighbours of f, the nearer one in
// double arithmetic; a tie goes to the even mantissa.
std::uint16_t bfloat16_bits_reference(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint16_t lo = static_cast<std::uint16_t>(u >> 16);
  if ((u & 0xffffu) == 0) return lo;
  const std::uint16_t hi = static_cast<std::uint16_t>(lo + 1);  // next away from zero (may become inf)
  auto value = [](std::uint16_t b) {
    // Past the largest finite value, the next step up is 2^128 (rounding treats
    // the exponent as unbounded, and a result there overflows to infinity).
    if ((b & 0x7fff) == 0x7f80) return std::copysign(std::ldexp(1.0, 128), (b & 0x8000) ? -1.0 : 1.0);
    const std::uint32_t w = std::uint32_t(b) << 16;
    float x;
    std::memcpy(&x, &w, 4);
    return double(x);
  };
  const double d_lo = std::fabs(double(f) - value(lo)), d_hi = std::fabs(value(hi) - double(f));
  if (d_lo < d_hi) return lo;
  if (d_hi < d_lo) return hi;
  return (lo & 1) ? hi : lo;
}

float from_half(std::uint16_t b) { return float(half_value(b)); }
float from_bfloat16(std::uint16_t b) {
  const std::uint32_t w = std::uint32_t(b) << 16;
  float x;
  std::memcpy(&x, &w, 4);
  return x;
}

}  // namespace

TEST_CASE("float16 conversion matches round-to-nearest-even on every class of float", "[device][dtype]") {
  // Every 2^20-th float plus its neighbours covers each exponent's mantissa
  // patterns, the ties, subnormals, overflow, infinities and NaNs.
  std::uint64_t checked = 0;
  for (std::uint64_t base = 0; base <= 0xffffffffu; base += 0x1000) {
    for (std::uint32_t u : {std::uint32_t(base), std::uint32_t(base + 1), std::uint32_t(base + 0xfff)}) {
      float f;
      std::memcpy(&f, &u, 4);
      const std::uint16_t got = float_to_half_bits(f), want = half_bits_reference(f);
      if (std::isnan(f)) {
        REQUIRE(std::isnan(from_half(got)));
      } else if (got != want) {
        FAIL("float bits " << std::hex << u << ": got " << got << " want " << want);
      }
      ++checked;
    }
  }
  // Halfway cases, which only exact rounding gets right.
  for (float f : {1.0f + 0x1.0p-11f, 1.0f + 3 * 0x1.0p-11f, 65504.0f, 65519.99f, 65520.0f, 0x1.0p-25f, 0x1.8p-25f,
                  0x1.0p-24f, -0x1.0p-24f, 0x1.ffcp-15f}) {
    REQUIRE(float_to_half_bits(f) == half_bits_reference(f));
  }
  REQUIRE(checked > 3'000'000);
}

TEST_CASE("bfloat16 conversion matches round-to-nearest-even by definition", "[device][dtype]") {
  for (std::uint64_t base = 0; base <= 0xffffffffu; base += 0x1000) {
    for (std::uint32_t u : {std::uint32_t(base), std::uint32_t(base + 0x7fff), std::uint32_t(base + 0x8000),
                            std::uint32_t(base + 0x18000)}) {
      float f;
      std::memcpy(&f, &u, 4);
      const std::uint16_t got = float_to_bfloat16_bits(f);
      if (std::isnan(f)) {
        REQUIRE(std::isnan(from_bfloat16(got)));
      } else if (!std::isinf(f) && got != bfloat16_bits_reference(f)) {
        FAIL("float bits " << std::hex << u << ": got " << got << " want " << bfloat16_bits_reference(f));
      }
    }
  }
  REQUIRE(float_to_bfloat16_bits(std::numeric_limits<float>::infinity()) == 0x7f80);
}

TEST_CASE("normalize on the host backend matches a plain reference for all three output types", "[device][normalize]") {
  auto device = host_device();
  const std::size_t n = 3, h = 5, w = 7, c = 3;
  std::vector<std::uint8_t> src(n * h * w * c);
  Rng rng(1, 2, 3);
  for (auto& v : src) v = static_cast<std::uint8_t>(rng.below(256));
  src[0] = 0;
  src[1] = 255;
  const Normalize stats{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
  auto reference = [&](std::size_t in, std::size_t ch) {  // (v / 255 - mean) / std, in double
    return (double(src[in]) / 255.0 - stats.mean[ch]) / stats.std[ch];
  };
  auto stream = device->create_stream();
  for (DType t : {DType::float32, DType::float16, DType::bfloat16}) {
    INFO(dtype_name(t));
    std::vector<std::byte> out(n * c * h * w * dtype_size(t));
    NormalizeJob job;
    job.src = src.data();
    job.dst = out.data();
    job.samples = n;
    job.height = h;
    job.width = w;
    job.channels = c;
    job.out_type = t;
    for (std::size_t ch = 0; ch < c; ++ch) job.affine[ch] = channel_affine(stats.mean[ch], stats.std[ch]);
    kernels::normalize(*device, job, *stream);
    device->synchronize(*stream);
    for (std::size_t s = 0; s < n; ++s) {
      for (std::size_t y = 0; y < h; ++y) {
        for (std::size_t x = 0; x < w; ++x) {
          for (std::size_t ch = 0; ch < c; ++ch) {
            const std::size_t in = ((s * h + y) * w + x) * c + ch;     // NHWC
            const std::size_t o = ((s * c + ch) * h + y) * w + x;       // NCHW
            const double want = reference(in, ch);
            double got, tol;
            if (t == DType::float32) {
              float f;
              std::memcpy(&f, out.data() + o * 4, 4);
              got = f;
              tol = 1e-6 * std::max(1.0, std::fabs(want));
            } else {
              std::uint16_t b;
              std::memcpy(&b, out.data() + o * 2, 2);
              got = t == DType::float16 ? from_half(b) : from_bfloat16(b);
              // half an ulp of the 16-bit type (11 or 8 significant bits), plus float32 noise
              const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::fabs(want), 1e-4)) -
                                                     (t == DType::float16 ? 10 : 7));
              tol = 0.5 * ulp + 1e-6;
            }
            if (std::fabs(got - want) > tol) FAIL("element " << o << ": got " << got << " want " << want);
          }
        }
      }
    }
  }
}

TEST_CASE("gather on the host backend equals direct indexing", "[device][gather]") {
  auto device = host_device();
  const std::size_t rows = 50, row_bytes = 12;
  std::vector<std::byte> src(rows * row_bytes);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = std::byte(i * 7 + 1);
  std::vector<std::uint64_t> idx{49, 0, 7, 7, 23, 1};
  std::vector<std::byte> dst(idx.size() * row_bytes);
  auto stream = device->create_stream();
  kernels::gather(*device, GatherJob{src.data(), dst.data(), idx.data(), idx.size(), row_bytes}, *stream);
  device->synchronize(*stream);
  for (std::size_t n = 0; n < idx.size(); ++n) {
    REQUIRE(std::memcmp(dst.data() + n * row_bytes, src.data() + idx[n] * row_bytes, row_bytes) == 0);
  }
}

TEST_CASE("host streams keep CUDA event semantics", "[device][events]") {
  DeviceConfig cfg;
  cfg.max_delay_us = 300;  // every operation starts late by a random amount
  auto device = host_device(cfg);
  auto a = device->create_stream(), b = device->create_stream();
  auto e = device->create_event();
  SECTION("an event never recorded is complete") {
    device->synchronize(*e);
    device->wait(*b, *e);
    device->synchronize(*b);
  }
  SECTION("work after wait(b, e) sees the work before record(e, a)") {
    auto buf = device->allocate(64);
    std::vector<unsigned char> seen(64);
    for (int round = 1; round <= 40; ++round) {
      kernels::busy(*device, 100, *a);
      device->set_bytes(buf->data(), static_cast<unsigned char>(round), 64, *a);
      device->record(*e, *a);
      device->wait(*b, *e);
      device->copy_to_host(seen.data(), buf->data(), 64, *b);
      device->synchronize(*b);
      REQUIRE(std::all_of(seen.begin(), seen.end(), [&](unsigned char v) { return v == round; }));
    }
  }
  SECTION("synchronize(e) returns after the recorded work, and timing events measure it") {
    auto t0 = device->create_event(EventKind::timing), t1 = device->create_event(EventKind::timing);
    device->record(*t0, *a);
    kernels::busy(*device, 5000, *a);
    device->record(*t1, *a);
    device->synchronize(*t1);
    REQUIRE(device->elapsed_ms(*t0, *t1) >= 5.0);
  }
}

TEST_CASE("the simulated link makes a copy take at least bytes / bandwidth", "[device][link]") {
  DeviceConfig cfg;
  cfg.link_gbps = 1.0;  // 1e9 bytes/s: 8 MB takes >= 8 ms
  auto device = host_device(cfg);
  auto stream = device->create_stream();
  std::vector<std::byte> src(8'000'000, std::byte{3});
  auto dst = device->allocate(src.size());
  const auto t0 = std::chrono::steady_clock::now();
  device->copy_to_device(dst->data(), src.data(), src.size(), *stream);
  device->synchronize(*stream);
  REQUIRE(std::chrono::steady_clock::now() - t0 >= 8ms);
  REQUIRE(static_cast<std::byte*>(dst->data())[src.size() - 1] == std::byte{3});
}

TEST_CASE("open_device chooses once and says why", "[device][backend]") {
  const CudaProbe probe = probe_cuda();
  SECTION("host when asked") {
    auto d = host_device();
    REQUIRE(d->backend() == Backend::host);
    REQUIRE_THAT(d->describe(), Catch::Contains("asked for"));
  }
  SECTION("auto without a device falls back to host and names the probe's answer") {
    if (probe.devices > 0) return;  // a GPU machine: auto picks cuda (tests/test_cuda.cpp)
    auto d = open_device({});
    REQUIRE(d->backend() == Backend::host);
    REQUIRE_THAT(d->describe(), Catch::Contains("auto: "));
    if (probe.built_with_cuda) {
      // No driver here: 35; a stub libcuda: 34; a driver without a GPU: 100.
      REQUIRE_THAT(d->describe(), Catch::Contains("cudaGetDeviceCount returned"));
    }
  }
  SECTION("cuda without a device is a one-line error") {
    if (probe.devices > 0) return;
    DeviceConfig cfg;
    cfg.backend = BackendChoice::cuda;
    try {
      (void)open_device(cfg);
      FAIL("no error");
    } catch (const DeviceError& e) {
      const std::string what = e.what();
      REQUIRE_THAT(what, Catch::StartsWith("device cuda: "));
      REQUIRE(what.find('\n') == std::string::npos);
    }
  }
  SECTION("host-only options under cuda are refused, and choose host under auto") {
    DeviceConfig cfg;
    cfg.link_gbps = 12;
    cfg.backend = BackendChoice::cuda;
    REQUIRE_THROWS_WITH(open_device(cfg), Catch::Contains("link_gbps is a host-backend option"));
    cfg.backend = BackendChoice::automatic;
    REQUIRE(open_device(cfg)->backend() == Backend::host);
    cfg.link_gbps = -1;
    REQUIRE_THROWS_WITH(open_device(cfg), Catch::Contains("link_gbps must be"));
    // 1e-6 GB/s: every copy slept 13 minutes a batch, and the destructor waited it out.
    cfg.link_gbps = 1e-6;
    REQUIRE_THROWS_WITH(open_device(cfg), Catch::Contains("link_gbps must be 0 (no simulated link) or 0.01 to 1e6, got 1e-06"));
    cfg.link_gbps = 0;
    cfg.max_delay_us = DeviceConfig::kMaxDelayUs + 1;
    REQUIRE_THROWS_WITH(open_device(cfg), Catch::Contains("max_delay_us must be <= 1000000"));
    cfg.max_delay_us = 0;
    cfg.host_transfer = HostTransfer(9);
    REQUIRE_THROWS_WITH(open_device(cfg), Catch::Contains("host_transfer must be copy or handover"));
    cfg.host_transfer = HostTransfer::copy;
    cfg.backend = BackendChoice(9);
    REQUIRE_THROWS_WITH(open_device(cfg), Catch::Contains("backend must be automatic, cuda or host"));
  }
  SECTION("a GPU named other than 0 is never auto's fallback to host") {
    DeviceConfig cfg;
    cfg.cuda_device = 1;
    cfg.link_gbps = 12;
    REQUIRE_THROWS_WITH(open_device(cfg), Catch::Equals("device auto: cuda_device 1 names a GPU, but link_gbps is a "
                                                        "host-backend option"));
    cfg.link_gbps = 0;
    if (probe.devices == 0) {
      REQUIRE_THROWS_WITH(open_device(cfg), Catch::StartsWith("device auto: cuda_device 1 names a GPU, but "));
    } else if (probe.devices == 1) {
      REQUIRE_THROWS_WITH(open_device(cfg), Catch::Contains("cuda_device 1 out of range"));
    }
    cfg.cuda_device = 0;  // the default: auto may fall back
    REQUIRE_NOTHROW(open_device(cfg));
  }
  SECTION("handover_if_host hands over on the host backend without choosing it") {
    DeviceConfig cfg;
    cfg.handover_if_host = true;
    cfg.backend = BackendChoice::host;
    REQUIRE(open_device(cfg)->hands_over());
    cfg.backend = BackendChoice::automatic;
    auto d = open_device(cfg);
    if (probe.devices > 0) {
      REQUIRE(d->backend() == Backend::cuda);  // unlike host_transfer = handover, which would pick host
      REQUIRE_FALSE(d->hands_over());
    } else {
      REQUIRE(d->hands_over());
      REQUIRE_THAT(d->describe(), Catch::Contains("auto: ") && !Catch::Contains("asks for the host backend"));
    }
  }
  SECTION("names parse") {
    REQUIRE(parse_backend("auto") == BackendChoice::automatic);
    REQUIRE(parse_backend("cuda") == BackendChoice::cuda);
    REQUIRE(parse_backend("host") == BackendChoice::host);
    REQUIRE_FALSE(parse_backend("gpu"));
    REQUIRE(parse_dtype("bfloat16") == DType::bfloat16);
    REQUIRE_FALSE(parse_dtype("fp16"));
  }
}
