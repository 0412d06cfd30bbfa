// The CUDA backend on a real GPU: kernels against the host backend's results
// (the same __host__ __device__ math, so bit for bit), the slot protocol end to
// end with a consumer stream that reads each batch after a busy kernel, and
// errors that name the CUDA call and file:line.
//
// Without a device the whole program skips (tests/cuda_main.cpp): it prints one
// line saying why and exits 77, which CTest reports as "Skipped".
#include "catch_compat.h"
#include <cstdio>
#if __has_include(<cuda_runtime.h>)
#include <cuda.h>          // the driver's types, for the device guard's tests
#include <cuda_runtime.h>  // to leave an error behind as a caller's own call would
#endif
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "device/device.h"
#include "device/device_pipeline.h"
#include "device/erase_step.h"
#include "device/kernels/busy.h"
#include "device/kernels/erase.h"
#include "device/kernels/gather.h"
#include "device/kernels/mix.h"
#include "device/kernels/normalize.h"
#include "device/mix_step.h"
#include "device/resident.h"
#include "gpu_decode/jpeg_batch_decoder.h"
#include "gpu_decode/step.h"
#include "image_writers.h"
#include "image/gpu_decode_plan.h"
#include "image/image_ops.h"
#include "image/mixing.h"
#include "image/random_erasing.h"
#include "support.h"

using namespace conveyor;

namespace {

std::shared_ptr<Device> gpu() {
  DeviceConfig cfg;
  cfg.backend = BackendChoice::cuda;
  cfg.poison_released = true;
  return open_device(cfg);
}
std::shared_ptr<Device> cpu() {
  DeviceConfig cfg;
  cfg.backend = BackendChoice::host;
  return open_device(cfg);
}

// Runs `job` on `device` with device copies of its input and returns the output bytes.
std::vector<std::byte> run_normalize(Device& device, const std::vector<std::uint8_t>& src,
                                     const std::vector<std::uint64_t>& indices, NormalizeJob job, std::size_t out_bytes) {
  auto stream = device.create_stream();
  auto d_src = device.allocate(src.size());
  auto d_out = device.allocate(out_bytes);
  auto d_idx = device.allocate(std::max<std::size_t>(1, indices.size() * 8));
  device.copy_to_device(d_src->data(), src.data(), src.size(), *stream);
  device.copy_to_device(d_idx->data(), indices.data(), indices.size() * 8, *stream);
  job.src = static_cast<const std::uint8_t*>(d_src->data());
  job.dst = d_out->data();
  job.indices = indices.empty() ? nullptr : static_cast<const std::uint64_t*>(d_idx->data());
  kernels::normalize(device, job, *stream);
  std::vector<std::byte> out(out_bytes);
  device.copy_to_host(out.data(), d_out->data(), out_bytes, *stream);
  device.synchronize(*stream);
  return out;
}

// Runs `job` on `device` over device copies of `data` and `labels`; returns the
// mixed data and the soft labels.
std::pair<std::vector<std::byte>, std::vector<float>> run_mix(Device& device, const std::vector<std::byte>& data,
                                                               const std::vector<std::int64_t>& labels, MixJob job) {
  auto stream = device.create_stream();
  auto d_data = device.allocate(data.size());
  auto d_labels = device.allocate(labels.size() * sizeof(std::int64_t));
  auto d_soft = device.allocate(job.samples * job.classes * sizeof(float));
  device.copy_to_device(d_data->data(), data.data(), data.size(), *stream);
  device.copy_to_device(d_labels->data(), labels.data(), labels.size() * sizeof(std::int64_t), *stream);
  job.data = d_data->data();
  job.labels = static_cast<const std::int64_t*>(d_labels->data());
  job.soft = static_cast<float*>(d_soft->data());
  kernels::mix(device, job, *stream);
  std::vector<std::byte> out(data.size());
  std::vector<float> soft(job.samples * job.classes);
  device.copy_to_host(out.data(), d_data->data(), out.size(), *stream);
  device.copy_to_host(soft.data(), d_soft->data(), soft.size() * sizeof(float), *stream);
  device.synchronize(*stream);
  return {out, soft};
}

// Runs `job` on `device` over device copies of `data` and `boxes`; returns the erased data.
std::vector<std::byte> run_erase(Device& device, const std::vector<std::byte>& data, const std::vector<EraseBox>& boxes,
                                 EraseJob job) {
  auto stream = device.create_stream();
  auto d_data = device.allocate(data.size());
  auto d_boxes = device.allocate(boxes.size() * sizeof(EraseBox));
  device.copy_to_device(d_data->data(), data.data(), data.size(), *stream);
  device.copy_to_device(d_boxes->data(), boxes.data(), boxes.size() * sizeof(EraseBox), *stream);
  job.data = d_data->data();
  job.boxes = static_cast<const EraseBox*>(d_boxes->data());
  kernels::erase(device, job, *stream);
  std::vector<std::byte> out(data.size());
  device.copy_to_host(out.data(), d_data->data(), out.size(), *stream);
  device.synchronize(*stream);
  return out;
}

// n x channels x height x width elements of `type`, each the bits of a value in [-2.5, 2.7).
std::vector<std::byte> normalized_values(DType type, std::size_t elements, std::uint64_t seed) {
  const std::size_t size = dtype_size(type);
  std::vector<std::byte> out(elements * size);
  Rng rng(seed, 0, 0);
  for (std::size_t i = 0; i < elements; ++i) {
    const float v = float(rng.uniform(-2.5, 2.7));
    const std::uint32_t bits = type == DType::float32   ? float_bits(v)
                               : type == DType::float16 ? float_to_half_bits(v)
                               : type == DType::bfloat16 ? float_to_bfloat16_bits(v)
                                                         : std::uint32_t(rng.below(256));
    std::memcpy(out.data() + i * size, &bits, size);
  }
  return out;
}

}  // namespace

TEST_CASE("auto picks the GPU and says which", "[cuda]") {
  auto d = open_device({});
  REQUIRE(d->backend() == Backend::cuda);
  REQUIRE_THAT(d->describe(), Catch::Contains("cuda backend: device 0"));
}

TEST_CASE("the normalize kernel gives the host backend's bits for all three types, with and without a gather, dense or strided",
          "[cuda][normalize]") {
  auto g = gpu(), c = cpu();
  const std::size_t n = 5, h = 17, w = 13, ch = 3, apart = h * w * ch + 37;  // a view's samples, 37 bytes of others between
  std::vector<std::uint8_t> src(n * apart);
  Rng rng(4, 5, 6);
  for (auto& v : src) v = static_cast<std::uint8_t>(rng.below(256));
  for (const std::size_t stride : {std::size_t(0), apart}) {
    for (bool gathered : {false, true}) {
      std::vector<std::uint64_t> idx;
      if (gathered) idx = {4, 0, 0, 2};
      const std::size_t out_n = gathered ? idx.size() : n;
      for (DType t : {DType::float32, DType::float16, DType::bfloat16}) {
        INFO(dtype_name(t) << " gathered " << gathered << " stride " << stride);
        NormalizeJob job;
        job.samples = out_n;
        job.height = h;
        job.width = w;
        job.channels = ch;
        job.src_stride = stride;
        job.out_type = t;
        for (std::size_t k = 0; k < ch; ++k) job.affine[k] = channel_affine(Normalize{}.mean[k], Normalize{}.std[k]);
        const std::size_t bytes = out_n * ch * h * w * dtype_size(t);
        REQUIRE(run_normalize(*g, src, idx, job, bytes) == run_normalize(*c, src, idx, job, bytes));
      }
    }
  }
}

TEST_CASE("the mix kernel gives the host twin's bits: MixUp and CutMix, all three types, the soft labels",
          "[cuda][mix]") {
  auto g = gpu(), c = cpu();
  const std::size_t channels = 3, height = 37, width = 29, classes = 10;
  for (const std::size_t n : {std::size_t(7), std::size_t(1)}) {
    std::vector<std::int64_t> labels(n);
    for (std::size_t j = 0; j < n; ++j) labels[j] = std::int64_t((j * 7) % classes);
    for (const DType t : {DType::float32, DType::float16, DType::bfloat16}) {
      for (const bool cut : {false, true}) {
        INFO(n << " samples, " << dtype_name(t) << (cut ? " CutMix" : " MixUp"));
        const auto data = normalized_values(t, n * channels * height * width, 3 + std::uint64_t(t));
        MixJob job;
        job.samples = n;
        job.channels = channels;
        job.height = height;
        job.width = width;
        job.type = t;
        job.cut = cut;
        job.own = 0.3137f;
        job.other = 1.f - 0.3137f;
        job.x1 = cut ? 3 : 0;
        job.y1 = cut ? 5 : 0;
        job.x2 = cut ? 29 : std::uint32_t(width);  // CutMix's box touches the right edge
        job.y2 = cut ? 20 : std::uint32_t(height);
        job.classes = classes;
        const auto on_gpu = run_mix(*g, data, labels, job), on_host = run_mix(*c, data, labels, job);
        REQUIRE(on_gpu.first == on_host.first);
        REQUIRE(on_gpu.second == on_host.second);
        if (n > 1) REQUIRE(on_gpu.first != data);
      }
    }
  }
}

TEST_CASE("the erase kernel gives the host twin's bits for every type, boxes at the edges and empty ones",
          "[cuda][erase]") {
  auto g = gpu(), c = cpu();
  const std::size_t n = 4, channels = 3, height = 23, width = 31;
  const std::vector<EraseBox> boxes{{0, 0, 23, 1}, {0, 0, 0, 0}, {22, 30, 1, 1}, {4, 9, 11, 22}};
  for (const DType t : {DType::float32, DType::float16, DType::bfloat16, DType::uint8}) {
    INFO(dtype_name(t));
    const auto data = normalized_values(t, n * channels * height * width, 17 + std::uint64_t(t));
    EraseJob job;
    job.samples = n;
    job.channels = channels;
    job.height = height;
    job.width = width;
    job.type = t;
    job.value[0] = 0.f;
    job.value[1] = -1.7f;
    job.value[2] = 2.3f;
    const auto on_gpu = run_erase(*g, data, boxes, job);
    REQUIRE(on_gpu == run_erase(*c, data, boxes, job));
    REQUIRE(on_gpu != data);
  }
}

TEST_CASE("RandomErasing and MixUp/CutMix through the pipeline on a GPU: the host backend's batches, soft labels and "
          "lambdas",
          "[cuda][mix][erase][pipeline]") {
  const std::size_t height = 12, width = 10, channels = 3, dataset = 37, classes = 3 * (dataset - 1) + 1;
  BatchMixing mixing;
  mixing.mixup = MixUp{0.4};
  mixing.cutmix = CutMix{1.0};
  mixing.num_classes = std::int64_t(classes);
  RandomErasing erasing;
  erasing.p = 0.5;
  using Key = std::pair<std::uint64_t, std::uint64_t>;
  struct Delivered {
    std::vector<std::byte> data;
    std::vector<float> soft;
    std::optional<double> lambda;
    bool operator==(const Delivered&) const = default;
  };
  const auto run = [&](const std::shared_ptr<Device>& device, std::size_t workers) {
    Config cfg;
    cfg.batch_size = 8;
    cfg.sample_bytes = height * width * channels;
    cfg.workers = workers;
    cfg.epochs = 2;
    cfg.seed = 5;
    TransferConfig tc;
    tc.normalize = TransferConfig::Normalization{height, width, channels, Normalize{}, DType::float16};
    tc.batch_steps.push_back(Erase{erasing});
    tc.batch_steps.push_back(Mix{mixing});
    DevicePipeline dp(cfg, dataset, test::fill_pattern, tc, device);
    std::map<Key, Delivered> out;
    auto stream = device->create_stream();
    while (auto b = dp.next()) {
      Delivered d;
      d.data.resize(b->bytes());
      const BatchTensor* soft = b->extras().tensor(kSoftLabels);
      REQUIRE(soft);
      d.soft.resize(b->size() * classes);
      device->copy_to_host(d.data.data(), b->data(), d.data.size(), *stream);
      device->copy_to_host(d.soft.data(), soft->data, d.soft.size() * sizeof(float), *stream);
      device->synchronize(*stream);
      d.lambda = b->extras().value(kMixLambda);
      REQUIRE(d.lambda);
      out[{b->host().epoch, b->host().index}] = std::move(d);
    }
    return out;
  };
  const auto on_host = run(cpu(), 2);
  REQUIRE(on_host.size() == 2 * ((dataset + 7) / 8));
  REQUIRE(run(gpu(), 2) == on_host);
  REQUIRE(run(gpu(), 5) == on_host);
}

TEST_CASE("the gather kernel equals direct indexing for every word size", "[cuda][gather]") {
  auto g = gpu();
  auto stream = g->create_stream();
  for (std::size_t row_bytes : {1, 3, 4, 12, 16, 48, 1000}) {
    INFO("row_bytes " << row_bytes);
    const std::size_t rows = 37;
    std::vector<std::byte> src(rows * row_bytes);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = std::byte(i * 13 + 7);
    std::vector<std::uint64_t> idx{36, 0, 5, 5, 17};
    auto d_src = g->allocate(src.size());
    auto d_dst = g->allocate(idx.size() * row_bytes);
    auto d_idx = g->allocate(idx.size() * 8);
    g->copy_to_device(d_src->data(), src.data(), src.size(), *stream);
    g->copy_to_device(d_idx->data(), idx.data(), idx.size() * 8, *stream);
    kernels::gather(*g,
                    GatherJob{static_cast<const std::byte*>(d_src->data()), static_cast<std::byte*>(d_dst->data()),
                              static_cast<const std::uint64_t*>(d_idx->data()), idx.size(), row_bytes},
                    *stream);
    std::vector<std::byte> out(idx.size() * row_bytes);
    g->copy_to_host(out.data(), d_dst->data(), out.size(), *stream);
    g->synchronize(*stream);
    for (std::size_t k = 0; k < idx.size(); ++k) {
      REQUIRE(std::memcmp(out.data() + k * row_bytes, src.data() + idx[k] * row_bytes, row_bytes) == 0);
    }
  }
}

TEST_CASE("the slot protocol on a GPU: a consumer stream that reads after a busy kernel sees every batch intact",
          "[cuda][pipeline]") {
  auto g = gpu();
  auto consumer = g->create_stream();
  for (std::size_t slots : {1, 2, 4}) {
    INFO("slots " << slots);
    Config cfg;
    cfg.batch_size = 8;
    cfg.sample_bytes = 4096;
    cfg.workers = 2;
    cfg.device_buffers = slots;
    cfg.epochs = 2;
    cfg.seed = 3;
    TransferConfig tc;
    tc.consumer_stream = consumer->native();
    DevicePipeline dp(cfg, 61, test::fill_pattern, tc, g);
    std::vector<std::pair<std::uint64_t, std::vector<std::uint64_t>>> ids;
    // Pinned destinations: a copy into pageable memory would block the host until
    // it ran, hiding a missing consumed-wait; into pinned memory it is truly async.
    const std::size_t batches = 2 * ((61 + 7) / 8);
    const std::size_t batch_bytes = cfg.batch_size * cfg.sample_bytes;
    std::byte* pinned = static_cast<std::byte*>(g->allocate_host(batches * batch_bytes));
    std::vector<std::byte*> reads;
    while (auto b = dp.next()) {
      REQUIRE(reads.size() < batches);
      reads.push_back(pinned + reads.size() * batch_bytes);
      ids.emplace_back(b->host().epoch, b->host().indices);
      kernels::busy(*g, 200, *consumer);  // the training step holds the slot for a while
      g->copy_to_host(reads.back(), b->data(), b->bytes(), *consumer);
      b->reset();  // consumed is recorded after the read above, on the same stream
    }
    g->synchronize(*consumer);
    std::map<std::pair<std::uint64_t, std::uint64_t>, int> seen;
    for (std::size_t k = 0; k < reads.size(); ++k) {
      for (std::size_t j = 0; j < ids[k].second.size(); ++j) {
        std::vector<std::byte> want(cfg.sample_bytes);
        test::expected_bytes(cfg.seed, ids[k].first, ids[k].second[j], want);
        REQUIRE(std::memcmp(want.data(), reads[k] + j * cfg.sample_bytes, cfg.sample_bytes) == 0);
        ++seen[{ids[k].first, ids[k].second[j]}];
      }
    }
    REQUIRE(seen.size() == 2 * 61);
    g->free_host(pinned);
  }
}

TEST_CASE("the resident dataset on a GPU matches the host backend", "[cuda][resident]") {
  std::vector<std::byte> bytes(40 * 24);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(i * 5 + 1);
  std::vector<std::int64_t> labels(40);
  for (std::size_t i = 0; i < 40; ++i) labels[i] = std::int64_t(i);
  HostSamples s{bytes.data(), DType::uint8, 40, {2, 4, 3}};
  Config cfg;
  cfg.batch_size = 16;
  cfg.epochs = 2;
  ResidentConfig rc;
  rc.normalize = TransferConfig::Normalization{2, 4, 3, Normalize{}, DType::float16};
  auto g = gpu();
  auto stream = g->create_stream();
  rc.consumer_stream = stream->native();
  ResidentDataset on_gpu(g, s, labels, cfg, rc);
  rc.consumer_stream = nullptr;
  ResidentDataset on_cpu(cpu(), s, labels, cfg, rc);
  for (;;) {
    auto a = on_gpu.next();
    auto b = on_cpu.next();
    REQUIRE(bool(a) == bool(b));
    if (!a) break;
    std::vector<std::byte> out(a->size() * 24 * 2);
    std::vector<std::int64_t> out_labels(a->size());
    g->copy_to_host(out.data(), a->data(), out.size(), *stream);
    g->copy_to_host(out_labels.data(), a->labels(), out_labels.size() * 8, *stream);
    g->synchronize(*stream);
    REQUIRE(std::memcmp(out.data(), b->data(), out.size()) == 0);
    REQUIRE(std::memcmp(out_labels.data(), b->labels(), out_labels.size() * 8) == 0);
  }
}

TEST_CASE("a failing CUDA call names the call, file:line and cudaGetErrorString", "[cuda][errors]") {
  auto g = gpu();
  auto stream = g->create_stream();
  std::vector<std::byte> host(64);
  try {
    // A null destination is refused at the call (cudaErrorInvalidValue), not
    // asynchronously: the context stays usable for the tests after this one.
    g->copy_to_device(nullptr, host.data(), host.size(), *stream);
    FAIL("no error");
  } catch (const DeviceError& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("cudaMemcpyAsync(") && Catch::Contains("device/cuda_device.cu:") &&
                               Catch::Contains("cudaErrorInvalidValue: invalid argument"));
  }
}

TEST_CASE("the busy kernel lasts as long as asked, by timing events", "[cuda][busy]") {
  auto g = gpu();
  auto stream = g->create_stream();
  auto t0 = g->create_event(EventKind::timing), t1 = g->create_event(EventKind::timing);
  g->record(*t0, *stream);
  kernels::busy(*g, 2000, *stream);
  g->record(*t1, *stream);
  g->synchronize(*t1);
  REQUIRE(g->elapsed_ms(*t0, *t1) >= 2.0);
}

TEST_CASE("an error already reported, or left by the caller, is not reported again by a launch", "[cuda][errors]") {
  auto g = gpu();
  auto stream = g->create_stream();
  std::vector<std::byte> host(64);
  SECTION("a failed call the check threw for") {
    REQUIRE_THROWS_AS(g->copy_to_device(nullptr, host.data(), host.size(), *stream), DeviceError);
  }
#if __has_include(<cuda_runtime.h>)
  SECTION("a failed call that bypassed the check (the caller's own)") {
    REQUIRE(cudaMemcpyAsync(nullptr, host.data(), host.size(), cudaMemcpyHostToDevice,
                            static_cast<cudaStream_t>(stream->native())) == cudaErrorInvalidValue);
  }
#endif
  // Either way the error was not sticky: this launch is fine and must say so.
  REQUIRE_NOTHROW(kernels::busy(*g, 10, *stream));
  REQUIRE_NOTHROW(g->synchronize(*stream));
}

#if __has_include(<cuda_runtime.h>)
TEST_CASE("the per-thread default stream is refused: a release may run on another thread", "[cuda][streams]") {
  auto g = gpu();
  REQUIRE_THROWS_WITH(g->wrap_stream(cudaStreamPerThread), Catch::Contains("cudaStreamPerThread"));
  REQUIRE_NOTHROW(g->wrap_stream(nullptr));
}

#if CUDART_VERSION >= 12080  // cudaStreamGetDevice
TEST_CASE("a stream of the pipeline's own device is taken", "[cuda][streams]") {
  auto g = gpu();
  auto s = g->create_stream();
  REQUIRE_NOTHROW(g->wrap_stream(s->native()));
  REQUIRE_NOTHROW(g->wrap_stream(cudaStreamLegacy));
}
#endif

#if CUDART_VERSION >= 12050  // cudaGetDriverEntryPointByVersion
namespace {

// The driver calls these tests use, reached as the library reaches them (no libcuda link).
struct TestDriver {
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*ctx_create)(CUcontext*, CUctxCreateParams*, unsigned int, CUdevice) = nullptr;  // cuCtxCreate_v4 (12.5)
  CUresult (*ctx_destroy)(CUcontext) = nullptr;
};

template <typename F>
void resolve(const char* name, int version, F& f) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  INFO(name);
  REQUIRE(cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found) == cudaSuccess);
  REQUIRE(found == cudaDriverEntryPointSuccess);
  f = reinterpret_cast<F>(fn);
}

TestDriver test_driver() {
  TestDriver d;
  resolve("cuCtxGetCurrent", 12000, d.ctx_get_current);
  resolve("cuDeviceGet", 12000, d.device_get);
  resolve("cuCtxCreate", 12050, d.ctx_create);
  resolve("cuCtxDestroy", 12000, d.ctx_destroy);
  return d;
}

// Device work from the calling thread: every kind of call the guard wraps
// (a handle's creation, calls, and destructors).
void some_work(Device& g) {
  auto s = g.create_stream();
  auto e = g.create_event();
  auto b = g.allocate(64);
  g.set_bytes(b->data(), 1, 64, *s);
  g.record(*e, *s);
  g.synchronize(*e);
}

// The calling thread's context after some work on cfg's device, while its
// handles live (first) and after their destructors ran (second).
std::pair<CUcontext, CUcontext> contexts_around_work(const TestDriver& d, const DeviceConfig& cfg) {
  CUcontext after_calls = nullptr, after_destructors = nullptr;
  {
    auto g = open_device(cfg);
    auto s = g->create_stream();
    auto e = g->create_event();
    g->record(*e, *s);
    g->synchronize(*e);
    (void)d.ctx_get_current(&after_calls);
  }
  (void)d.ctx_get_current(&after_destructors);
  return {after_calls, after_destructors};
}

}  // namespace

TEST_CASE("the device guard leaves each thread's context as it was: none, or the caller's own", "[cuda][device-guard]") {
  const TestDriver d = test_driver();
  DeviceConfig cfg;
  cfg.backend = BackendChoice::cuda;
  cfg.cuda_device = 0;
  std::string error;  // Catch2's assertions stay on this thread
  // A thread that never used CUDA has no context, and must have none after.
  CUcontext before = reinterpret_cast<CUcontext>(1), after = reinterpret_cast<CUcontext>(1);
  std::thread fresh([&] {
    try {
      (void)d.ctx_get_current(&before);
      auto g = open_device(cfg);
      some_work(*g);
      g.reset();
      (void)d.ctx_get_current(&after);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  fresh.join();
  REQUIRE(error.empty());
  REQUIRE(before == nullptr);
  REQUIRE(after == nullptr);

  // A thread in a context of its own (not the primary context the library
  // uses) is in that context after each call and after the destructors.
  CUresult created = CUDA_ERROR_UNKNOWN;
  CUcontext user = nullptr, during = nullptr, after_calls = nullptr, after_destructors = nullptr;
  std::thread own([&] {
    try {
      CUdevice dev{};
      if (d.device_get(&dev, 0) != CUDA_SUCCESS) return;
      CUctxCreateParams params{};  // no affinity, no CIG: a plain context, made current
      created = d.ctx_create(&user, &params, 0, dev);
      if (created != CUDA_SUCCESS) return;
      (void)d.ctx_get_current(&during);
      std::tie(after_calls, after_destructors) = contexts_around_work(d, cfg);
      (void)d.ctx_destroy(user);
    } catch (const std::exception& e) {
      error = e.what();
      if (user) (void)d.ctx_destroy(user);
    }
  });
  own.join();
  REQUIRE(error.empty());
  REQUIRE(created == CUDA_SUCCESS);
  REQUIRE(user != nullptr);
  REQUIRE(during == user);
  REQUIRE(after_calls == user);
  REQUIRE(after_destructors == user);
}

TEST_CASE("work on a second GPU leaves each thread's context as it was", "[cuda][device-guard]") {
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  if (count < 2) {
    WARN("the device guard's switch to another GPU is not checked: it needs two GPUs, this machine has " << count);
    return;
  }
  const TestDriver d = test_driver();
  DeviceConfig cfg;
  cfg.backend = BackendChoice::cuda;
  cfg.cuda_device = 1;
  std::string error;
  // A thread that never used CUDA has no context, and must have none after:
  // restoring "device 0" would create device 0's primary context.
  CUcontext after = reinterpret_cast<CUcontext>(1);
  int runtime_device = -1;
  std::thread fresh([&] {
    try {
      auto g1 = open_device(cfg);
      some_work(*g1);
      g1.reset();
      (void)d.ctx_get_current(&after);
      (void)cudaGetDevice(&runtime_device);  // the runtime's own choice, untouched: still 0
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  fresh.join();
  REQUIRE(error.empty());
  REQUIRE(after == nullptr);
  REQUIRE(runtime_device == 0);
  // A thread on device 0 (its primary context current) stays in that context.
  CUcontext on0 = nullptr, after_calls = nullptr, after_destructors = nullptr;
  std::thread on_device0([&] {
    try {
      if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) return;
      (void)d.ctx_get_current(&on0);
      std::tie(after_calls, after_destructors) = contexts_around_work(d, cfg);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  on_device0.join();
  REQUIRE(error.empty());
  REQUIRE(on0 != nullptr);
  REQUIRE(after_calls == on0);
  REQUIRE(after_destructors == on0);
#if CUDART_VERSION >= 12080
  // A stream of device 0 given to work on device 1: refused, naming both.
  DeviceConfig cfg0 = cfg;
  cfg0.cuda_device = 0;
  auto g0 = open_device(cfg0);
  auto g1 = open_device(cfg);
  auto s0 = g0->create_stream();
  REQUIRE_THROWS_WITH(g1->wrap_stream(s0->native()), Catch::Contains("CUDA device 0") && Catch::Contains("CUDA device 1"));
#endif
}
#endif
#endif

// ---- the GPU decode path: nvJPEG + resize_kernel against the host twin and the CPU path

namespace {

// The decoder on `device` for every file, rendered into device memory and copied back.
std::vector<std::vector<unsigned char>> gpu_render(Device& device, JpegBatchDecoder& decoder,
                                                   const std::vector<std::vector<unsigned char>>& files,
                                                   const std::vector<ImageInfo>& infos, const std::vector<Geometry>& geometry,
                                                   std::vector<std::string>& refused) {
  const std::size_t bytes = std::size_t(geometry[0].out.width) * geometry[0].out.height * 3;
  auto out = device.allocate(bytes * files.size());
  auto stream = device.create_stream();
  std::vector<JpegItem> items;
  for (std::size_t i = 0; i < files.size(); ++i) {
    items.push_back({files[i], infos[i].width, infos[i].height, geometry[i], static_cast<std::uint8_t*>(out->data()) + i * bytes});
  }
  refused = decoder.decode(items, *stream);
  decoder.render(items, refused, *stream);
  std::vector<unsigned char> all(bytes * files.size());
  device.copy_to_host(all.data(), out->data(), all.size(), *stream);
  device.synchronize(*stream);
  std::vector<std::vector<unsigned char>> per;
  for (std::size_t i = 0; i < files.size(); ++i) per.emplace_back(all.begin() + i * bytes, all.begin() + (i + 1) * bytes);
  return per;
}

double psnr_bytes(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  double se = 0;
  for (std::size_t i = 0; i < a.size(); ++i) se += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return se == 0 ? 99 : 10 * std::log10(255.0 * 255.0 * double(a.size()) / se);
}

// `count` generated photos (grey and colour, 4:2:0 and 4:4:4), each with a
// RandomResizedCrop + flip box to `out` that the GPU path takes.
struct Photos {
  std::vector<std::vector<unsigned char>> files;
  std::vector<ImageInfo> infos;
  std::vector<Geometry> geometry;
};
Photos make_photos(int count, Size out) {
  namespace t = conveyor::test;
  const Augment augment({RandomResizedCrop{out}, RandomHorizontalFlip{}});
  Photos p;
  ImageDecoder header;
  for (int i = 0; i < count; ++i) {
    const t::Rgb img = t::photo_like(300 + 37 * (i % 7), 220 + 29 * (i % 5), std::uint64_t(i));
    p.files.push_back(t::jpeg(img, {i % 6 == 5 ? t::JpegKind::gray : t::JpegKind::baseline, 90, i % 4 != 3}));
    p.infos.push_back(header.open(p.files.back()));
    Rng rng(5, 0, std::uint64_t(i));
    p.geometry.push_back(augment.plan(p.infos.back().width, p.infos.back().height, rng));
    REQUIRE(gpu_decodable(p.infos.back(), p.geometry.back()));
  }
  return p;
}

// The worst mean |GPU - twin| and the worst PSNR against the CPU path over the
// samples the decoder took (each must be taken, but `may_refuse`).
struct Agreement {
  double worst_twin_mean = 0, worst_cpu = 99;
};
Agreement compare_with_cpu(const Photos& p, const std::vector<std::vector<unsigned char>>& got,
                           const std::vector<std::string>& refused, std::size_t may_refuse = std::size_t(-1)) {
  ImageDecoder full({}, {8}), roi;
  ResizeScratch scratch;
  Agreement a;
  for (std::size_t i = 0; i < p.files.size(); ++i) {
    CAPTURE(i);
    if (i == may_refuse) continue;
    REQUIRE(refused[i].empty());
    std::vector<unsigned char> twin(got[i].size()), cpu_path(got[i].size());
    full.open(p.files[i]);
    const DecodedView v = full.decode({0, 0, p.infos[i].width, p.infos[i].height}, 1.0);
    render_gpu_twin(v.pixels, v.width, v.height, v.stride, p.geometry[i], twin);
    roi.open(p.files[i]);
    const DecodeRequest want = decode_request(p.geometry[i], p.infos[i].width, p.infos[i].height);
    render(roi.decode(want.region, want.min_scale), p.geometry[i], p.infos[i].width, p.infos[i].height, 0, cpu_path,
           scratch);
    double sum = 0;
    for (std::size_t k = 0; k < twin.size(); ++k) sum += std::abs(int(twin[k]) - int(got[i][k]));
    a.worst_twin_mean = std::max(a.worst_twin_mean, sum / double(twin.size()));
    a.worst_cpu = std::min(a.worst_cpu, psnr_bytes(got[i], cpu_path));
  }
  return a;
}

// The device's nvJPEG decoder, or null after a WARN saying why there is none.
std::unique_ptr<JpegBatchDecoder> gpu_decoder(Device& device) {
  std::string why;
  auto decoder = create_jpeg_decoder(device, DecodeLimits{}, why);
  if (!decoder) WARN("gpu decode not checked: " << why);
  return decoder;
}

}  // namespace

TEST_CASE("gpu decode on CUDA: nvJPEG samples within 1 grey level of the twin, >= 40 dB from the CPU path",
          "[cuda][gpu-decode]") {
  auto device = gpu();
  auto decoder = gpu_decoder(*device);
  if (!decoder) return;
  INFO(decoder->describe());
  const Photos p = make_photos(24, {224, 224});
  std::vector<std::string> refused;
  const auto got = gpu_render(*device, *decoder, p.files, p.infos, p.geometry, refused);
  const Agreement a = compare_with_cpu(p, got, refused);
  INFO("worst mean |nvJPEG - twin| " << a.worst_twin_mean << ", worst PSNR against the CPU path " << a.worst_cpu << " dB");
  WARN("gpu decode: worst mean |nvJPEG - twin| " << a.worst_twin_mean << " grey levels, worst PSNR against the CPU path "
                                                 << a.worst_cpu << " dB (" << decoder->describe() << ")");
  REQUIRE(a.worst_twin_mean <= 1.0);
  REQUIRE(a.worst_cpu >= 40);
}

TEST_CASE("gpu decode on CUDA through the pipeline: the same batches for 1 and 4 workers", "[cuda][gpu-decode]") {
  auto device = gpu();
  std::shared_ptr<JpegBatchDecoder> probe = gpu_decoder(*device);
  if (!probe) return;
  namespace t = conveyor::test;
  const auto dir = std::filesystem::temp_directory_path() / ("conveyor_gpu_decode_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::filesystem::path> paths;
  std::vector<std::int64_t> labels;
  for (int i = 0; i < 40; ++i) {
    std::string name = std::to_string(i);  // not "p" + std::to_string(i): GCC 12's false -Werror=restrict at -O3
    name.insert(0, 1, 'p');
    paths.push_back(dir / (name + ".jpg"));
    t::write_file(paths.back(), t::jpeg(t::photo_like(200 + 13 * (i % 5), 150 + 11 * (i % 3), std::uint64_t(i))));
    labels.push_back(i % 5);
  }
  const Dataset d(paths, labels);
  const auto digests = [&](std::size_t workers) {
    ImageConfig ic;
    ic.transforms = {RandomResizedCrop{{64, 64}}, RandomHorizontalFlip{}};
    ic.gpu_share = 0.5;
    ImageSource src(d, ic, workers);
    Config c;
    c.batch_size = 8;
    c.workers = workers;
    c.sample_bytes = src.sample_bytes();
    c.epochs = 2;
    std::string w;
    TransferConfig tc;
    tc.batch_steps.push_back(GpuDecode{
        src.deferred_decodes(),
        {create_jpeg_decoder(*device, DecodeLimits{}, w), create_jpeg_decoder(*device, DecodeLimits{}, w)},
        ErrorPolicy::fail});
    DevicePipeline p(c, d.size(), src.filler(), tc, device);
    std::vector<std::uint64_t> out;
    std::vector<unsigned char> host;
    while (auto b = p.next()) {
      host.resize(b->bytes());
      auto s = device->create_stream();
      device->copy_to_host(host.data(), b->data(), host.size(), *s);
      device->synchronize(*s);
      std::uint64_t h = 1469598103934665603ULL;
      for (unsigned char v : host) h = (h ^ v) * 1099511628211ULL;
      out.push_back(h);
    }
    REQUIRE(gpu_decode_counts(p).decoded > 0);
    REQUIRE(gpu_decode_counts(p).cpu_fallbacks == 0);
    return out;
  };
  const auto one = digests(1);
  REQUIRE(digests(4) == one);
  std::filesystem::remove_all(dir);
}

// Last but one: an odd output width with make_resize_taps' odd tap counts once
// put each item's y tables off 4-byte alignment (gpu_decode/taps_layout.h), and the
// kernel's misaligned loads end the CUDA context, failing every later case.
TEST_CASE("gpu decode on CUDA: odd output sizes (63x61) render as the twin does", "[cuda][gpu-decode]") {
  auto device = gpu();
  auto decoder = gpu_decoder(*device);
  if (!decoder) return;
  INFO(decoder->describe());
  const Photos p = make_photos(12, {61, 63});  // height 61, width 63
  std::vector<std::string> refused;
  const auto got = gpu_render(*device, *decoder, p.files, p.infos, p.geometry, refused);
  const Agreement a = compare_with_cpu(p, got, refused);
  INFO("worst mean |nvJPEG - twin| " << a.worst_twin_mean << ", worst PSNR against the CPU path " << a.worst_cpu << " dB");
  REQUIRE(a.worst_twin_mean <= 1.0);  // the twin is the reference here; 40 dB from the CPU path is checked at 224 above
}

// Last: a broken file among good ones. nvjpegDecodeBatched may fail the whole
// batch for it; the decoder then decodes each file alone, so the good ones
// still render on the GPU and only the broken one may be refused. [errors]:
// nvJPEG may fail calls on purpose here, so the sanitizer runs leave it out.
TEST_CASE("gpu decode on CUDA: one broken file in a batch leaves the others on the GPU", "[cuda][gpu-decode][errors]") {
  auto device = gpu();
  auto decoder = gpu_decoder(*device);
  if (!decoder) return;
  INFO(decoder->describe());
  const Photos good = make_photos(8, {64, 64});
  Photos p = good;
  // File 3 keeps its headers (nvjpegGetImageInfo accepts it) and loses all but
  // 64 bytes of its entropy-coded data.
  const std::size_t broken = 3;
  std::vector<unsigned char>& f = p.files[broken];
  std::size_t sos = 0;
  for (std::size_t k = 0; k + 1 < f.size(); ++k) {
    if (f[k] == 0xFF && f[k + 1] == 0xDA) {
      sos = k;
      break;
    }
  }
  REQUIRE(sos > 0);
  const std::size_t scan = sos + 2 + (std::size_t(f[sos + 2]) << 8 | f[sos + 3]);
  REQUIRE(scan + 64 < f.size());
  f.resize(scan + 64);
  f.push_back(0xFF);
  f.push_back(0xD9);
  std::vector<std::string> refused;
  const auto got = gpu_render(*device, *decoder, p.files, p.infos, p.geometry, refused);
  WARN("gpu decode of a truncated file among 8: " << (refused[broken].empty() ? "taken" : "refused: " + refused[broken]));
  const Agreement a = compare_with_cpu(p, got, refused, broken);
  INFO("worst mean |nvJPEG - twin| " << a.worst_twin_mean << ", worst PSNR against the CPU path " << a.worst_cpu << " dB");
  REQUIRE(a.worst_twin_mean <= 1.0);  // the twin is the reference here; 40 dB from the CPU path is checked at 224 above
}
