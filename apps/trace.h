// Tracer: a Chrome Trace Event JSON file (opens in Perfetto and
// chrome://tracing) written as the run goes: a span per sample decode on each
// worker thread, per transfer, per consumer step, and a counter per queue depth.
//
// Contract.
// - Events go to the file as they come (through stdio's buffer), so memory
//   stays flat however long the run: `--epochs 100000 --trace t.json` no longer
//   grows by every event.
// - The events go to a temporary beside the file (data/atomic_file.h),
//   renamed over it once finish() ran or the Tracer was destroyed (an error
//   unwinding the run, SIGINT/SIGTERM ending it early): the file is then
//   valid JSON, and never a part of a trace.
// - A failed write (a full disk, /dev/full) sticks: later events are dropped,
//   the temporary is removed and the file left as it was before the run, and
//   finish() throws std::runtime_error "--trace: cannot write FILE: reason".
// Thread safety: span(), counter() and thread() may be called from any thread.
#pragma once

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device/device_pipeline.h"
#include "pipeline/observer.h"
#include "pipeline/stats.h"
#include "data/atomic_file.h"

namespace conveyor::apps {

class Tracer {
 public:
  // Opens the temporary and writes the header. Throws UsageError when it cannot be opened.
  explicit Tracer(std::string file);
  // Closes the file as finish() does, without throwing.
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  void thread(int tid, const std::string& name);
  void span(const char* name, int tid, Clock::time_point a, Clock::time_point b, const std::string& args = "");
  void counter(const char* name, Clock::time_point t, double value);
  // Writes the closing bracket and closes the file; throws std::runtime_error
  // naming the file when any write failed. Idempotent.
  void finish();

 private:
  std::string us(Clock::time_point t) const;
  void add(const std::string& event);
  // Closes with the footer; returns the errno of the first failed write, or 0.
  int close_file();

  std::string file_;
  Clock::time_point origin_;
  std::mutex mu_;
  std::unique_ptr<AtomicFile> atomic_;  // guarded by mu_
  std::FILE* out_ = nullptr;            // guarded by mu_: atomic_'s stream until closed
  bool first_ = true;         // guarded by mu_
  int error_ = 0;             // guarded by mu_: errno of the first failed write
};

// The trace of a streaming run (`conveyor run --trace FILE`): the consumer
// (thread 1), the delivery thread (2) and each worker (10 + w) named; a span
// per sample's decode, per transfer and per step; and the depth of each queue
// every 2 ms, read by a sampler thread this object owns: a Sampling spawns it;
// the Sampling's destructor, finish() and the destructor join it.
// Declare the trace before the pipeline (it observes the pipeline's threads)
// and keep the Sampling after it (the sampler reads the pipeline's stats).
class PipelineTrace final : public Observer {
 public:
  // Throws UsageError when file cannot be opened.
  PipelineTrace(const std::string& file, std::size_t workers);
  ~PipelineTrace();
  PipelineTrace(const PipelineTrace&) = delete;
  PipelineTrace& operator=(const PipelineTrace&) = delete;

  // As the pipeline's observer (TransferConfig::observer): a "decode" span per
  // sample's fill on its worker's row, and a "transfer" span per batch.
  void on_entry(const WorkItem& item) noexcept override;
  void on_exit(const WorkItem& item) noexcept override;
  void on_transferred(const Batch& batch, Clock::time_point begin, Clock::time_point end) noexcept override;
  // A "step" span of the consumer for batch `batch`.
  void step(std::uint64_t batch, Clock::time_point a, Clock::time_point b);
  // Reads the queues' depths from `pipeline` every 2 ms while in scope (with
  // `trace` null: nothing).
  class Sampling {
   public:
    Sampling(PipelineTrace* trace, const DevicePipeline& pipeline) : t_(trace) {
      if (t_) t_->start_sampling(pipeline);
    }
    ~Sampling() {
      if (t_) t_->stop_sampling();
    }
    Sampling(const Sampling&) = delete;
    Sampling& operator=(const Sampling&) = delete;

   private:
    PipelineTrace* t_;
  };
  // Joins the sampler and closes the file; throws as Tracer::finish.
  void finish();

 private:
  void start_sampling(const DevicePipeline& pipeline);
  void stop_sampling();

  Tracer tracer_;
  std::vector<Clock::time_point> fill_started_;  // by worker: each written by its worker alone
  std::atomic<bool> sampling_{false};
  std::thread sampler_;
};

}  // namespace conveyor::apps
