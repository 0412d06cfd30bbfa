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
#include "device/resident.h"
#include "support.h"

using namespace conveyor;
using namespace std::chrono_literals;

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

std::shared_ptr<Device> host_device(DeviceConfig cfg = {}) {
  cfg.backend = BackendChoice::host;
  return open_device(cfg);
}

// What (epoch, index) must hold in the device batch: its filler bytes.
bool sample_matches(std::uint64_t seed, std::uint64_t epoch, std::uint64_t index, const std::byte* got,
                    std::size_t bytes) {
  std::vector<std::byte> want(bytes);
  test::expected_bytes(seed, epoch, index, want);
  return std::memcmp(want.data(), got, bytes) == 0;
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
    device->normalize(job, *stream);
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
  device->gather(GatherJob{src.data(), dst.data(), idx.data(), idx.size(), row_bytes}, *stream);
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
      device->busy(100, *a);
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
    device->busy(5000, *a);
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

namespace {

// Forwards to a host device, with faults to inject: a call that throws, or a
// wait that does nothing (a broken protocol the checks must catch).
class FaultyDevice final : public Device {
 public:
  explicit FaultyDevice(std::shared_ptr<Device> inner) : inner_(std::move(inner)) {}
  std::atomic<int> copies_before_error{-1};   // copy_to_device throws when this reaches 0
  std::atomic<bool> fail_cpu_records{false};  // record on the CPU consumer's stream throws
  std::atomic<bool> fail_cpu_waits{false};    // wait on the CPU consumer's stream throws
  std::atomic<bool> skip_waits{false};
  std::atomic<int> waits_on_cpu_stream{0};  // wait() calls on the CPU consumer's (inline) stream
  // A transfer step that fails after its copy was enqueued: this call throws, once.
  enum class AfterCopy { none, normalize, record, synchronize };
  std::atomic<AfterCopy> fail_after_copy{AfterCopy::none};
  // Each copy first waits this long on its stream: a slow DMA, still reading its source.
  std::atomic<double> copy_delay_us{0};
  // Enqueueing a copy takes this long on the caller (the workers get ahead meanwhile).
  std::atomic<int> enqueue_delay_ms{0};
  // The last copy_to_device (on the delivery thread; read once the pipeline failed):
  // its destination, the bytes its source held when it was enqueued, its stream.
  void* copy_dst = nullptr;
  std::vector<std::byte> copy_source;
  Stream* copy_stream = nullptr;       // under sync_mu while the pipeline runs
  Stream* normalize_stream = nullptr;  // the last normalize's (delivery thread); likewise
  // For each synchronize(Event&) on an event last recorded on the copy or the
  // normalize stream (a slot's "copied"), how many copies had been enqueued by then.
  std::atomic<std::size_t> copies{0};
  std::mutex sync_mu;
  std::vector<std::size_t> copies_at_sync;
  std::set<const Event*> transfer_events;  // under sync_mu

  Backend backend() const override { return inner_->backend(); }
  std::string describe() const override { return "faulty " + inner_->describe(); }
  bool hands_over() const override { return inner_->hands_over(); }
  bool poisons_released() const override { return inner_->poisons_released(); }
  int ordinal() const override { return inner_->ordinal(); }
  void bind_thread() override { inner_->bind_thread(); }
  void* allocate_host(std::size_t bytes) override { return inner_->allocate_host(bytes); }
  void free_host(void* p) noexcept override { inner_->free_host(p); }
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override { return inner_->allocate(bytes); }
  std::unique_ptr<Stream> create_stream() override { return inner_->create_stream(); }
  std::unique_ptr<Event> create_event(EventKind k) override { return inner_->create_event(k); }
  std::unique_ptr<Stream> wrap_stream(void* s) override { return inner_->wrap_stream(s); }
  std::unique_ptr<JpegBatchDecoder> create_jpeg_decoder(const DecodeLimits& limits, std::string& why) override {
    return inner_->create_jpeg_decoder(limits, why);
  }
  void copy_to_device(void* d, const void* s, std::size_t n, Stream& st) override {
    if (copies_before_error-- == 0) throw DeviceError("cudaMemcpyAsync(...) at cuda/fake.cu:1: injected failure");
    std::this_thread::sleep_for(std::chrono::milliseconds(enqueue_delay_ms.load()));
    inner_->busy(copy_delay_us, st);
    inner_->copy_to_device(d, s, n, st);
    copy_dst = d;
    copy_source.assign(static_cast<const std::byte*>(s), static_cast<const std::byte*>(s) + n);
    {
      std::lock_guard lk(sync_mu);  // record() reads it on the consumer's thread
      copy_stream = &st;
    }
    ++copies;
  }
  void copy_to_host(void* d, const void* s, std::size_t n, Stream& st) override { inner_->copy_to_host(d, s, n, st); }
  void set_bytes(void* d, unsigned char v, std::size_t n, Stream& st) override { inner_->set_bytes(d, v, n, st); }
  void normalize(const NormalizeJob& j, Stream& st) override {
    fail_once(AfterCopy::normalize, "normalize_kernel launch");
    inner_->normalize(j, st);
    std::lock_guard lk(sync_mu);
    normalize_stream = &st;
  }
  void gather(const GatherJob& j, Stream& st) override { inner_->gather(j, st); }
  void busy(double us, Stream& st) override { inner_->busy(us, st); }
  void record(Event& e, Stream& st) override {
    if (fail_cpu_records && st.native() == nullptr) throw DeviceError("cudaEventRecord(...) at cuda/fake.cu:2: injected failure");
    if (st.native() != nullptr) fail_once(AfterCopy::record, "cudaEventRecord(...)");
    inner_->record(e, st);
    std::lock_guard lk(sync_mu);
    if (&st == copy_stream || &st == normalize_stream) transfer_events.insert(&e);
    else transfer_events.erase(&e);
  }
  void wait(Stream& st, Event& e) override {
    if (st.native() == nullptr) ++waits_on_cpu_stream;
    if (fail_cpu_waits && st.native() == nullptr) throw DeviceError("cudaStreamWaitEvent(...) at cuda/fake.cu:4: injected failure");
    if (!skip_waits) inner_->wait(st, e);
  }
  void synchronize(Event& e) override {
    {
      std::lock_guard lk(sync_mu);
      if (transfer_events.count(&e)) copies_at_sync.push_back(copies.load());
    }
    fail_once(AfterCopy::synchronize, "cudaEventSynchronize(...)");
    inner_->synchronize(e);
  }
  void synchronize(Stream& st) override { inner_->synchronize(st); }
  double elapsed_ms(Event& a, Event& b) override { return inner_->elapsed_ms(a, b); }

 private:
  void fail_once(AfterCopy call, const char* what) {
    AfterCopy armed = call;
    if (fail_after_copy.compare_exchange_strong(armed, AfterCopy::none)) {
      throw DeviceError(std::string(what) + " at cuda/fake.cu:3: injected failure after the copy");
    }
  }

  std::shared_ptr<Device> inner_;
};

Config small_config(std::size_t workers, std::size_t depth, std::size_t device_buffers) {
  Config c;
  c.batch_size = 4;
  c.sample_bytes = 48;
  c.workers = workers;
  c.host_queue_depth = depth;
  c.device_queue_depth = depth;
  c.device_buffers = device_buffers;
  c.seed = 11;
  c.epochs = 2;
  return c;
}

// What a consumer's stream read of one batch: a copy to host memory enqueued
// on that stream, checked once the stream has run it.
struct StreamRead {
  std::uint64_t epoch = 0;
  std::vector<std::uint64_t> indices;
  std::vector<std::byte> bytes;
  std::vector<std::int64_t> labels;
};
using StreamReads = std::vector<std::unique_ptr<StreamRead>>;  // each allocated before its copy is enqueued

// Enqueues on `stream`, after `step_us` of work there, a copy of b's bytes and labels.
void read_on(Device& device, Stream& stream, const DeviceBatch& b, double step_us, StreamReads& reads) {
  auto r = std::make_unique<StreamRead>();
  r->epoch = b.host().epoch;
  r->indices = b.host().indices;
  r->bytes.resize(b.bytes());
  r->labels.resize(b.size());
  device.busy(step_us, stream);  // the step takes a while on the device
  device.copy_to_host(r->bytes.data(), b.data(), b.bytes(), stream);
  device.copy_to_host(r->labels.data(), b.labels(), b.size() * sizeof(std::int64_t), stream);  // with the pixels
  reads.push_back(std::move(r));
}

// The samples whose bytes or label are not what fill_pattern wrote; counts each sample into *seen.
std::size_t wrong_samples(const StreamReads& reads, std::uint64_t seed, std::size_t sample_bytes,
                          std::map<std::pair<std::uint64_t, std::uint64_t>, int>* seen = nullptr) {
  std::size_t wrong = 0;
  for (auto& r : reads) {
    for (std::size_t j = 0; j < r->indices.size(); ++j) {
      if (seen) ++(*seen)[{r->epoch, r->indices[j]}];
      const bool bytes_ok = sample_matches(seed, r->epoch, r->indices[j], r->bytes.data() + j * sample_bytes, sample_bytes);
      if (!bytes_ok || r->labels[j] != std::int64_t(r->indices[j] * 3)) ++wrong;
    }
  }
  return wrong;
}

// A consumer whose "training step" runs on its own stream: for each batch it
// enqueues a copy of the batch to a host vector and releases the batch at once,
// so only the protocol's events keep the next copy off the slot until that
// read has run. Returns the number of samples whose bytes were wrong.
std::size_t run_stream_consumer(DevicePipeline& dp, Device& device, Stream& stream, std::uint64_t seed,
                                std::map<std::pair<std::uint64_t, std::uint64_t>, int>* seen, double step_us = 50) {
  StreamReads reads;
  while (auto b = dp.next()) {
    read_on(device, stream, *b, step_us, reads);
    b->reset();  // released right away: consumed is recorded after the copy above
  }
  device.synchronize(stream);
  return wrong_samples(reads, seed, 48, seen);
}

}  // namespace

TEST_CASE("the host backend wraps only its own streams, as CUDA refuses the per-thread stream",
          "[device][streams]") {
  // Any handle was taken for a host stream: cudaStreamPerThread (0x2) as a
  // consumer stream, or in record_stream, crashed in next() or in a release.
  auto device = host_device();
  auto own = device->create_stream();
  REQUIRE_NOTHROW(device->wrap_stream(own->native()));
  REQUIRE_NOTHROW(device->wrap_stream(nullptr));
  REQUIRE_NOTHROW(device->wrap_stream(reinterpret_cast<void*>(0x1)));  // cudaStreamLegacy: the caller's timeline
  REQUIRE_THROWS_AS(device->wrap_stream(reinterpret_cast<void*>(0x2)), DeviceError);
  REQUIRE_THROWS_WITH(device->wrap_stream(reinterpret_cast<void*>(0x2)), Catch::Contains("cudaStreamPerThread"));
  int not_a_stream = 0;
  REQUIRE_THROWS_WITH(device->wrap_stream(&not_a_stream), Catch::Contains("is not a live stream of the host backend"));
  void* gone = own->native();
  own.reset();
  REQUIRE_THROWS_AS(device->wrap_stream(gone), DeviceError);
  TransferConfig tc;
  tc.consumer_stream = reinterpret_cast<void*>(0x2);
  REQUIRE_THROWS_AS(DevicePipeline(small_config(1, 1, 2), 8, test::fill_pattern, tc, device), DeviceError);
  DevicePipeline dp(small_config(1, 1, 2), 8, test::fill_pattern, {}, device);
  auto batch = dp.next();
  REQUIRE(batch);
  REQUIRE_THROWS_AS(batch->record_stream(reinterpret_cast<void*>(0x2)), DeviceError);
  batch.reset();  // released whole: the refused stream was never kept
  REQUIRE(dp.held_slots() == 0);
}

TEST_CASE("device pipeline on the host backend delivers every sample intact under random delays",
          "[device][pipeline]") {
  const std::size_t dataset = 23;  // 6 batches an epoch, the last short
  for (HostTransfer mode : {HostTransfer::copy, HostTransfer::handover}) {
    for (bool stream_consumer : {false, true}) {
      if (mode == HostTransfer::handover && stream_consumer) continue;  // handover is for a CPU consumer
      for (std::size_t workers : {1, 3}) {
        for (std::size_t depth : {1, 2}) {
          for (std::size_t slots : {1, 2, 4}) {
            DYNAMIC_SECTION("mode " << int(mode) << " stream " << stream_consumer << " workers " << workers
                                    << " depth " << depth << " slots " << slots) {
              DeviceConfig dc;
              dc.host_transfer = mode;
              dc.poison_released = true;
              dc.max_delay_us = 40;
              dc.delay_seed = workers * 100 + depth * 10 + slots;
              auto device = host_device(dc);
              auto consumer = stream_consumer ? device->create_stream() : nullptr;
              TransferConfig tc;
              tc.consumer_stream = consumer ? consumer->native() : nullptr;
              auto task = std::async(std::launch::async, [&] {
                Config cfg = small_config(workers, depth, slots);
                DevicePipeline dp(cfg, dataset, test::fill_pattern, tc, device);
                REQUIRE(dp.device_slots() == slots);
                std::map<std::pair<std::uint64_t, std::uint64_t>, int> seen;
                std::size_t wrong = 0;
                if (consumer) {
                  wrong = run_stream_consumer(dp, *device, *consumer, cfg.seed, &seen);
                } else {
                  Rng jitter(5, workers, slots);
                  while (auto b = dp.next()) {
                    const Batch& h = b->host();
                    for (std::size_t j = 0; j < b->size(); ++j) {
                      ++seen[{h.epoch, h.indices[j]}];
                      REQUIRE(h.labels[j] == std::int64_t(h.indices[j] * 3));
                      const auto* p = static_cast<const std::byte*>(b->data()) + j * cfg.sample_bytes;
                      if (!sample_matches(cfg.seed, h.epoch, h.indices[j], p, cfg.sample_bytes)) ++wrong;
                    }
                    if (jitter.bernoulli(0.3)) std::this_thread::sleep_for(std::chrono::microseconds(jitter.below(200)));
                  }
                }
                REQUIRE(wrong == 0);
                REQUIRE(seen.size() == 2 * dataset);  // every sample of both epochs...
                for (auto& [key, count] : seen) REQUIRE(count == 1);  // ...exactly once
              });
              REQUIRE(task.wait_for(120s) == std::future_status::ready);
              task.get();
            }
          }
        }
      }
    }
  }
}

TEST_CASE("device pipeline normalizes on the transfer stream into NCHW", "[device][pipeline][normalize]") {
  auto device = host_device();
  Config cfg = small_config(2, 2, 2);
  cfg.sample_bytes = 4 * 2 * 3;  // 4 high, 2 wide, 3 channels
  TransferConfig tc;
  tc.normalize = TransferConfig::Normalization{4, 2, 3, Normalize{}, DType::bfloat16};
  DevicePipeline dp(cfg, 9, test::fill_pattern, tc, device);
  std::size_t batches = 0;
  for (auto& b : dp.epoch(0)) {
    ++batches;
    REQUIRE(b.dtype() == DType::bfloat16);
    REQUIRE(b.shape() == std::vector<std::int64_t>{std::int64_t(b.size()), 3, 4, 2});
    const auto* out = static_cast<const std::uint16_t*>(b.data());
    for (std::size_t j = 0; j < b.size(); ++j) {
      std::vector<std::byte> px(cfg.sample_bytes);
      test::expected_bytes(cfg.seed, 0, b.host().indices[j], px);
      for (std::size_t c = 0; c < 3; ++c) {
        const auto a = channel_affine(Normalize{}.mean[c], Normalize{}.std[c]);
        for (std::size_t p = 0; p < 8; ++p) {
          REQUIRE(out[(j * 3 + c) * 8 + p] == float_to_bfloat16_bits(normalize_value(std::uint8_t(px[p * 3 + c]), a)));
        }
      }
    }
  }
  REQUIRE(batches == 3);
}

TEST_CASE("device pipeline rejects a normalize layout that does not match the samples", "[device][pipeline]") {
  auto device = host_device();
  Config cfg = small_config(1, 1, 1);
  TransferConfig tc;
  tc.normalize = TransferConfig::Normalization{4, 4, 3, Normalize{}, DType::float32};  // 48 bytes: fits
  REQUIRE_NOTHROW(DevicePipeline(cfg, 4, test::fill_pattern, tc, device));
  tc.normalize->width = 5;
  REQUIRE_THROWS_WITH(DevicePipeline(cfg, 4, test::fill_pattern, tc, device),
                      Catch::Contains("config: normalize layout 4x5x3 does not match sample_bytes 48"));
  tc.normalize->width = 4;
  tc.normalize->height = (std::size_t{1} << 62) + 4;  // x 4 x 3 wraps to 48
  REQUIRE_THROWS_WITH(DevicePipeline(cfg, 4, test::fill_pattern, tc, device), Catch::Contains("does not match"));
  tc.normalize->height = 4;
  tc.normalize->out_type = DType::uint8;
  REQUIRE_THROWS_WITH(DevicePipeline(cfg, 4, test::fill_pattern, tc, device), Catch::Contains("normalize.out_type"));
  tc.normalize->out_type = DType(9);
  REQUIRE_THROWS_WITH(DevicePipeline(cfg, 4, test::fill_pattern, tc, device), Catch::Contains("normalize.out_type"));
  tc.normalize->out_type = DType::float16;
  tc.normalize->mean_std.mean[1] = std::numeric_limits<float>::infinity();
  REQUIRE_THROWS_WITH(DevicePipeline(cfg, 4, test::fill_pattern, tc, device), Catch::Contains("normalize.mean"));
  tc.normalize->mean_std = Normalize{};
  tc.normalize->mean_std.std[2] = std::numeric_limits<float>::infinity();
  REQUIRE_THROWS_WITH(DevicePipeline(cfg, 4, test::fill_pattern, tc, device), Catch::Contains("normalize.std[2]"));
  tc.normalize->mean_std.std[2] = 1e-42f;  // > 0, but 1 / (255 std) is infinite: every output was NaN
  REQUIRE_THROWS_WITH(DevicePipeline(cfg, 4, test::fill_pattern, tc, device),
                      Catch::Contains("normalize.std[2] is too small"));
}

TEST_CASE("a device error on the delivery thread reaches the consumer with the call and file:line",
          "[device][pipeline][errors]") {
  auto faulty = std::make_shared<FaultyDevice>(host_device());
  faulty->copies_before_error = 2;
  Config cfg = small_config(2, 1, 2);
  cfg.epochs = 0;  // endless: only the error can end it
  DevicePipeline dp(cfg, 100, test::fill_pattern, {}, faulty);
  std::size_t delivered = 0;
  try {
    while (auto b = dp.next()) ++delivered;
    FAIL("the stream ended without the error");
  } catch (const PipelineError& e) {
    REQUIRE(e.stage() == "transfer");
    REQUIRE_THAT(e.what(), Catch::Contains("cudaMemcpyAsync(...) at cuda/fake.cu:1: injected failure"));
    REQUIRE_THROWS_AS(e.rethrow_cause(), DeviceError);  // the original type, for a caller that catches it
  }
  REQUIRE(delivered <= 2);  // the error may overtake batches already queued
  REQUIRE_THROWS_AS(dp.next(), PipelineError);  // and it sticks
}

TEST_CASE("a transfer that fails after its copy was enqueued lets the copy finish before the host buffer is recycled",
          "[device][pipeline][errors]") {
  using AfterCopy = FaultyDevice::AfterCopy;
  for (std::size_t slots : {1, 4}) {
    for (AfterCopy fault : {AfterCopy::normalize, AfterCopy::record, AfterCopy::synchronize}) {
      DYNAMIC_SECTION("slots " << slots << " failing call " << int(fault)) {
        DeviceConfig dc;
        dc.poison_released = true;  // a host buffer back in the pool is overwritten with 0xA5 at once
        auto faulty = std::make_shared<FaultyDevice>(host_device(dc));
        faulty->copy_delay_us = 30'000;  // the copy still reads the host buffer 30 ms after the step failed
        // With 4 slots the workers have batch 1 ready when batch 0's copy is enqueued, so a
        // failing synchronize (batch 0's finish) finds batch 1's copy in flight behind it.
        faulty->enqueue_delay_ms = 5;
        faulty->fail_after_copy = fault;
        Config cfg = small_config(1, 1, slots);
        TransferConfig tc;
        tc.normalize = TransferConfig::Normalization{4, 4, 3, Normalize{}, DType::float32};
        DevicePipeline dp(cfg, 8, test::fill_pattern, tc, faulty);
        REQUIRE_THROWS_WITH(dp.next(), Catch::Contains("injected failure after the copy"));
        if (slots == 4 && fault == AfterCopy::synchronize) REQUIRE(faulty->copies == 2);
        REQUIRE(faulty->copy_stream);
        faulty->synchronize(*faulty->copy_stream);  // the copy has run now, fix or no fix
        // The last copy moved its batch, not the poison (or the next batch) its buffer held after recycling.
        REQUIRE(faulty->copy_source.size() == cfg.batch_size * (cfg.sample_bytes + sizeof(std::int64_t)));  // pixels, labels
        REQUIRE(std::memcmp(faulty->copy_dst, faulty->copy_source.data(), faulty->copy_source.size()) == 0);
      }
    }
  }
}

TEST_CASE("an error while releasing a batch is reported by the next call", "[device][pipeline][errors]") {
  auto faulty = std::make_shared<FaultyDevice>(host_device());
  Config cfg = small_config(1, 1, 2);
  DevicePipeline dp(cfg, 20, test::fill_pattern, {}, faulty);
  auto b = dp.next();
  REQUIRE(b);
  faulty->fail_cpu_records = true;  // the consumer's release fails; the delivery thread's records go on
  b->reset();
  REQUIRE_THROWS_WITH(dp.next(), Catch::Contains("releasing a batch: cudaEventRecord(...) at cuda/fake.cu:2"));
}

TEST_CASE("a DeviceError thrown in a filler is recovered as a DeviceError at the consumer",
          "[device][pipeline][errors]") {
  Config cfg = small_config(2, 1, 2);
  DevicePipeline dp(cfg, 30, [](Sample& s) {
    test::fill_pattern(s);
    if (s.index == 5) throw DeviceError("cudaMemcpy(...) at filler.cpp:9: device lost");
  }, {}, host_device());
  try {
    while (dp.next()) {
    }
    FAIL("no error surfaced");
  } catch (const PipelineError& e) {
    REQUIRE(e.stage() == "worker");
    REQUIRE(e.sample() == 5);
    REQUIRE_THROWS_AS(e.rethrow_cause(), DeviceError);
    REQUIRE_THROWS_WITH(e.rethrow_cause(), Catch::Contains("device lost"));
  }
}

TEST_CASE("a device error in next() itself is a PipelineError, and it sticks", "[device][pipeline][errors]") {
  auto faulty = std::make_shared<FaultyDevice>(host_device());
  Config cfg = small_config(2, 1, 2);
  cfg.epochs = 0;  // endless: the delivery thread would go on were it not stopped
  DevicePipeline dp(cfg, 40, test::fill_pattern, {}, faulty);
  REQUIRE(dp.next());
  faulty->fail_cpu_waits = true;  // the consumer stream's wait on copied fails
  try {
    (void)dp.next();
    FAIL("no error");
  } catch (const PipelineError& e) {  // not a bare DeviceError: the header promises PipelineError
    REQUIRE(e.stage() == "consumer");
    REQUIRE_THROWS_AS(e.rethrow_cause(), DeviceError);  // which keeps it inside
    REQUIRE_THAT(e.what(), Catch::Contains("taking a batch: cudaStreamWaitEvent(...) at cuda/fake.cu:4"));
  }
  faulty->fail_cpu_waits = false;  // not sticky on the device: the pipeline must remember it
  REQUIRE_THROWS_WITH(dp.next(), Catch::Contains("taking a batch: cudaStreamWaitEvent"));
}

TEST_CASE("stop returns while the consumer holds every device slot", "[device][pipeline][stop]") {
  auto device = host_device();
  Config cfg = small_config(2, 1, 1);
  cfg.epochs = 0;
  auto dp = std::make_unique<DevicePipeline>(cfg, 50, test::fill_pattern, TransferConfig{}, device);
  auto held = dp->next();  // the only slot: the delivery thread now waits for it
  REQUIRE(held);
  auto stopper = std::async(std::launch::async, [&] { dp->stop(); });
  REQUIRE(stopper.wait_for(10s) == std::future_status::ready);
  REQUIRE_FALSE(dp->next());
  // The batch outlives its pipeline and still reads right.
  const Batch& h = held->host();
  const std::uint64_t epoch = h.epoch, index = h.indices[0];
  dp.reset();
  REQUIRE(sample_matches(cfg.seed, epoch, index, static_cast<const std::byte*>(held->data()), cfg.sample_bytes));
  held->reset();
}

TEST_CASE("the checks catch a transfer that does not wait for the consumer's release", "[device][pipeline][canary]") {
#if defined(__SANITIZE_THREAD__)
  SUCCEED("skipped under TSan: the broken protocol is a real data race, which TSan reports as such");
#else
  for (bool broken : {false, true}) {
    auto faulty = std::make_shared<FaultyDevice>(host_device());
    faulty->skip_waits = broken;
    auto consumer = faulty->create_stream();
    Config cfg = small_config(2, 1, 1);  // one slot: every copy reuses it
    cfg.epochs = 1;
    TransferConfig tc;
    tc.consumer_stream = consumer->native();
    std::size_t wrong = 0;
    // A 3 ms step: the broken transfer overwrites the slot long before the read
    // runs, unless a loaded machine stalls the delivery thread for the whole
    // epoch (1 run in 30 with both cores busy): the broken protocol gets up to
    // 5 epochs to show itself, the right one must be right in its one.
    for (int attempt = 0; attempt < (broken ? 5 : 1) && wrong == 0; ++attempt) {
      DevicePipeline dp(cfg, 24, test::fill_pattern, tc, faulty);
      wrong = run_stream_consumer(dp, *faulty, *consumer, cfg.seed, nullptr, 3000);
    }
    INFO("broken " << broken);
    if (broken) {
      REQUIRE(wrong > 0);
    } else {
      REQUIRE(wrong == 0);
    }
  }
#endif
}

// ---- the device-resident dataset

namespace {

struct Tensor {
  std::vector<std::byte> bytes;
  std::vector<std::int64_t> labels;
  HostSamples samples;
};

Tensor make_tensor(std::size_t rows, std::vector<std::size_t> row_shape, DType dtype) {
  Tensor t;
  t.samples.dtype = dtype;
  t.samples.rows = rows;
  t.samples.row_shape = std::move(row_shape);
  t.bytes.resize(rows * t.samples.row_bytes());
  Rng rng(3, 1, rows);
  for (auto& b : t.bytes) b = std::byte(rng.below(256));
  t.samples.data = t.bytes.data();
  for (std::size_t i = 0; i < rows; ++i) t.labels.push_back(std::int64_t(i % 10) - 1);
  return t;
}

}  // namespace

TEST_CASE("resident dataset: each batch equals direct indexing and an epoch covers every sample once",
          "[device][resident]") {
  auto device = host_device();
  for (DType dtype : {DType::uint8, DType::float32}) {
    for (std::size_t batch : {1, 7, 64}) {
      DYNAMIC_SECTION(dtype_name(dtype) << " batch " << batch) {
        Tensor t = make_tensor(50, {3, 5}, dtype);
        Config cfg;
        cfg.batch_size = batch;
        cfg.seed = 9;
        cfg.epochs = 3;
        ResidentDataset ds(device, t.samples, t.labels, cfg);
        const std::size_t row = t.samples.row_bytes();
        Sampler sampler({50, batch, 9, true, false, 0, 1, ShardPolicy::pad});
        std::map<std::uint64_t, std::set<std::uint64_t>> per_epoch;
        std::vector<std::uint64_t> epoch_orders[3];
        std::size_t batches = 0;
        while (auto b = ds.next()) {
          ++batches;
          REQUIRE(b->shape() == std::vector<std::int64_t>{std::int64_t(b->size()), 3, 5});
          for (std::size_t j = 0; j < b->size(); ++j) {
            const std::uint64_t i = b->indices()[j];
            REQUIRE(per_epoch[b->epoch].insert(i).second);  // never twice in an epoch
            epoch_orders[b->epoch].push_back(i);
            REQUIRE(std::memcmp(static_cast<const std::byte*>(b->data()) + j * row, t.bytes.data() + i * row, row) == 0);
            REQUIRE(b->labels()[j] == t.labels[i]);
          }
        }
        REQUIRE(batches == 3 * ((50 + batch - 1) / batch));
        for (std::uint64_t e = 0; e < 3; ++e) {
          REQUIRE(per_epoch[e].size() == 50);
          REQUIRE(epoch_orders[e] == sampler.epoch_order(e));  // the Sampler's order, as the pipeline's
        }
        REQUIRE(epoch_orders[0] != epoch_orders[1]);
      }
    }
  }
}

TEST_CASE("resident dataset: the gather is fused with normalize for uint8 images", "[device][resident]") {
  auto device = host_device();
  Tensor t = make_tensor(10, {4, 3, 3}, DType::uint8);
  Config cfg;
  cfg.batch_size = 4;
  cfg.epochs = 1;
  ResidentConfig rc;
  rc.normalize = TransferConfig::Normalization{4, 3, 3, Normalize{}, DType::float16};
  ResidentDataset ds(device, t.samples, t.labels, cfg, rc);
  std::size_t checked = 0;
  while (auto b = ds.next()) {
    REQUIRE(b->shape() == std::vector<std::int64_t>{std::int64_t(b->size()), 3, 4, 3});
    const auto* out = static_cast<const std::uint16_t*>(b->data());
    for (std::size_t j = 0; j < b->size(); ++j) {
      const auto* px = reinterpret_cast<const std::uint8_t*>(t.bytes.data()) + b->indices()[j] * 36;
      for (std::size_t c = 0; c < 3; ++c) {
        const auto a = channel_affine(Normalize{}.mean[c], Normalize{}.std[c]);
        for (std::size_t p = 0; p < 12; ++p) {
          REQUIRE(out[(j * 3 + c) * 12 + p] == float_to_half_bits(normalize_value(px[p * 3 + c], a)));
          ++checked;
        }
      }
    }
  }
  REQUIRE(checked == 10 * 36);
}

TEST_CASE("resident dataset: sharding, budget and held buffers", "[device][resident]") {
  auto device = host_device();
  Tensor t = make_tensor(11, {2}, DType::uint8);
  SECTION("ranks are disjoint and cover the dataset") {
    std::set<std::uint64_t> all;
    for (std::size_t rank = 0; rank < 3; ++rank) {
      Config cfg;
      cfg.batch_size = 2;
      cfg.epochs = 1;
      cfg.rank = rank;
      cfg.world_size = 3;
      cfg.shard_policy = ShardPolicy::drop;
      ResidentDataset ds(device, t.samples, t.labels, cfg);
      while (auto b = ds.next()) {
        for (auto i : b->indices()) REQUIRE(all.insert(i).second);
      }
    }
    REQUIRE(all.size() == 9);  // 11 dropped to a multiple of 3
  }
  SECTION("data over the budget is refused with the numbers") {
    ResidentConfig rc;
    rc.budget_bytes = 100;  // 11 * 2 + 11 * 8 = 110 bytes
    REQUIRE_THROWS_WITH(ResidentDataset(device, t.samples, t.labels, Config{}, rc),
                        Catch::Contains("110 bytes of samples and labels exceed budget_bytes (100 bytes)") &&
                            Catch::Contains("DevicePipeline"));
  }
  SECTION("sizes that wrap, a batch past the Config's limit and buffers past kMaxBuffers are refused") {
    // {2^62, 4} rows were 0 bytes: accepted, with batches of shape [n, 2^62, 4] over no memory.
    HostSamples wide = t.samples;
    wide.row_shape = {std::size_t{1} << 62, 4};
    REQUIRE(wide.row_bytes() == SIZE_MAX);
    REQUIRE_THROWS_WITH(ResidentDataset(device, wide, t.labels, Config{}), Catch::Contains("exceed budget_bytes"));
    Config big;
    big.batch_size = std::size_t{1} << 40;  // a bad_alloc before
    REQUIRE_THROWS_AS(ResidentDataset(device, t.samples, t.labels, big), ConfigError);
    ResidentConfig rc;
    rc.buffers = std::size_t{1} << 40;
    REQUIRE_THROWS_WITH(ResidentDataset(device, t.samples, t.labels, Config{}, rc), Catch::Contains("buffers must be 1 to"));
  }
  SECTION("labels must match the rows") {
    std::vector<std::int64_t> short_labels(10);
    REQUIRE_THROWS_WITH(ResidentDataset(device, t.samples, short_labels, Config{}),
                        Catch::Contains("10 labels for 11 samples"));
  }
  SECTION("taking a batch while every buffer is held is an error, releasing frees one") {
    ResidentConfig rc;
    rc.buffers = 2;
    Config cfg;
    cfg.batch_size = 2;
    ResidentDataset ds(device, t.samples, t.labels, cfg, rc);
    auto a = ds.next(), b = ds.next();
    REQUIRE_THROWS_AS(ds.next(), std::logic_error);
    a->reset();
    auto c = ds.next();
    REQUIRE(c);
    REQUIRE(c->index == 2);
  }
}

TEST_CASE("resident dataset from .npy files", "[device][resident][npy]") {
  const auto dir = std::filesystem::temp_directory_path() / ("conveyor-resident-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Tensor t = make_tensor(12, {2, 2}, DType::float32);
  const std::size_t shape[] = {12, 2, 2}, label_shape[] = {12};
  write_npy(dir / "x.npy", NpyType::float32, shape, t.bytes);
  write_npy(dir / "y.npy", NpyType::int64, label_shape, std::as_bytes(std::span(t.labels)));
  const NpyArray x = read_npy(dir / "x.npy");
  const auto y = read_npy_labels(dir / "y.npy");
  Config cfg;
  cfg.batch_size = 5;
  cfg.shuffle = false;
  cfg.epochs = 1;
  ResidentDataset ds(host_device(), host_samples(x), y, cfg);
  auto b = ds.next();
  REQUIRE(b->dtype() == DType::float32);
  REQUIRE(b->shape() == std::vector<std::int64_t>{5, 2, 2});
  REQUIRE(std::memcmp(b->data(), t.bytes.data(), 5 * 16) == 0);
  b->reset();
  const NpyArray wrong{NpyType::int32, {3}, std::vector<std::byte>(12)};
  REQUIRE_THROWS_WITH(host_samples(wrong), Catch::Contains("uint8 or float32, not int32"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("the consumer's stream waits on copied for every batch, and holding every slot is an error",
          "[device][pipeline]") {
  auto faulty = std::make_shared<FaultyDevice>(host_device());
  Config cfg = small_config(2, 1, 2);
  cfg.epochs = 1;
  DevicePipeline dp(cfg, 20, test::fill_pattern, {}, faulty);
  auto a = dp.next(), b = dp.next();  // both slots held
  REQUIRE(faulty->waits_on_cpu_stream == 2);  // protocol 6: one stream wait per batch taken
  REQUIRE_THROWS_WITH(dp.next(), Catch::Contains("all 2 device slots are held"));
  a->reset();
  std::size_t rest = 0;
  while (auto c = dp.next()) ++rest;
  REQUIRE(rest == 3);
  REQUIRE(faulty->waits_on_cpu_stream == 5);
  DeviceBatch empty;
  REQUIRE(empty.shape().empty());
  REQUIRE(empty.bytes() == 0);
}

TEST_CASE("the consumer may hold every buffer of the host pool; asking for one more is an error, not a hang",
          "[device][pipeline]") {
  // Each batch held keeps its host buffer (handed over, its bytes; copied, its
  // indices and labels): with 8 device slots but a pool of 4, a consumer
  // holding 4 leaves the workers none to fill.
  DeviceConfig handover;
  handover.host_transfer = HostTransfer::handover;
  Config cfg = small_config(1, 1, 8);
  cfg.host_buffers = 4;
  cfg.epochs = 1;
  DevicePipeline dp(cfg, 40, test::fill_pattern, {}, host_device(handover));
  REQUIRE(dp.device_slots() == 8);
  REQUIRE(dp.max_held() == 4);
  std::vector<std::optional<DeviceBatch>> held;
  for (int i = 0; i < 4; ++i) held.push_back(dp.next());
  REQUIRE(dp.held_slots() == 4);
  REQUIRE(dp.wait_ready(std::chrono::microseconds(0)));  // next() would not wait: it throws
  REQUIRE_THROWS_WITH(dp.next(), Catch::Contains("the consumer holds 4 batch(es), every buffer of the host pool"));
  held.front().reset();
  std::size_t rest = 0;
  while (auto b = dp.next()) ++rest;
  REQUIRE(rest == 6);
  // Copied, the same: max_held() said 8, and the 5th next() waited for ever
  // ("keep the previous batch" with host_buffers 1 hung at the 2nd).
  for (std::size_t buffers : {std::size_t(1), std::size_t(4)}) {
    cfg.host_buffers = buffers;
    DevicePipeline copied(cfg, 40, test::fill_pattern, {}, host_device());
    REQUIRE(copied.max_held() == buffers);
    std::vector<DeviceBatch> kept;
    for (std::size_t i = 0; i < buffers; ++i) kept.push_back(*copied.next());
    REQUIRE(copied.wait_ready(std::chrono::microseconds(0)));
    REQUIRE_THROWS_WITH(copied.next(), Catch::Contains("every buffer of the host pool"));
    kept.erase(kept.begin());
    REQUIRE(copied.next());
  }
  cfg.host_buffers = 0;  // the default pool is larger than the slots
  REQUIRE(DevicePipeline(cfg, 40, test::fill_pattern, {}, host_device()).max_held() == 8);
}

TEST_CASE("normalize through the pipeline with a delayed consumer stream keeps every output intact",
          "[device][pipeline][normalize]") {
  for (std::size_t workers : {1, 3}) {
    for (std::size_t slots : {1, 2, 4}) {
      DYNAMIC_SECTION("workers " << workers << " slots " << slots) {
        DeviceConfig dc;
        dc.max_delay_us = 40;  // every stream operation, the normalize stream's too
        dc.delay_seed = workers * 10 + slots;
        dc.poison_released = true;
        auto device = host_device(dc);
        auto consumer = device->create_stream();
        Config cfg = small_config(workers, 1, slots);
        cfg.sample_bytes = 2 * 4 * 3;
        TransferConfig tc;
        tc.consumer_stream = consumer->native();
        tc.normalize = TransferConfig::Normalization{2, 4, 3, Normalize{}, DType::float32};
        auto task = std::async(std::launch::async, [&] {
          DevicePipeline dp(cfg, 13, test::fill_pattern, tc, device);
          struct Read {
            std::uint64_t epoch;
            std::vector<std::uint64_t> indices;
            std::vector<float> values;
          };
          std::vector<std::unique_ptr<Read>> reads;
          while (auto b = dp.next()) {
            auto r = std::make_unique<Read>(Read{b->host().epoch, b->host().indices, std::vector<float>(b->bytes() / 4)});
            device->busy(100, *consumer);
            device->copy_to_host(r->values.data(), b->data(), b->bytes(), *consumer);
            reads.push_back(std::move(r));
          }  // each batch released right after its read was enqueued
          device->synchronize(*consumer);
          std::size_t checked = 0;
          for (auto& r : reads) {
            for (std::size_t j = 0; j < r->indices.size(); ++j) {
              std::vector<std::byte> px(cfg.sample_bytes);
              test::expected_bytes(cfg.seed, r->epoch, r->indices[j], px);
              for (std::size_t c = 0; c < 3; ++c) {
                const auto a = channel_affine(Normalize{}.mean[c], Normalize{}.std[c]);
                for (std::size_t p = 0; p < 8; ++p) {
                  REQUIRE(r->values[(j * 3 + c) * 8 + p] == normalize_value(std::uint8_t(px[p * 3 + c]), a));
                  ++checked;
                }
              }
            }
          }
          REQUIRE(checked == 2 * 13 * 24);
        });
        REQUIRE(task.wait_for(60s) == std::future_status::ready);
        task.get();
      }
    }
  }
}

TEST_CASE("the transfer keeps two copies in flight and normalizes on a stream of its own",
          "[device][pipeline][overlap]") {
  for (bool normalize : {false, true}) {
    DYNAMIC_SECTION("normalize " << normalize) {
      auto faulty = std::make_shared<FaultyDevice>(host_device());
      faulty->copy_delay_us = 3000;  // a slow link: the workers have the next batch ready long before
      Config cfg = small_config(2, 4, 4);
      cfg.sample_bytes = 2 * 4 * 3;
      TransferConfig tc;
      if (normalize) tc.normalize = TransferConfig::Normalization{2, 4, 3, Normalize{}, DType::float32};
      std::vector<std::size_t> copies_at_sync;
      {
        DevicePipeline dp(cfg, 40, test::fill_pattern, tc, faulty);  // 10 batches an epoch, 2 epochs
        std::size_t batches = 0;
        while (auto b = dp.next()) ++batches;
        REQUIRE(batches == 20);
        std::lock_guard lk(faulty->sync_mu);
        copies_at_sync = faulty->copies_at_sync;  // the delivery thread's finish() calls, one per batch
        if (normalize) {
          REQUIRE(faulty->normalize_stream);
          REQUIRE(faulty->normalize_stream != faulty->copy_stream);  // the copy engine never waits for the kernel
        }
      }
      REQUIRE(copies_at_sync.size() == 20);
      // The host waited for batch k's copy with batch k+1's already enqueued behind it.
      std::size_t overlapped = 0;
      for (std::size_t k = 0; k < copies_at_sync.size(); ++k) overlapped += copies_at_sync[k] >= k + 2;
      REQUIRE(overlapped >= 15);  // all but the few that found no batch ready
    }
  }
}

TEST_CASE("resident dataset validates its normalize and survives a batch that outlives it", "[device][resident]") {
  auto device = host_device();
  Tensor t = make_tensor(6, {2, 2, 4}, DType::uint8);
  ResidentConfig rc;
  rc.normalize = TransferConfig::Normalization{2, 2, 4, Normalize{}, DType::float32};
  REQUIRE_THROWS_WITH(ResidentDataset(device, t.samples, t.labels, Config{}, rc), Catch::Contains("normalize.channels"));
  Config cfg;
  cfg.batch_size = 2;
  ResidentBatch kept;
  {
    ResidentDataset ds(device, t.samples, t.labels, cfg);
    kept = *ds.next();
  }
  kept.reset();  // the dataset is gone: nothing to give back, and no crash
  REQUIRE_FALSE(kept);
}

TEST_CASE("batches released on other threads, as tensor deleters do, keep every sample intact",
          "[device][pipeline][threads]") {
  // The consumer hands each batch to a thread of its own, which checks it and
  // lets it go after a random pause, while the consumer already waits in
  // next() for the following one: releases race next() (under TSan in ./go test).
  for (HostTransfer mode : {HostTransfer::copy, HostTransfer::handover}) {
    for (std::size_t slots : {2, 3, 5}) {
      DYNAMIC_SECTION("mode " << int(mode) << " slots " << slots) {
        DeviceConfig dc;
        dc.host_transfer = mode;
        dc.poison_released = true;
        dc.max_delay_us = 30;
        dc.delay_seed = slots;
        auto device = host_device(dc);
        auto task = std::async(std::launch::async, [&] {
          Config cfg = small_config(2, 2, slots);
          DevicePipeline dp(cfg, 31, test::fill_pattern, TransferConfig{}, device);
          std::mutex mu;
          std::map<std::pair<std::uint64_t, std::uint64_t>, int> seen;
          std::atomic<std::size_t> wrong{0};
          std::deque<std::thread> releasers;  // at most slots - 1 batches out, so next() never finds all held
          std::uint64_t n = 0;
          while (true) {
            if (releasers.size() == slots - 1) {
              releasers.front().join();
              releasers.pop_front();
            }
            auto b = dp.next();
            if (!b) break;
            releasers.emplace_back([&, batch = std::move(*b), pause = (n++ * 37) % 150]() mutable {
              const Batch& h = batch.host();
              for (std::size_t j = 0; j < batch.size(); ++j) {
                const auto* p = static_cast<const std::byte*>(batch.data()) + j * cfg.sample_bytes;
                if (!sample_matches(cfg.seed, h.epoch, h.indices[j], p, cfg.sample_bytes)) ++wrong;
                std::lock_guard lk(mu);
                ++seen[{h.epoch, h.indices[j]}];
              }
              std::this_thread::sleep_for(std::chrono::microseconds(pause));
              batch.reset();  // the release, on this thread
            });
          }
          for (auto& t : releasers) t.join();
          REQUIRE(wrong == 0);
          REQUIRE(seen.size() == 2 * 31);
          for (auto& [key, count] : seen) REQUIRE(count == 1);
        });
        REQUIRE(task.wait_for(120s) == std::future_status::ready);
        task.get();
      }
    }
  }
}

TEST_CASE("resident dataset: a failed release keeps its slot out and is thrown by the next call",
          "[device][resident][errors]") {
  auto faulty = std::make_shared<FaultyDevice>(host_device());
  Tensor t = make_tensor(12, {4}, DType::uint8);
  Config cfg;
  cfg.batch_size = 2;
  ResidentDataset ds(faulty, t.samples, t.labels, cfg);
  auto b = ds.next();
  REQUIRE(b);
  faulty->fail_cpu_records = true;  // the release's record on the consumer's (CPU) stream fails
  b->reset();
  faulty->fail_cpu_records = false;  // not sticky: later calls would succeed, and must not hide it
  REQUIRE_THROWS_WITH(ds.next(), Catch::Contains("releasing a batch: cudaEventRecord(...) at cuda/fake.cu:2"));
  REQUIRE_THROWS_AS(ds.next(), DeviceError);
}

TEST_CASE("labels cross the bus in the batch's one copy, 8-byte aligned after the pixels", "[device][pipeline][labels]") {
  // A pageable labels.to(device) would synchronise every step, so the
  // delivery thread writes the labels after the pixels in the pinned buffer
  // and the one copy moves both.
  // 13: the labels need padding to align; 0: labels only (the pool allocated nothing for them, a segfault)
  for (std::size_t sample_bytes : {std::size_t(0), std::size_t(13), std::size_t(48)}) {
    for (HostTransfer mode : {HostTransfer::copy, HostTransfer::handover}) {
      DYNAMIC_SECTION("sample_bytes " << sample_bytes << " mode " << int(mode)) {
        DeviceConfig dc;
        dc.host_transfer = mode;
        dc.poison_released = true;
        auto faulty = std::make_shared<FaultyDevice>(host_device(dc));
        Config cfg = small_config(2, 2, 1);  // one slot: the copy seen is the held batch's
        cfg.batch_size = 5;
        cfg.sample_bytes = sample_bytes;
        const auto fill = [](Sample& s) {
          if (s.index % 7 == 3) return s.skip("skipped on purpose");  // short, compacted batches too
          test::fill_pattern(s);
        };
        DevicePipeline dp(cfg, 23, fill, TransferConfig{}, faulty);
        std::size_t seen = 0;
        while (auto b = dp.next()) {
          const Batch& h = b->host();
          const std::size_t n = b->size();
          const std::size_t at = (n * sample_bytes + 7) / 8 * 8;
          REQUIRE(reinterpret_cast<std::uintptr_t>(b->labels()) % alignof(std::int64_t) == 0);
          REQUIRE(reinterpret_cast<const std::byte*>(b->labels()) == static_cast<const std::byte*>(b->data()) + at);
          for (std::size_t j = 0; j < n; ++j) REQUIRE(b->labels()[j] == std::int64_t(h.indices[j] * 3));
          if (mode == HostTransfer::copy) {
            REQUIRE(b->labels() != h.labels.data());
            REQUIRE(faulty->copy_dst == b->data());  // one copy per batch: pixels and labels
            REQUIRE(faulty->copy_source.size() == at + n * sizeof(std::int64_t));
            REQUIRE(std::memcmp(faulty->copy_source.data() + at, h.labels.data(), n * sizeof(std::int64_t)) == 0);
          }
          seen += n + h.skipped.size();
        }
        REQUIRE(seen == 2 * 23);
      }
    }
  }
}

TEST_CASE("a batch also used on a side stream is not refilled until that stream is done (record_stream)",
          "[device][pipeline][streams]") {
  // The consumer reads each batch on a side stream that is slow to get to it,
  // and releases the batch at once. Poisoning marks a slot refilled (or its
  // release run) too early: with record_stream the side stream's reads all see
  // the batch; without it (the canary) they see the poison.
  for (bool record : {true, false}) {
#if defined(__SANITIZE_THREAD__)
    if (!record) continue;  // the canary is a real data race, which TSan reports as such
#endif
    DYNAMIC_SECTION("record_stream " << record) {
      DeviceConfig dc;
      dc.poison_released = true;
      auto device = host_device(dc);
      auto consumer = device->create_stream();
      auto side = device->create_stream();
      TransferConfig tc;
      tc.consumer_stream = consumer->native();
      Config cfg = small_config(2, 1, 1);
      DevicePipeline dp(cfg, 12, test::fill_pattern, tc, device);
      auto ready = device->create_event(EventKind::sync);
      StreamReads reads;
      while (auto b = dp.next()) {
        device->record(*ready, *consumer);  // the batch is ready on the consumer stream: the side stream waits for it
        device->wait(*side, *ready);
        read_on(*device, *side, *b, 2000, reads);
        if (record) b->record_stream(side->native());
        b->reset();
      }
      device->synchronize(*side);
      device->synchronize(*consumer);
      const std::size_t wrong = wrong_samples(reads, cfg.seed, cfg.sample_bytes);
      if (record) {
        REQUIRE(wrong == 0);
      } else {
        REQUIRE(wrong > 0);  // the canary: the test sees a release that does not wait for the side stream
      }
    }
  }
}

TEST_CASE("current_consumer_stream: each batch is ready on, and released from, the stream asked at next()",
          "[device][pipeline][streams]") {
  DeviceConfig dc;
  dc.poison_released = true;
  auto device = host_device(dc);
  std::vector<std::unique_ptr<Stream>> streams;
  streams.push_back(device->create_stream());
  streams.push_back(device->create_stream());
  std::size_t asked = 0;
  TransferConfig tc;
  tc.current_consumer_stream = [&] { return streams[asked++ % 2]->native(); };  // the step switches streams
  Config cfg = small_config(2, 2, 2);
  DevicePipeline dp(cfg, 14, test::fill_pattern, tc, device);
  StreamReads reads;
  while (auto b = dp.next()) {
    read_on(*device, *streams[(asked - 1) % 2], *b, 500, reads);  // on the stream this batch was given
    b->reset();  // released at once: only consumed, recorded on that stream, keeps the slot
  }
  for (auto& s : streams) device->synchronize(*s);
  REQUIRE(asked == reads.size());  // asked once per batch
  std::map<std::pair<std::uint64_t, std::uint64_t>, int> seen;
  const std::size_t wrong = wrong_samples(reads, cfg.seed, cfg.sample_bytes, &seen);
  std::size_t samples = 0;
  for (auto& [key, count] : seen) samples += std::size_t(count);
  REQUIRE(samples == 2 * 14);
  REQUIRE(wrong == 0);
}

TEST_CASE("a consumer bound by its work on the device is named the bottleneck, not the transfer",
          "[device][pipeline][stats]") {
  // The consumer's thread only enqueues a 4 ms step on its stream and releases the
  // batch: its thread is idle, while the transfer waits for the slots the step
  // still reads. Those waits are the consumer's time (blocked), so the report
  // names the consumer, as on a GPU whose training step is the limit.
  auto device = host_device();
  auto stream = device->create_stream();
  TransferConfig tc;
  tc.consumer_stream = stream->native();
  Config cfg = small_config(2, 2, 2);
  cfg.epochs = 1;
  DevicePipeline dp(cfg, 120, test::fill_pattern, tc, device);  // 30 batches, 120 ms of steps
  REQUIRE(run_stream_consumer(dp, *device, *stream, cfg.seed, nullptr, 4000) == 0);
  const PipelineStats st = dp.stats();
  const StageStats* transfer = nullptr;
  for (const auto& s : st.stages) {
    if (s.name == "transfer") transfer = &s;
  }
  REQUIRE(transfer);
  CHECK(transfer->busy_fraction() < 0.3);
  CHECK(transfer->busy_s > 0);  // its copies: the waits alone are blocked
  CHECK(transfer->consumer_wait_fraction() > 0.5);
  REQUIRE(st.bottleneck()->name == "consumer");
  REQUIRE_THAT(st.bottleneck_summary(), Catch::Contains("the transfer waited"));
}

TEST_CASE("device pipeline: an interrupt while the pools are built abandons the start, and a later one starts as ever",
          "[device][error]") {
  for (const HostTransfer transfer : {HostTransfer::copy, HostTransfer::handover}) {
    DeviceConfig dc;
    dc.host_transfer = transfer;
    auto device = host_device(dc);
    Config cfg = small_config(2, 2, 2);
    cfg.sample_bytes = kTouchChunk / 4 + 1;  // a buffer of 4 samples takes two chunks to touch
    TransferConfig tc;
    tc.normalize = std::nullopt;
    for (const int at : {1, 2, 3, 5, 9, 14}) {  // before the slots, inside one, between buffers, in the host pool
      int polls = 0;
      tc.interrupted = [&] { return ++polls == at; };
      CHECK_THROWS_AS(DevicePipeline(cfg, 8, test::fill_pattern, tc, device), Interrupted);
    }
    tc.interrupted = [] { return false; };
    DevicePipeline dp(cfg, 8, test::fill_pattern, tc, device);
    auto b = dp.next();
    REQUIRE(b);
    CHECK(b->size() == 4);
  }
}
