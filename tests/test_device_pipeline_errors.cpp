// The transfer stage (DevicePipeline) on the host backend when things go
// wrong: device errors that reach the consumer, stop, the checks that catch a
// broken protocol, and a consumer that holds every slot or host buffer. Part
// of test_device.
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

TEST_CASE("a release that fails during the consumer's last next() is thrown, not an end of stream",
          "[device][pipeline][errors]") {
  // A batch released on another thread (a tensor's deleter) may fail after
  // next() checked for such errors and before it finds the run over. The
  // observer's entry into next() comes between the two: it releases the
  // held last batch there, with the release made to fail.
  struct ReleaseInNext : Observer {
    DeviceBatch* held = nullptr;  // set by the test before its last next()
    void on_entry(const WorkItem& w) noexcept override {
      if (w.what == Work::next && held) std::exchange(held, nullptr)->reset();
    }
  };
  auto faulty = std::make_shared<FaultyDevice>(host_device());
  Config cfg = small_config(1, 1, 2);
  cfg.epochs = 1;
  auto release = std::make_shared<ReleaseInNext>();
  TransferConfig tc;
  tc.observer = release;
  DevicePipeline dp(cfg, 8, test::fill_pattern, tc, faulty);
  REQUIRE(dp.next());  // batch 0, released at once
  auto last = dp.next();  // batch 1 of 2: the run's last
  REQUIRE(last);
  faulty->fail_cpu_records = true;  // its release fails
  release->held = &*last;
  REQUIRE_THROWS_WITH(dp.next(), Catch::Contains("releasing a batch: cudaEventRecord(...) at cuda/fake.cu:2"));
  REQUIRE(release->held == nullptr);  // released inside next(), as the test means
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

TEST_CASE("the consumer may hold every buffer of the host pool, asking for one more is an error, not a hang",
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
