// The transfer stage (DevicePipeline) on the host backend: the slot protocol
// under random delays, normalize, the consumer's streams, labels and the
// observer. Errors and stop are in test_device_pipeline_errors.cpp. Part of test_device.

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
#include "device/resident.h"
#include "support.h"
#include "device_support.h"

using namespace conveyor;
using namespace std::chrono_literals;

using namespace conveyor::test;

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

namespace {
// The tuned device queue's workload: a copy of 8 x 1,250 bytes over a
// 0.01 GB/s link takes about 1 ms, and the consumer's steps come in bursts
// (every 16th takes 40 ms, the others none), so with 2 batches queued after
// a long step the next ones wait for the transfer, which had waited for a
// free slot meanwhile. Depth from 2 up to 12.
Config bursty_config() {
  Config cfg = small_config(2, 2, 0);
  cfg.batch_size = 8;
  cfg.sample_bytes = 1250;
  cfg.epochs = 1;
  cfg.tune_window_ms = 50;
  cfg.tune_device_queue = true;
  cfg.device_queue_depth = 12;  // the ceiling
  return cfg;
}

struct BurstyRun {
  std::map<std::pair<std::uint64_t, std::uint64_t>, int> seen;  // how often each (epoch, index) came
  std::size_t wrong = 0;  // samples whose bytes or label are not fill_pattern's
};

// Takes every batch of `dp` as the bursty consumer does.
BurstyRun consume_in_bursts(DevicePipeline& dp, const Config& cfg) {
  BurstyRun r;
  std::size_t step = 0;
  while (auto b = dp.next()) {
    const Batch& h = b->host();
    for (std::size_t j = 0; j < b->size(); ++j) {
      ++r.seen[{h.epoch, h.indices[j]}];
      const auto* p = static_cast<const std::byte*>(b->data()) + j * cfg.sample_bytes;
      if (!sample_matches(cfg.seed, h.epoch, h.indices[j], p, cfg.sample_bytes) ||
          b->labels()[j] != std::int64_t(h.indices[j] * 3)) {
        ++r.wrong;
      }
    }
    if (++step % 16 == 0) std::this_thread::sleep_for(40ms);
  }
  return r;
}

void check_each_sample_once(const BurstyRun& r, std::size_t dataset) {
  CHECK(r.wrong == 0);
  CHECK(r.seen.size() == dataset);
  for (auto& [key, count] : r.seen) REQUIRE(count == 1);
}
}  // namespace

TEST_CASE("device pipeline: a tuned device queue adds slots as it deepens, and every sample arrives intact once",
          "[device][pipeline][autotune]") {
  DeviceConfig dc;
  dc.poison_released = true;  // a slot reused too early would show as wrong bytes
  dc.link_gbps = 0.01;
  auto device = host_device(dc);
  const Config cfg = bursty_config();
  const std::size_t dataset = 2400;
  auto task = std::async(std::launch::async, [&] {
    DevicePipeline dp(cfg, dataset, test::fill_pattern, TransferConfig{}, device);
    REQUIRE(dp.device_slots() == 4);  // the start's: depth 2 + 2
    REQUIRE(dp.max_held() == 4);
    const BurstyRun r = consume_in_bursts(dp, cfg);
    const PipelineStats s = dp.stats();
    INFO(s.table());
    check_each_sample_once(r, dataset);
    const PipelineStats::QueueTuning& q = s.device_queue_tuning;
    CHECK(q.depth > 2);
    CHECK(dp.device_slots() == q.depth + 2);
    CHECK(dp.max_held() == dp.device_slots());
    REQUIRE(!q.decisions.empty());
    CHECK(q.decisions.front().reason.find("the transfer") != std::string::npos);
  });
  REQUIRE(task.wait_for(120s) == std::future_status::ready);
  task.get();
}

TEST_CASE("device pipeline: a tuned device queue the device has no memory for stays where it is, and the run goes on",
          "[device][pipeline][autotune]") {
  DeviceConfig dc;
  dc.link_gbps = 0.01;  // as above: a copy of a batch takes about 1 ms
  auto device = std::make_shared<FaultyDevice>(host_device(dc));
  device->allocations_before_error = 4;  // the start's 4 slots, then none
  const Config cfg = bursty_config();
  const std::size_t dataset = 1600;
  auto task = std::async(std::launch::async, [&] {
    DevicePipeline dp(cfg, dataset, test::fill_pattern, TransferConfig{}, device);
    const BurstyRun r = consume_in_bursts(dp, cfg);
    const PipelineStats s = dp.stats();
    INFO(s.table());
    check_each_sample_once(r, dataset);
    const PipelineStats::QueueTuning& q = s.device_queue_tuning;
    CHECK(q.depth == 2);
    CHECK(dp.device_slots() == 4);
    REQUIRE(q.decisions.size() == 1);  // tuning stops after the refusal
    CHECK(q.decisions[0].from == 2);
    CHECK(q.decisions[0].to == 2);
    CHECK(q.decisions[0].reason.rfind("stays: device pool: cudaMalloc(...)", 0) == 0);
  });
  REQUIRE(task.wait_for(120s) == std::future_status::ready);
  task.get();
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
            kernels::busy(*device, 100, *consumer);
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

namespace {

// What a DevicePipeline's observer is told on the delivery and consumer
// threads: each batch's transfer, finish and whole copy, and each next().
struct TransferLog final : Observer {
  std::mutex mu;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> transferred;  // (epoch, batch), in order
  std::map<Work, int> entries, exits;
  int bad_spans = 0;
  void on_entry(const WorkItem& w) noexcept override {
    std::lock_guard lk(mu);
    ++entries[w.what];
  }
  void on_exit(const WorkItem& w) noexcept override {
    std::lock_guard lk(mu);
    ++exits[w.what];
  }
  void on_transferred(const Batch& b, std::chrono::steady_clock::time_point begin,
                      std::chrono::steady_clock::time_point end) noexcept override {
    std::lock_guard lk(mu);
    transferred.emplace_back(b.epoch, b.index);
    bad_spans += end < begin;
  }
};

}  // namespace

TEST_CASE("device pipeline: the observer sees every fill, transfer, finish and next, and each copy once in order",
          "[device][pipeline][observer]") {
  auto device = host_device();
  Config cfg = small_config(2, 2, 2);
  cfg.epochs = 2;
  auto log = std::make_shared<TransferLog>();
  TransferConfig tc;
  tc.observer = log;
  std::size_t batches = 0;
  {
    DevicePipeline dp(cfg, 9, test::fill_pattern, tc, device);
    while (auto b = dp.next()) ++batches;
  }
  REQUIRE(batches == 2 * 3);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> want;
  for (std::uint64_t e = 0; e < 2; ++e) {
    for (std::uint64_t i = 0; i < 3; ++i) want.emplace_back(e, i);
  }
  CHECK(log->transferred == want);
  CHECK(log->bad_spans == 0);
  CHECK(log->entries == log->exits);
  CHECK(log->entries[Work::fill] == 18);
  CHECK(log->entries[Work::transfer] == 6);
  CHECK(log->entries[Work::finish] == 6);
  CHECK(log->entries[Work::next] == 7);  // the last says the stream ended
}
