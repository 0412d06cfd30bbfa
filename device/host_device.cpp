// The host backend: CUDA's stream and event semantics on plain threads, so the
// transfer stage's ordering logic runs, and is tested under TSan, on machines
// without a GPU.
//
// A created stream is a thread that runs its operations in FIFO order; a
// wrapped nullptr stream runs them inline on the caller's thread (a consumer on
// the CPU). An event counts the records issued and the records completed:
// wait/synchronize capture the issued count at the call and block until the
// completed count reaches it, which is exactly "the latest record before the
// call", and a never-recorded event (count 0) is complete, as in CUDA.
// Hand-written because no Debian library models CUDA streams; it is small, and
// its only synchronization is one mutex + condition variable per object.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_set>

#include "device/backends.h"
#include "device/host_stream.h"
#include "pipeline/rng.h"

namespace conveyor {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::align_val_t kAlign{64};

class HostBuffer final : public Buffer {
 public:
  // Touched at once, as cudaMalloc'd and cudaHostAlloc'd memory is resident: a
  // first-use page fault per 4 KiB would otherwise land in the steady state.
  // `interrupted` is polled between chunks of the touch (pipeline/batch.h's
  // first_touch); Interrupted frees the memory.
  explicit HostBuffer(std::size_t bytes, const Interrupt& interrupted = {})
      : bytes_(bytes), data_(bytes ? ::operator new(bytes, kAlign) : nullptr) {
    try {
      if (data_) first_touch(data_, bytes_, interrupted);
    } catch (...) {
      ::operator delete(data_, kAlign);
      throw;
    }
  }
  ~HostBuffer() override {
    if (data_) ::operator delete(data_, kAlign);
  }
  void* data() const override { return data_; }
  std::size_t bytes() const override { return bytes_; }

 private:
  std::size_t bytes_;
  void* data_;
};

class HostEvent final : public Event {
 public:
  explicit HostEvent(EventKind kind) : kind_(kind) {}

  // Called where the record is issued; returns the record's number.
  std::uint64_t issue() {
    std::lock_guard lk(mu_);
    return ++issued_;
  }
  std::uint64_t issued() {
    std::lock_guard lk(mu_);
    return issued_;
  }
  // Called where the stream reaches the record.
  void complete(std::uint64_t n) {
    // Notify under the lock: a woken waiter may destroy the event as soon as it
    // can take the lock, so nothing may touch the event after it is released.
    std::lock_guard lk(mu_);
    completed_ = std::max(completed_, n);
    at_ = Clock::now();
    cv_.notify_all();
  }
  void wait_for(std::uint64_t n) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return completed_ >= n; });
  }
  Clock::time_point at() {
    std::lock_guard lk(mu_);
    return at_;
  }
  EventKind kind() const { return kind_; }

 private:
  EventKind kind_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t issued_ = 0, completed_ = 0;
  Clock::time_point at_{};
};

class HostStream;

// The threaded host streams alive, so wrap_stream can refuse a handle that is
// not one (CUDA's per-thread stream 0x2, a CUDA stream given to the host
// backend) instead of using it as one. Leaked on purpose: a stream may die
// during static destruction.
struct LiveStreams {
  std::mutex mu;
  std::unordered_set<const HostStream*> streams;
};
LiveStreams& live_streams() {
  static auto* live = new LiveStreams;
  return *live;
}

// Runs operations in order: on its own thread (a created stream) or inline (a
// wrapped nullptr: the caller's thread). Either way each operation first sleeps a
// random 0..max_delay_us when the device injects delays.
class HostStream final : public Stream {
 public:
  HostStream(bool threaded, std::uint32_t max_delay_us, std::uint64_t seed, std::uint64_t id)
      : max_delay_us_(max_delay_us), rng_(seed, id, 0) {
    if (!threaded) return;
    thread_ = std::thread([this] { run(); });
    std::lock_guard lk(live_streams().mu);
    live_streams().streams.insert(this);
  }
  ~HostStream() override {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lk(live_streams().mu);
      live_streams().streams.erase(this);
    }
    {
      std::lock_guard lk(mu_);
      closing_ = true;
    }
    cv_.notify_all();
    thread_.join();  // run() drains the queue before it returns
  }
  void* native() const override { return thread_.joinable() ? const_cast<HostStream*>(this) : nullptr; }

  void enqueue(std::function<void()> op) {
    if (!thread_.joinable()) {
      delay();
      op();
      return;
    }
    {
      std::lock_guard lk(mu_);
      if (error_) std::rethrow_exception(error_);
      ops_.push_back(std::move(op));
      ++submitted_;
    }
    cv_.notify_all();
  }
  // Blocks until every operation enqueued so far has run.
  void drain() {
    if (!thread_.joinable()) return;
    std::unique_lock lk(mu_);
    const std::uint64_t target = submitted_;
    cv_.wait(lk, [&] { return done_ >= target; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void delay() {
    if (max_delay_us_ == 0) return;
    std::uint64_t us = 0;
    {
      // An inline (wrapped nullptr) stream runs on its callers' threads, and a
      // batch may be released on another thread than next() runs on.
      std::lock_guard lk(rng_mu_);
      us = rng_.below(std::uint64_t{max_delay_us_} + 1);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  }
  void run() {
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return closing_ || !ops_.empty(); });
      if (ops_.empty()) return;  // closing and drained
      auto op = std::move(ops_.front());
      ops_.pop_front();
      lk.unlock();
      delay();
      std::exception_ptr err;
      try {
        op();
      } catch (...) {
        err = std::current_exception();
      }
      lk.lock();
      if (err && !error_) error_ = err;
      ++done_;
      cv_.notify_all();
    }
  }

  std::uint32_t max_delay_us_;
  std::mutex rng_mu_;
  Rng rng_;  // the delays' draws, under rng_mu_
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> ops_;
  std::uint64_t submitted_ = 0, done_ = 0;
  bool closing_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after, and is joined before, the members above die
};

// A handle on a stream the caller owns (or on the caller's thread, for nullptr).
class HostStreamView final : public Stream {
 public:
  HostStreamView(HostStream* target, std::unique_ptr<HostStream> inline_stream)
      : target_(target), inline_(std::move(inline_stream)) {}
  void* native() const override { return target_; }
  HostStream& stream() const { return target_ ? *target_ : *inline_; }

 private:
  HostStream* target_;
  std::unique_ptr<HostStream> inline_;
};

HostStream& host_stream(Stream& s) {
  if (auto* view = dynamic_cast<HostStreamView*>(&s)) return view->stream();
  return static_cast<HostStream&>(s);
}
HostEvent& host_event(Event& e) { return static_cast<HostEvent&>(e); }

class HostDevice final : public Device {
 public:
  HostDevice(const DeviceConfig& config, std::string why) : config_(config), why_(std::move(why)) {}

  Backend backend() const override { return Backend::host; }
  std::string describe() const override {
    std::string s = std::string("host backend (") +
                    (config_.host_transfer == HostTransfer::copy ? "copy" : "handover, no copy");
    if (config_.link_gbps > 0) s += ", simulated link " + trim(config_.link_gbps) + " GB/s";
    if (config_.max_delay_us > 0) s += ", random delays up to " + std::to_string(config_.max_delay_us) + " us";
    return s + "): " + why_;
  }
  bool hands_over() const override { return config_.host_transfer == HostTransfer::handover; }
  bool poisons_released() const override { return config_.poison_released; }
  int ordinal() const override { return -1; }
  void bind_thread() override {}

  void* allocate_host(std::size_t bytes) override { return allocate_host_interruptibly(bytes, {}); }
  void* allocate_host_interruptibly(std::size_t bytes, const Interrupt& interrupted) override {
    if (interrupted && interrupted()) throw Interrupted();
    void* p = ::operator new(std::max<std::size_t>(bytes, 1), kAlign);
    try {
      first_touch(p, bytes, interrupted);  // resident from the start, like cudaHostAlloc's pinned pages
    } catch (...) {
      ::operator delete(p, kAlign);
      throw;
    }
    return p;
  }
  void free_host(void* p) noexcept override { ::operator delete(p, kAlign); }
  std::unique_ptr<Buffer> allocate(std::size_t bytes) override { return std::make_unique<HostBuffer>(bytes); }
  std::unique_ptr<Buffer> allocate_interruptibly(std::size_t bytes, const Interrupt& interrupted) override {
    if (interrupted && interrupted()) throw Interrupted();
    return std::make_unique<HostBuffer>(bytes, interrupted);
  }
  std::unique_ptr<Stream> create_stream() override {
    return std::make_unique<HostStream>(true, config_.max_delay_us, config_.delay_seed, next_id());
  }
  std::unique_ptr<Event> create_event(EventKind kind) override { return std::make_unique<HostEvent>(kind); }

  // As CUDA's: null (and cudaStreamLegacy, 0x1) is the caller's own timeline,
  // here inline on the calling thread; cudaStreamPerThread (0x2) is refused.
  // Anything else must be a live stream of this backend (create_stream()'s
  // native()): a CUDA stream handed to the host backend was taken for one.
  std::unique_ptr<Stream> wrap_stream(void* native) override {
    const auto handle = reinterpret_cast<std::uintptr_t>(native);
    if (handle == 0x2) {
      throw DeviceError("the per-thread default stream (cudaStreamPerThread) cannot be waited on and released from "
                        "other threads: pass an explicit stream");
    }
    if (handle != 0 && handle != 0x1) {
      auto* stream = static_cast<HostStream*>(native);
      {
        std::lock_guard lk(live_streams().mu);
        if (live_streams().streams.count(stream)) return std::make_unique<HostStreamView>(stream, nullptr);
      }
      char shown[32];
      std::snprintf(shown, sizeof shown, "%p", native);
      throw DeviceError("stream " + std::string(shown) + " is not a live stream of the host backend "
                        "(a CUDA stream, or one already destroyed?)");
    }
    return std::make_unique<HostStreamView>(
        nullptr, std::make_unique<HostStream>(false, config_.max_delay_us, config_.delay_seed, next_id()));
  }

  void copy_to_device(void* dst, const void* src, std::size_t bytes, Stream& s) override {
    const double gbps = config_.link_gbps;
    host_stream(s).enqueue([dst, src, bytes, gbps] {
      const auto start = Clock::now();
      if (bytes) std::memcpy(dst, src, bytes);
      if (gbps > 0) std::this_thread::sleep_until(start + std::chrono::nanoseconds(std::int64_t(double(bytes) / gbps)));
    });
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes, Stream& s) override {
    host_stream(s).enqueue([dst, src, bytes] {
      if (bytes) std::memcpy(dst, src, bytes);
    });
  }
  void set_bytes(void* dst, unsigned char value, std::size_t bytes, Stream& s) override {
    host_stream(s).enqueue([dst, value, bytes] {
      if (bytes) std::memset(dst, value, bytes);
    });
  }
  void record(Event& e, Stream& s) override {
    HostEvent& ev = host_event(e);
    const std::uint64_t n = ev.issue();
    try {
      host_stream(s).enqueue([&ev, n] { ev.complete(n); });
    } catch (...) {
      ev.complete(n);  // never leave a record issued that nothing will complete: waiters would hang
      throw;
    }
  }
  void wait(Stream& s, Event& e) override {
    HostEvent& ev = host_event(e);
    const std::uint64_t n = ev.issued();
    host_stream(s).enqueue([&ev, n] { ev.wait_for(n); });
  }
  void synchronize(Event& e) override {
    HostEvent& ev = host_event(e);
    ev.wait_for(ev.issued());
  }
  void synchronize(Stream& s) override { host_stream(s).drain(); }
  double elapsed_ms(Event& start, Event& end) override {
    return std::chrono::duration<double, std::milli>(host_event(end).at() - host_event(start).at()).count();
  }

 private:
  static std::string trim(double v) {
    std::string s = std::to_string(v);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }
  std::uint64_t next_id() {
    std::lock_guard lk(mu_);
    return ++streams_;
  }

  DeviceConfig config_;
  std::string why_;
  std::mutex mu_;
  std::uint64_t streams_ = 0;
};

}  // namespace

void host_stream_enqueue(Stream& stream, std::function<void()> op) { host_stream(stream).enqueue(std::move(op)); }
void host_stream_drain(Stream& stream) { host_stream(stream).drain(); }

std::shared_ptr<Device> open_host_device(const DeviceConfig& config, std::string why) {
  return std::make_shared<HostDevice>(config, std::move(why));
}

}  // namespace conveyor
