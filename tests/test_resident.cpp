// The device-resident dataset on the host backend: each batch against direct
// indexing, sharding, the budget, .npy input and held buffers. Part of test_device.

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
#include "device_support.h"

using namespace conveyor;
using namespace std::chrono_literals;

using namespace conveyor::test;

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
        Sampler sampler({{batch, 9, true, false, 0, 1, ShardPolicy::pad}, 50});
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
