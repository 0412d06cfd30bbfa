#include "gpu_decode/feed.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace conveyor {

GpuDecodeFeed::GpuDecodeFeed(std::shared_ptr<Device> device, std::shared_ptr<DeferredDecodes> store,
                             std::vector<std::shared_ptr<JpegBatchDecoder>> decoders, std::size_t threads)
    : device_(std::move(device)), store_(std::move(store)) {
  if (!device_ || !store_) throw std::invalid_argument("gpu decode feed: a device and a deferred store are required");
  if (decoders.empty()) throw std::invalid_argument("gpu decode feed: at least one decoder is required");
  if (threads < 1 || threads > decoders.size()) {
    throw std::invalid_argument("gpu decode feed: threads must be 1 .. " + std::to_string(decoders.size()) +
                                " (one decoder each at least), not " + std::to_string(threads));
  }
  for (auto& d : decoders) {
    if (!d) throw std::invalid_argument("gpu decode feed: a decoder is null");
    free_lanes_.push_back(lanes_.size());
    const DecodeTimes before = d->times();
    lanes_.push_back(Lane{std::move(d), device_->create_stream(), device_->create_event(EventKind::sync), before});
  }
  counters_ = std::make_unique<StageCounters[]>(threads);
  started_ = Clock::now();
  try {
    for (std::size_t t = 0; t < threads; ++t) threads_.emplace_back([this, t] { thread_main(t); });
  } catch (...) {
    stop();
    for (auto& th : threads_) th.join();
    throw;
  }
}

GpuDecodeFeed::~GpuDecodeFeed() {
  stop();
  for (auto& th : threads_) th.join();
  // A decode enqueued last may still run on its stream: let it end before the
  // decoders and their memory go.
  for (auto& lane : lanes_) {
    try {
      device_->synchronize(*lane.stream);
    } catch (...) {
      // A device in error: nothing left to wait for.
    }
  }
}

void GpuDecodeFeed::stop() noexcept {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  feed_cv_.notify_all();
  decoded_cv_.notify_all();
}

std::unique_ptr<GpuDecodeFeed::Job> GpuDecodeFeed::blank_job() {
  if (spare_jobs_.empty()) return std::make_unique<Job>();
  auto job = std::move(spare_jobs_.back());
  spare_jobs_.pop_back();
  return job;
}

void GpuDecodeFeed::filled(const Batch& b) noexcept {
  std::unique_ptr<Job> job;
  try {
    {
      std::lock_guard lk(mu_);
      job = blank_job();
    }
    job->sequence = b.sequence;
    job->epoch = b.epoch;
    job->state = Job::State::waiting;
    job->error = nullptr;
    job->decoder = nullptr;
    job->decoded = nullptr;
    job->taken.clear();
    job->slot.clear();
    job->items.clear();
    job->refused.clear();
    for (std::size_t j = 0; j < b.size(); ++j) {
      auto entry = store_->take(b.epoch, b.indices[j]);
      if (!entry) continue;
      job->taken.push_back(std::move(*entry));
      job->slot.push_back(j);
    }
    // The items point into the entries: built once `taken` no longer grows.
    for (const DeferredDecode& e : job->taken) job->items.push_back(JpegItem{e.file, e.width, e.height, e.geometry, nullptr});
    if (job->items.empty()) job->state = Job::State::decoded;  // nothing to decode: the feed threads pass it
  } catch (...) {
    if (!job) return;  // no memory even for the job: take() finds none and the batch's deferred samples
                       // stay in the store, so the delivery thread's check names them
    job->error = std::current_exception();
    job->state = Job::State::decoded;
  }
  {
    std::lock_guard lk(mu_);
    try {
      jobs_.emplace(b.sequence, std::move(job));
    } catch (...) {
      // No memory for the map node: as above, the delivery thread finds no job.
    }
  }
  feed_cv_.notify_all();
}

GpuDecodeFeed::Job* GpuDecodeFeed::next_to_start() {
  for (;;) {
    const auto it = jobs_.find(next_start_);
    if (it == jobs_.end()) return nullptr;
    if (it->second->state == Job::State::waiting) return it->second.get();
    ++next_start_;  // nothing to decode, or failed while filled: the delivery thread takes it as it is
  }
}

void GpuDecodeFeed::thread_main(std::size_t t) {
  try {
    device_->bind_thread();  // a thread of our own (checklist 7); every call guards itself regardless
  } catch (...) {
    // The decoder's calls switch to the device themselves: only the saving is lost.
  }
  StageCounters& c = counters_[t];
  Clock::time_point mark = Clock::now();
  for (;;) {
    Job* job = nullptr;
    std::size_t lane = 0;
    {
      std::unique_lock lk(mu_);
      // Starved while the next batch is not complete; blocked while it is but
      // every decoder still holds a batch the delivery thread has not rendered.
      while (!stopping_) {
        job = next_to_start();
        if (job && !free_lanes_.empty()) break;
        auto& since = job ? c.blocked_since : c.starved_since;
        auto& total = job ? c.blocked_ns : c.starved_ns;
        const auto t0 = Clock::now();
        c.timed_wait(since, total, t0, [&] {
          feed_cv_.wait(lk);
          return 0;
        });
        job = nullptr;
      }
      if (stopping_) return;
      lane = free_lanes_.back();
      free_lanes_.pop_back();
      job->state = Job::State::decoding;
      job->lane = lane;
      ++next_start_;
    }
    feed_cv_.notify_all();  // another thread may start the next job on another decoder
    Lane& l = lanes_[lane];
    std::exception_ptr error;
    mark = Clock::now();
    try {
      c.busy_span(mark, [&] {
        job->refused = l.decoder->decode(job->items, *l.stream);
        device_->record(*l.decoded, *l.stream);
      });
      StageCounters::add(c.items, job->items.size());
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lk(mu_);
      job->decoder = l.decoder.get();
      job->decoded = l.decoded.get();
      job->error = error;
      job->state = Job::State::decoded;
    }
    decoded_cv_.notify_all();
  }
}

GpuDecodeFeed::Job* GpuDecodeFeed::take(const Batch& b, std::uint64_t& waited_ns) {
  std::unique_lock lk(mu_);
  const auto it = jobs_.find(b.sequence);
  if (it == jobs_.end()) {
    // filled() runs for every batch before it is queued: it ran out of memory
    // for this one, whose deferred samples were then never decoded.
    if (next_start_ <= b.sequence) next_start_ = b.sequence + 1;
    lk.unlock();
    feed_cv_.notify_all();
    throw std::runtime_error("the GPU decode feed has no record of batch " + std::to_string(b.index) + " of epoch " +
                             std::to_string(b.epoch) + " (out of memory when the workers completed it)");
  }
  Job* job = it->second.get();
  if (job->state != Job::State::decoded) {
    const auto t0 = Clock::now();
    decoded_cv_.wait(lk, [&] { return stopping_ || job->state == Job::State::decoded; });
    waited_ns += elapsed_ns(t0, Clock::now());
  }
  if (job->state != Job::State::decoded) throw std::runtime_error("stopped while waiting for the GPU decode feed");
  // Jobs start in order: every one before this batch's is done, so the feed
  // threads need not look below it (a job without samples the delivery
  // thread took before they passed it).
  if (next_start_ <= b.sequence) next_start_ = b.sequence + 1;
  lk.unlock();
  feed_cv_.notify_all();  // next_start_ may have moved past jobs the feed threads wait on
  if (job->error) {
    const std::exception_ptr error = job->error;
    release(job);
    std::rethrow_exception(error);
  }
  if (job->items.empty()) {
    release(job);
    return nullptr;
  }
  return job;
}

void GpuDecodeFeed::release(Job* job) noexcept {
  if (!job) return;
  std::unique_ptr<Job> owned;
  {
    std::lock_guard lk(mu_);
    const auto it = jobs_.find(job->sequence);
    if (it == jobs_.end() || it->second.get() != job) return;
    owned = std::move(it->second);
    jobs_.erase(it);
    if (owned->decoder) free_lanes_.push_back(owned->lane);  // never reallocates: it held every lane once
  }
  feed_cv_.notify_all();
  for (auto& e : owned->taken) {
    try {
      store_->recycle(std::move(e));
    } catch (...) {
      // Out of memory keeping a spare: it is freed instead.
    }
  }
  owned->taken.clear();
  owned->items.clear();
  std::lock_guard lk(mu_);
  try {
    spare_jobs_.push_back(std::move(owned));
  } catch (...) {
    // Freed instead of kept.
  }
}

StageStats GpuDecodeFeed::stats(double wall_s, Clock::time_point now) const {
  StageStats s{"gpu decode", threads_.size()};
  s.hint = "the GPU decode feed limits: a lower --gpu-decode share (auto balances it) moves work back to the CPU workers";
  for (std::size_t t = 0; t < threads_.size(); ++t) accumulate(s, counters_[t].read(), now);
  // Since the feed's threads started, which is before the pipeline's clock
  // (the feed starts with the transfer stage's set-up): their waits from then
  // on count, so their fractions take that wall.
  s.wall_s = std::max(wall_s, double(elapsed_ns(started_, now)) * 1e-9);
  DecodeTimes sum;
  for (const Lane& l : lanes_) sum += l.decoder->times().since(l.before);
  s.parts = {{"parse", 1e-9 * double(sum.parse_ns), sum.calls},
             {"setup", 1e-9 * double(sum.setup_ns), sum.setups},
             {"decode", 1e-9 * double(sum.decode_ns), sum.calls},
             {"taps", 1e-9 * double(sum.taps_ns), sum.calls}};
  return s;
}

}  // namespace conveyor
