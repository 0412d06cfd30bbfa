// GpuDecodeFeed: the GPU decode path's own threads. They take each batch's
// deferred samples (the JPEGs an ImageSource with gpu_share left to the GPU)
// as soon as the workers complete the batch, and decode them on the device
// ahead of the delivery thread, several batches at once, so the decoder's
// host side (parsing, bitstream staging, submission) runs on threads of its
// own and the hardware engines are fed in parallel. The delivery thread then
// only renders the decoded images into the batch's slot after its copy.
//
//   worker completing batch s ─ filled(s) ─▶ job s (its deferred entries)
//   feed thread: job s, in sequence order ─▶ a free decoder ─▶ decode on the
//       decoder's stream, record decoded
//   delivery thread: take(s) waits until job s is decoded ─▶ copy stream waits
//       decoded ─▶ copy ─▶ render(job s) into the slot ─▶ record copied
//       ─▶ (finish) copied complete ─▶ release(s): the decoder is free again
//
// Order (docs/cuda.md, "One slot's life", point 13; the delivery thread's
// side is gpu_decode/step.cpp, a BatchStep of the transfer stage): a slot's copied event is
// recorded after the render of its decoded samples on the copy stream, and
// that render runs after the decode on the device's timeline (the copy stream
// waits for the decoder's decoded event). A decoder is reused only after the
// host saw its last render complete (release() after finish's synchronize).
//
// Jobs start in sequence order, so the decoders, held from a job's start until
// its release, always include the oldest job the delivery thread waits for:
// no deadlock, however the workers complete batches. With D decoders, jobs
// s .. s+D-1 can be in flight at once.
//
// Thread safety: filled() is called by any worker thread, take() and release()
// by the delivery thread, stats() from any thread; the feed's threads are its
// own. Errors stick to their job: a decode that throws is rethrown by take()
// for that batch, naming the batch, and stops nothing else by itself.
// Lifetime: destroy it after the pipeline whose workers call filled() (it
// joins its threads) and before the device.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device/device.h"
#include "gpu_decode/jpeg_batch_decoder.h"
#include "image/gpu_decode_plan.h"
#include "pipeline/batch.h"
#include "pipeline/stats.h"

namespace conveyor {

class GpuDecodeFeed {
 public:
  // One batch's deferred samples and what the decoder made of them.
  struct Job {
    std::uint64_t sequence = 0, epoch = 0;
    std::vector<DeferredDecode> taken;  // the entries, in batch order
    std::vector<std::size_t> slot;      // each one's position in the batch
    std::vector<JpegItem> items;        // their files and geometry (dst set by the delivery thread)
    std::vector<std::string> refused;   // per item: empty, or why the decoder refused the file
    JpegBatchDecoder* decoder = nullptr;  // the one that decoded it, to render() with
    Event* decoded = nullptr;             // recorded on that decoder's stream after the decode

   private:
    friend class GpuDecodeFeed;
    enum class State { waiting, decoding, decoded } state = State::waiting;
    std::size_t lane = 0;       // which decoder
    std::exception_ptr error;   // the decode's, thrown by take()
  };

  // `decoders`: at least one, each used by one thread at a time; `threads`:
  // how many feed threads (1 .. decoders.size()). Makes one stream and one
  // event per decoder now (start-up). Throws std::invalid_argument for a count
  // out of range, DeviceError from the device.
  GpuDecodeFeed(std::shared_ptr<Device> device, std::shared_ptr<DeferredDecodes> store,
                std::vector<std::shared_ptr<JpegBatchDecoder>> decoders, std::size_t threads);
  ~GpuDecodeFeed();  // stop(), joins the threads, then waits for the decoders' streams
  GpuDecodeFeed(const GpuDecodeFeed&) = delete;
  GpuDecodeFeed& operator=(const GpuDecodeFeed&) = delete;

  // A worker completed batch `b` (StageFunctions::filled): its deferred
  // entries move from the store into the batch's job. Never blocks on the
  // feed's threads and never throws: an error (out of memory) sticks to the
  // job and take() throws it.
  void filled(const Batch& b) noexcept;

  // The delivery thread, for batch `b`: waits until its job is decoded and
  // returns it, or null when the batch has no deferred sample. The wait's
  // time is added to `waited_ns`. Throws the decode's error, std::runtime_error
  // once stopped, and one naming the batch when filled() could not keep it.
  Job* take(const Batch& b, std::uint64_t& waited_ns);
  // The delivery thread, once the job's render is complete on the device (or
  // will never run): the decoder is free again and the entries go back to the
  // store for reuse. Null is ignored.
  void release(Job* job) noexcept;

  // Wakes and ends the feed's threads and a take() waiting; idempotent.
  void stop() noexcept;

  std::size_t threads() const { return threads_.size(); }
  std::size_t decoders() const { return lanes_.size(); }
  // The feed's threads as a stage, "gpu decode": busy decoding, blocked
  // waiting for a free decoder (the delivery thread has not rendered enough
  // yet), starved waiting for the next batch to be completed by the workers.
  // Its parts: the decoders' DecodeTimes since the feed started (parse,
  // setup, decode, taps; per decode() call, setup per new batch size).
  // `wall_s`: the pipeline's; the stage's is the longer of it and the time since the
  // feed started.
  StageStats stats(double wall_s, Clock::time_point now) const;

 private:
  struct Lane {
    std::shared_ptr<JpegBatchDecoder> decoder;
    std::unique_ptr<Stream> stream;
    std::unique_ptr<Event> decoded;
    DecodeTimes before;  // the decoder's times when the feed started (a share's probe used it before)
  };
  void thread_main(std::size_t t);
  // Under mu_: the next job to start, advancing next_start_ past jobs without
  // deferred samples; null when the next one has not been filled yet.
  Job* next_to_start();
  std::unique_ptr<Job> blank_job();  // under mu_

  std::shared_ptr<Device> device_;
  std::shared_ptr<DeferredDecodes> store_;
  std::vector<Lane> lanes_;

  mutable std::mutex mu_;
  std::condition_variable feed_cv_;     // feed threads: a job filled, a decoder freed, stop
  std::condition_variable decoded_cv_;  // the delivery thread: a job decoded, stop
  std::map<std::uint64_t, std::unique_ptr<Job>> jobs_;  // filled and not yet released, by sequence
  std::vector<std::unique_ptr<Job>> spare_jobs_;
  std::vector<std::size_t> free_lanes_;
  std::uint64_t next_start_ = 0;  // the lowest sequence no feed thread has started or passed
  bool stopping_ = false;

  std::unique_ptr<StageCounters[]> counters_;  // one per feed thread
  Clock::time_point started_;                  // when the threads started: the stage's wall
  std::vector<std::thread> threads_;     // last: started once everything above exists
};

}  // namespace conveyor
