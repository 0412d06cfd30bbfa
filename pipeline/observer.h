// Observer: the one interface through which tools watch a pipeline work, as
// taskflow's ObserverInterface does: `conveyor run --trace`'s Chrome trace,
// NVTX ranges for Nsight Systems (device/nvtx.h), and whatever a user adds.
// The stages call it; it never changes what they do.
//
//   struct Count : Observer {
//     std::atomic<int> fills{0};
//     void on_exit(const WorkItem& w) noexcept override { fills += w.what == Work::fill; }
//   };
//   StageFunctions stages{...};
//   stages.observer = std::make_shared<Count>();   // or TransferConfig::observer
//
// Contract.
// - on_entry and on_exit bracket each unit of work on the thread doing it:
//   a sample's fill on its worker; a batch's transfer and finish on the
//   delivery thread (a DevicePipeline's); the consumer's next(). Every entry
//   has its exit, also when the work throws, and they nest properly per thread
//   (what NVTX's push/pop ranges need).
// - on_transferred reports a batch's whole copy, which spans two calls of the
//   delivery thread (the copy is started by transfer and seen done by finish,
//   after the next batch's start): from its start, or the previous batch's
//   end if later (so the spans follow each other), to the host seeing it done.
//   Also for a batch finished while the pipeline stops, which is then not
//   delivered.
// - Calls come from the workers concurrently: an observer is thread-safe, and
//   must not block or throw (the methods are noexcept).
// - The calls cost one predicted branch per unit of work when no observer is set.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace conveyor {

struct Batch;

// What is being done.
enum class Work : std::uint8_t {
  fill,      // a worker fills one sample: index is the sample's dataset index
  transfer,  // the delivery thread starts a batch's copy: index is the batch's
  finish,    // the delivery thread waits for a batch's copy to end: index is the batch's
  next,      // the consumer asks for the next batch: index is 0
};

// "fill", "transfer", "finish", "next".
const char* work_name(Work w) noexcept;

struct WorkItem {
  Work what = Work::fill;
  std::size_t worker = 0;  // the worker's number for fill; 0 otherwise
  std::uint64_t epoch = 0;
  std::uint64_t index = 0;
};

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_entry(const WorkItem& item) noexcept { (void)item; }
  virtual void on_exit(const WorkItem& item) noexcept { (void)item; }
  virtual void on_transferred(const Batch& batch, std::chrono::steady_clock::time_point begin,
                              std::chrono::steady_clock::time_point end) noexcept {
    (void)batch;
    (void)begin;
    (void)end;
  }
};

// Several observers as one: entries in order, exits in reverse (so ranges nest).
// Null entries are left out. Returns null when none is left, and the one
// observer itself when one is.
std::shared_ptr<Observer> combine_observers(std::vector<std::shared_ptr<Observer>> observers);

// on_entry on construction and on_exit on destruction, when `observer` is not null.
class Observed {
 public:
  Observed(Observer* observer, const WorkItem& item) noexcept : observer_(observer), item_(item) {
    if (observer_) observer_->on_entry(item_);
  }
  ~Observed() {
    if (observer_) observer_->on_exit(item_);
  }
  Observed(const Observed&) = delete;
  Observed& operator=(const Observed&) = delete;

 private:
  Observer* observer_;
  WorkItem item_;
};

}  // namespace conveyor
