// TransferConfig::batch_steps on the host backend: several steps run in their
// order at each point of the slot protocol, what they enqueue lands in the slot
// before it counts as copied, every prepared slot is released once, and a step
// that fails a batch lets the steps before it release the slot. Part of test_device.

#include <algorithm>
#include <atomic>
#include "catch_compat.h"
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>
#include "device/device.h"
#include "device/device_pipeline.h"
#include "support.h"
#include "device_support.h"

using namespace conveyor;
using namespace std::chrono_literals;
using namespace conveyor::test;

namespace {

// What the steps of one pipeline did, shared by them and read by the test
// after the pipeline is gone.
struct StepLog {
  std::mutex mu;
  std::vector<std::string> prepares;  // "a 3" / "b 3": step, batch index, in call order
  std::map<std::string, long> held;   // per step and slot: prepares minus releases
  std::atomic<int> filled_a{0}, filled_b{0};
};

// Writes `value` over the first `bytes` bytes of each batch's slot on the copy
// stream, after the copy; `fail_at`: prepare() throws for that batch index.
class MarkingStep final : public BatchStep {
 public:
  MarkingStep(std::string name, unsigned char value, std::size_t bytes, std::shared_ptr<Device> device,
              std::shared_ptr<StepLog> log, long fail_at)
      : name_(std::move(name)), value_(value), bytes_(bytes), device_(std::move(device)), log_(std::move(log)),
        fail_at_(fail_at) {}

  void filled(const Batch&) noexcept override { ++(name_ == "a" ? log_->filled_a : log_->filled_b); }
  void prepare(Batch& b, std::size_t slot) override {
    std::lock_guard lk(log_->mu);
    log_->prepares.push_back(name_ + " " + std::to_string(b.index));
    if (long(b.index) == fail_at_) throw std::runtime_error("step " + name_ + " refuses batch " + std::to_string(b.index));
    ++log_->held[name_ + std::to_string(slot)];
    prepared_.at(slot) = 1;
  }
  void complete(std::size_t slot, std::byte* samples, Stream& copy) override {
    if (!prepared_.at(slot)) throw std::logic_error("complete() for a slot not prepared");
    device_->set_bytes(samples, value_, bytes_, copy);
  }
  void release(std::size_t slot) noexcept override {
    if (!prepared_.at(slot)) return;  // holds nothing for it
    prepared_.at(slot) = 0;
    std::lock_guard lk(log_->mu);
    --log_->held[name_ + std::to_string(slot)];
  }
  void stop() noexcept override {}
  bool next_waits_for_release() const override { return false; }
  std::optional<StageStats> stage(double wall_s, Clock::time_point) const override {
    StageStats s;
    s.name = "step " + name_;
    s.wall_s = wall_s;
    return s;
  }

 private:
  std::string name_;
  unsigned char value_;
  std::size_t bytes_;
  std::shared_ptr<Device> device_;
  std::shared_ptr<StepLog> log_;
  long fail_at_;
  std::vector<char> prepared_ = std::vector<char>(8, 0);  // per slot; the delivery thread's alone
};

BatchStepMaker marking(std::string name, unsigned char value, std::size_t bytes, std::shared_ptr<StepLog> log,
                       long fail_at = -1) {
  return [=](const BatchStepSetup& setup) -> std::unique_ptr<BatchStep> {
    REQUIRE(setup.slots <= 8);
    return std::make_unique<MarkingStep>(name, value, bytes, setup.device, log, fail_at);
  };
}

}  // namespace

TEST_CASE("batch steps run in their order, in the slot before copied, and release each slot they prepared",
          "[device][pipeline][steps]") {
  const std::size_t dataset = 23;  // 6 batches an epoch, the last short
  for (std::size_t workers : {1, 3}) {
    for (std::size_t depth : {1, 2}) {
      for (std::size_t slots : {1, 2, 4}) {
        DYNAMIC_SECTION("workers " << workers << " depth " << depth << " slots " << slots) {
          DeviceConfig dc;
          dc.poison_released = true;
          dc.max_delay_us = 40;  // the steps' writes are stream work, reordered unless ordered
          dc.delay_seed = workers * 100 + depth * 10 + slots;
          auto device = host_device(dc);
          auto log = std::make_shared<StepLog>();
          TransferConfig tc;
          // a writes 2 bytes, then b 1 byte: in order, sample 0 starts 0xB2 0xA1.
          tc.batch_steps = {marking("a", 0xA1, 2, log), marking("b", 0xB2, 1, log)};
          auto task = std::async(std::launch::async, [&] {
            Config cfg = small_config(workers, depth, slots);
            DevicePipeline dp(cfg, dataset, test::fill_pattern, tc, device);
            REQUIRE(dp.batch_steps().size() == 2);
            std::size_t batches = 0, wrong = 0;
            while (auto b = dp.next()) {
              ++batches;
              const Batch& h = b->host();
              const auto* p = static_cast<const std::byte*>(b->data());
              REQUIRE(std::to_integer<unsigned>(p[0]) == 0xB2);
              REQUIRE(std::to_integer<unsigned>(p[1]) == 0xA1);
              std::vector<std::byte> want(cfg.sample_bytes);
              test::expected_bytes(cfg.seed, h.epoch, h.indices[0], want);
              if (std::memcmp(want.data() + 2, p + 2, cfg.sample_bytes - 2) != 0) ++wrong;  // the rest as filled
              for (std::size_t j = 1; j < b->size(); ++j) {
                if (!sample_matches(cfg.seed, h.epoch, h.indices[j], p + j * cfg.sample_bytes, cfg.sample_bytes)) ++wrong;
              }
            }
            REQUIRE(wrong == 0);
            REQUIRE(batches == 12);
            const PipelineStats stats = dp.stats();
            REQUIRE(stats.stages.size() >= 3);
            REQUIRE(stats.stages[0].name == "workers");
            REQUIRE(stats.stages[1].name == "step a");  // after the workers, in the steps' order
            REQUIRE(stats.stages[2].name == "step b");
          });
          REQUIRE(task.wait_for(120s) == std::future_status::ready);
          task.get();
          REQUIRE(log->filled_a == 12);
          REQUIRE(log->filled_b == 12);
          REQUIRE(log->prepares.size() == 24);
          for (std::size_t i = 0; i < log->prepares.size(); i += 2) {  // a, then b, for each batch
            REQUIRE(log->prepares[i][0] == 'a');
            REQUIRE(log->prepares[i + 1] == "b" + log->prepares[i].substr(1));
          }
          for (const auto& [slot, held] : log->held) REQUIRE(held == 0);  // each prepare released once
        }
      }
    }
  }
}

TEST_CASE("a batch step that fails a batch stops the pipeline with its error, and the steps before it release the slot",
          "[device][pipeline][steps][errors]") {
  for (std::size_t slots : {1, 3}) {
    DYNAMIC_SECTION("slots " << slots) {
      auto device = host_device();
      auto log = std::make_shared<StepLog>();
      TransferConfig tc;
      tc.batch_steps = {marking("a", 0xA1, 1, log), marking("b", 0xB2, 1, log, /*fail_at=*/3)};
      auto task = std::async(std::launch::async, [&] {
        Config cfg = small_config(2, 1, slots);
        cfg.epochs = 1;
        DevicePipeline dp(cfg, 40, test::fill_pattern, tc, device);
        std::size_t delivered = 0;
        try {
          while (auto b = dp.next()) ++delivered;
          FAIL("the run ended without the step's error");
        } catch (const PipelineError& e) {
          REQUIRE(e.stage() == "transfer");
          REQUIRE_THAT(e.what(), Catch::Contains("step b refuses batch 3"));
        }
        REQUIRE(delivered <= 3);
        REQUIRE_THROWS_AS(dp.next(), PipelineError);  // it sticks
      });
      REQUIRE(task.wait_for(60s) == std::future_status::ready);
      task.get();
      std::lock_guard lk(log->mu);
      const auto b3 = std::find(log->prepares.begin(), log->prepares.end(), "b 3");
      REQUIRE(b3 != log->prepares.end());
      REQUIRE(std::find(b3 + 1, log->prepares.end(), "a 4") == log->prepares.end());  // nothing after the failure
      for (const auto& [slot, held] : log->held) REQUIRE(held == 0);  // a's prepare of batch 3 released too
    }
  }
}

TEST_CASE("an empty batch step maker is refused at construction", "[device][pipeline][steps]") {
  TransferConfig tc;
  tc.batch_steps = {BatchStepMaker{}};
  REQUIRE_THROWS_WITH(DevicePipeline(small_config(1, 1, 2), 8, test::fill_pattern, tc, host_device()),
                      Catch::Contains("empty maker"));
  tc.batch_steps = {[](const BatchStepSetup&) { return std::unique_ptr<BatchStep>(); }};
  REQUIRE_THROWS_WITH(DevicePipeline(small_config(1, 1, 2), 8, test::fill_pattern, tc, host_device()),
                      Catch::Contains("returned null"));
}
