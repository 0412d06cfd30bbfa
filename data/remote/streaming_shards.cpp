#include "data/remote/streaming_shards.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

namespace conveyor {

namespace fs = std::filesystem;

namespace {

enum class Where : int { remote, local, failed };

}  // namespace

struct StreamingShards::State {
  fs::path dir;
  std::vector<Wanted> shards;
  RemoteOptions options;
  std::optional<CacheLimit> limit;  // options' cache_bytes under options' cache_dir
  std::optional<CacheLease> lease;  // on dir: no job evicts its shards while this one reads them
  std::unordered_map<std::string, std::size_t> by_name;
  std::unique_ptr<std::atomic<Where>[]> where;
  std::atomic<bool> stopping{false};
  // A download that failed for a reason a later try may mend (a timeout, a
  // reset, a 5xx, after the client's retries) is tried again after the
  // shards queued meanwhile, up to this many downloads of one shard in all.
  static constexpr int kDownloadTries = 3;

  mutable std::mutex mutex;  // guards queue, attempts, failures, idle, running; with settled for its waiters
  mutable std::condition_variable settled;
  std::deque<std::size_t> queue;                 // shards to download, in the order given
  std::unordered_map<std::size_t, int> attempts;  // downloads tried and failed, of the shards tried again
  std::unordered_map<std::size_t, std::string> failures;
  std::string uncached_why;
  std::vector<std::unique_ptr<HttpClient>> idle;  // range readers' clients, kept for their connections
  std::size_t running = 0;                        // download threads not yet done

  // The process that made it: a child of fork() has none of its download
  // threads, and must not share its pooled connections (their sockets).
  const pid_t owner = ::getpid();
  std::atomic<std::uint64_t> cached{0}, downloaded{0}, downloaded_bytes{0}, failed{0}, uncached{0}, range_reads{0}, range_bytes{0}, range_ns{0},
      retries{0}, read_ahead{0};
  std::vector<std::jthread> threads;

  // Read-ahead by range. The pipeline's advice (File::will_need: the samples
  // of the batch after the one a worker opens, in the epoch's order) for a
  // shard not in place queues each sample's range request; kAheadThreads
  // threads send them, each over its own connection, so the next batch's
  // samples are in flight while this one decodes. A worker's read takes the
  // bytes fetched ahead (waiting for a request in flight), or claims a
  // request not yet sent and sends it itself. At most kMaxAheadBytes are held.
  struct Ahead {
    enum { queued, fetching, ready, refused } state = queued;
    std::uint64_t size = 0;
    std::uint64_t age = 0;  // when advised: the oldest unread go first when the cap is reached
    std::string bytes;
  };
  using AheadKey = std::pair<std::size_t, std::uint64_t>;  // shard, offset
  static constexpr std::size_t kAheadThreads = 8;
  static constexpr std::uint64_t kMaxAheadBytes = 64ull << 20;
  std::mutex ahead_mutex;  // guards ahead, ahead_queue, ahead_bytes, ahead_threads; with ahead_cv for its waiters
  std::condition_variable ahead_cv;
  std::map<AheadKey, Ahead> ahead;
  std::deque<AheadKey> ahead_queue;
  std::uint64_t ahead_bytes = 0;
  std::uint64_t ahead_advised = 0;  // advice taken so far: the next entry's age
  std::vector<std::jthread> ahead_threads;  // started at the first advice
  // Samples above this are read in chunks (read_file_range): no read matches
  // a whole entry, so none is read ahead.
  static constexpr std::uint64_t kMaxAheadSample = 4ull << 20;

  HttpOptions http_options() const {
    HttpOptions o = options.http;
    o.stopping = &stopping;
    return o;
  }

  // A download thread: takes shards from the queue until it is empty or
  // the job stops. A shard whose download may succeed later goes to the
  // back of the queue, kDownloadTries times in all; it is read by range
  // meanwhile, and after.
  void download() {
    try {
      HttpClient http(http_options());
      for (;;) {
        std::size_t s = 0;
        {
          const std::lock_guard<std::mutex> hold(mutex);
          if (stopping.load() || queue.empty()) break;
          s = queue.front();
          queue.pop_front();
        }
        const std::uint64_t tries = http.retries();
        fetch(http, s);
        retries.fetch_add(http.retries() - tries);
        settled.notify_all();
      }
    } catch (const std::exception&) {
      // No client (the constructor checked libcurl): the shards stay remote,
      // and their reads say why.
    }
    const std::lock_guard<std::mutex> hold(mutex);
    --running;
    settled.notify_all();
  }

  void fetch(HttpClient& http, std::size_t s) {
    try {
      fetch_one(http, dir, shards[s], &stopping, limit ? &*limit : nullptr);
      where[s].store(Where::local);
      downloaded.fetch_add(1);
      downloaded_bytes.fetch_add(*shards[s].size);
      forget_ahead(s);
      return;
    } catch (const DownloadError& e) {
      if (stopping.load()) return;
      switch (e.kind()) {
        case DownloadError::Kind::no_room:  // read by range, this whole job
        case DownloadError::Kind::cache:
          leave_uncached(e.what());
          return;
        case DownloadError::Kind::again: {
          const std::lock_guard<std::mutex> hold(mutex);
          if (++attempts[s] < kDownloadTries) {
            queue.push_back(s);
            return;
          }
        }
          leave_uncached(e.what());
          return;
        case DownloadError::Kind::lasting: break;
      }
      fail(s, e.what());
    } catch (const std::exception& e) {
      if (!stopping.load()) fail(s, e.what());
    }
  }

  void leave_uncached(const std::string& why) {
    {
      const std::lock_guard<std::mutex> hold(mutex);
      uncached_why = why;
    }
    uncached.fetch_add(1);
  }

  void fail(std::size_t s, const std::string& why) {
    {
      const std::lock_guard<std::mutex> hold(mutex);
      failures[s] = why;
    }
    where[s].store(Where::failed);
    failed.fetch_add(1);
    forget_ahead(s);
  }

  // Advice: the range reads of [offset, offset + size) of shard s, queued.
  void advise(std::size_t s, std::uint64_t offset, std::uint64_t size) {
    if (size == 0 || size > kMaxAheadSample || ::getpid() != owner) return;  // a child of fork() has no read-ahead threads
    {
      const std::lock_guard<std::mutex> hold(ahead_mutex);
      if (stopping.load()) return;
      // Over the cap: the oldest bytes read ahead and not taken go (advice
      // that came after its batch was read, or for a sample read otherwise).
      while (ahead_bytes + size > kMaxAheadBytes && drop_oldest_ready()) {
      }
      if (ahead_bytes + size > kMaxAheadBytes) return;
      const auto [at, fresh] = ahead.try_emplace({s, offset});
      if (!fresh) return;
      at->second.size = size;
      at->second.age = ahead_advised++;
      ahead_bytes += size;
      ahead_queue.push_back({s, offset});
      if (ahead_threads.empty()) {
        for (std::size_t k = 0; k < kAheadThreads; ++k) ahead_threads.emplace_back([this] { read_ahead_loop(); });
      }
    }
    ahead_cv.notify_one();
  }

  void read_ahead_loop() {
    std::unique_ptr<HttpClient> http;
    for (;;) {
      AheadKey key;
      std::uint64_t size = 0;
      {
        std::unique_lock<std::mutex> hold(ahead_mutex);
        ahead_cv.wait(hold, [&] { return stopping.load() || !ahead_queue.empty(); });
        if (stopping.load()) return;
        key = ahead_queue.front();
        ahead_queue.pop_front();
        const auto it = ahead.find(key);
        if (it == ahead.end() || it->second.state != Ahead::queued) continue;  // claimed by a reader, or forgotten
        it->second.state = Ahead::fetching;
        size = it->second.size;
      }
      std::string bytes;
      bool ok = false;
      try {
        if (!http) http = std::make_unique<HttpClient>(http_options());
        const std::uint64_t tries = http->retries();
        try {
          bytes = http->get_range(shards[key.first].url, key.second, size);
          ok = true;
        } catch (const HttpError&) {
          // The reader sends the request again, and reports what it gets.
        }
        retries.fetch_add(http->retries() - tries);
      } catch (const std::exception&) {
        // no client: the reader's own request says why
      }
      {
        const std::lock_guard<std::mutex> hold(ahead_mutex);
        const auto it = ahead.find(key);
        if (it == ahead.end()) continue;  // forgotten meanwhile (its shard landed)
        it->second.state = ok ? Ahead::ready : Ahead::refused;
        it->second.bytes = std::move(bytes);
      }
      ahead_cv.notify_all();
    }
  }

  // The bytes read ahead for [offset, offset + n) of shard s into buf:
  // waits while their request is in flight. False, and nothing read, where
  // none was asked ahead, it failed, or it was not sent yet (claimed: the
  // reader sends it). Throws ReadCancelled once *reader_stopping is set.
  bool take_ahead(std::size_t s, std::uint64_t offset, void* buf, std::size_t n, const std::atomic<bool>* reader_stopping) {
    if (::getpid() != owner) return false;  // a child of fork(): the requests in flight are the parent's
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> hold(ahead_mutex);
    auto it = ahead.find({s, offset});
    if (it == ahead.end()) return false;
    while (it->second.state == Ahead::fetching) {
      if ((reader_stopping && reader_stopping->load()) || stopping.load()) throw ReadCancelled();
      ahead_cv.wait_for(hold, std::chrono::milliseconds(100));
      it = ahead.find({s, offset});
      if (it == ahead.end()) return false;
    }
    const bool got = it->second.state == Ahead::ready && it->second.size == n;
    if (got) std::memcpy(buf, it->second.bytes.data(), n);
    ahead_bytes -= it->second.size;
    ahead.erase(it);
    hold.unlock();
    if (!got) return false;
    range_ns.fetch_add(std::uint64_t(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count()));
    range_reads.fetch_add(1);
    range_bytes.fetch_add(n);
    read_ahead.fetch_add(1);
    return true;
  }

  // Drops the oldest entry read ahead and not taken; false when there is
  // none. Under ahead_mutex.
  bool drop_oldest_ready() {
    auto oldest = ahead.end();
    for (auto it = ahead.begin(); it != ahead.end(); ++it) {
      if (it->second.state == Ahead::ready || it->second.state == Ahead::refused) {
        if (oldest == ahead.end() || it->second.age < oldest->second.age) oldest = it;
      }
    }
    if (oldest == ahead.end()) return false;
    ahead_bytes -= oldest->second.size;
    ahead.erase(oldest);
    return true;
  }

  // Shard s landed: what was read ahead of it is not wanted.
  void forget_ahead(std::size_t s) {
    {
      const std::lock_guard<std::mutex> hold(ahead_mutex);
      for (auto it = ahead.lower_bound({s, 0}); it != ahead.end() && it->first.first == s;) {
        ahead_bytes -= it->second.size;
        it = ahead.erase(it);
      }
    }
    ahead_cv.notify_all();
  }

  std::string failure(std::size_t s) const {
    const std::lock_guard<std::mutex> hold(mutex);
    const auto it = failures.find(s);
    return it == failures.end() ? "the download failed" : it->second;
  }

  // Bytes [offset, offset + n) of shard s by one range request, on a client
  // taken from the idle ones (or a new one) and given back after.
  void read_range(std::size_t s, std::uint64_t offset, void* buf, std::size_t n, const std::atomic<bool>* reader_stopping) {
    std::unique_ptr<HttpClient> http;
    const bool pooled = ::getpid() == owner;
    if (pooled) {
      const std::lock_guard<std::mutex> hold(mutex);
      if (!idle.empty()) {
        http = std::move(idle.back());
        idle.pop_back();
      }
    }
    if (!http) http = std::make_unique<HttpClient>(http_options());
    const std::uint64_t tries = http->retries();
    const auto start = std::chrono::steady_clock::now();
    const auto waited = [&] {  // a failed or cancelled read waited too
      range_ns.fetch_add(std::uint64_t(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count()));
      retries.fetch_add(http->retries() - tries);
    };
    std::string bytes;
    try {
      bytes = http->get_range(shards[s].url, offset, n, reader_stopping);
    } catch (const HttpError& e) {
      waited();
      if (reader_stopping && reader_stopping->load()) throw ReadCancelled();
      throw std::runtime_error(e.what());
    }
    waited();
    range_reads.fetch_add(1);
    range_bytes.fetch_add(n);
    std::memcpy(buf, bytes.data(), n);
    if (!pooled) return;
    const std::lock_guard<std::mutex> hold(mutex);
    idle.push_back(std::move(http));
  }
};

namespace {

// A shard of the list: local once in place, by range before.
class ShardFile final : public File {
 public:
  ShardFile(std::shared_ptr<StreamingShards::State> state, std::size_t shard) : state_(std::move(state)), shard_(shard) {}

  std::uint64_t size() const override { return *state_->shards[shard_].size; }

  std::size_t read_at(std::uint64_t offset, void* buf, std::size_t n) override {
    return read_cancellable(offset, buf, n, nullptr);
  }

  std::size_t read_cancellable(std::uint64_t offset, void* buf, std::size_t n, const std::atomic<bool>* stopping) override {
    switch (state_->where[shard_].load()) {
      case Where::failed: throw std::runtime_error(state_->failure(shard_));
      case Where::local:
        if (File* file = local()) return file->read_at(offset, buf, n);
        break;  // gone from the cache (removed by hand): by range again
      case Where::remote: break;
    }
    if (offset >= size()) return 0;
    n = std::size_t(std::min<std::uint64_t>(n, size() - offset));
    if (n > 0 && !state_->take_ahead(shard_, offset, buf, n, stopping)) state_->read_range(shard_, offset, buf, n, stopping);
    return n;
  }

  void will_need(std::uint64_t offset, std::uint64_t size) noexcept override {
    if (state_->where[shard_].load() == Where::remote) {
      if (offset < this->size()) {
        try {
          state_->advise(shard_, offset, std::min<std::uint64_t>(size, this->size() - offset));
        } catch (...) {
          // advice only: the read goes on without it
        }
      }
      return;
    }
    if (state_->where[shard_].load() != Where::local) return;
    try {
      if (File* file = local()) file->will_need(offset, size);
    } catch (...) {
      // advice only: the read reports the error
    }
  }

 private:
  // The shard in the cache, opened on first use; null, and the shard remote
  // again, when it is no longer there.
  File* local() {
    const std::lock_guard<std::mutex> hold(mutex_);
    if (!local_) {
      const Wanted& w = state_->shards[shard_];
      const fs::path path = state_->dir / w.file;
      try {
        local_ = posix_file_system()->open(path);
      } catch (...) {
        if (in_place(path, w.size)) throw;
        state_->where[shard_].store(Where::remote);
        return nullptr;
      }
    }
    return local_.get();
  }

  std::shared_ptr<StreamingShards::State> state_;
  std::size_t shard_;
  std::mutex mutex_;
  std::unique_ptr<File> local_;
};

}  // namespace

std::optional<std::string> network_bottleneck(const StreamingCounters& c, double workers_busy_s) {
  if (!(workers_busy_s > 0 && c.range_seconds > 0.5 * workers_busy_s)) return std::nullopt;
  const int share = int(std::min(1.0, c.range_seconds / workers_busy_s) * 100 + 0.5);
  return "bottleneck: the network (the workers waited " + std::to_string(share) +
         "% of their busy time on range reads of shards still downloading) - the shards land in the cache meanwhile, "
         "and reads of them are local from then on";
}

StreamingShards::StreamingShards(fs::path dir, std::vector<Wanted> shards, RemoteOptions options)
    : state_(std::make_shared<State>()) {
  State& st = *state_;
  st.dir = std::move(dir);
  st.shards = std::move(shards);
  st.options = std::move(options);
  if (st.options.cache_bytes) st.limit = CacheLimit{st.options.cache_dir, *st.options.cache_bytes};
  st.lease.emplace(st.dir);  // before any shard is looked for
  touch_shards(st.dir);
  st.where = std::make_unique<std::atomic<Where>[]>(st.shards.size());
  for (std::size_t s = 0; s < st.shards.size(); ++s) {
    const Wanted& w = st.shards[s];
    if (!w.size) throw std::invalid_argument("streaming shards: " + w.url.shown() + " has no size");
    st.by_name.emplace(w.file, s);
    const bool there = in_place(st.dir / w.file, w.size);
    st.where[s].store(there ? Where::local : Where::remote);
    if (there) {
      st.cached.fetch_add(1);
    } else {
      st.queue.push_back(s);
    }
  }
  if (st.queue.empty()) return;
  HttpClient check(st.http_options());  // throws the line saying the build has no libcurl
  const std::size_t n = std::clamp<std::size_t>(st.options.parallel, 1, st.queue.size());
  st.running = n;
  try {
    for (std::size_t k = 0; k < n; ++k) st.threads.emplace_back([&st] { st.download(); });
  } catch (...) {
    st.stopping.store(true);
    st.threads.clear();  // joins those started
    throw;
  }
}

StreamingShards::~StreamingShards() {
  State& st = *state_;
  if (::getpid() != st.owner) {
    // A child of fork(): the download threads and the pooled connections
    // are the parent's. Joining threads this process does not have is
    // undefined, and closing a TLS connection would send its close_notify on
    // the parent's socket: both are left alone, deliberately leaked.
    static_cast<void>(new std::vector<std::jthread>(std::move(st.threads)));
    static_cast<void>(new std::vector<std::jthread>(std::move(st.ahead_threads)));
    static_cast<void>(new std::vector<std::unique_ptr<HttpClient>>(std::move(st.idle)));
    return;
  }
  st.stopping.store(true);
  {
    const std::lock_guard<std::mutex> hold(st.ahead_mutex);  // no advice starts threads from here on
  }
  st.ahead_cv.notify_all();
  st.ahead_threads.clear();  // jthread: joins
  st.threads.clear();
}

std::unique_ptr<File> StreamingShards::open(const fs::path& path) {
  if (path.parent_path() == state_->dir) {
    if (const auto it = state_->by_name.find(path.filename().string()); it != state_->by_name.end()) {
      return std::make_unique<ShardFile>(state_, it->second);
    }
  }
  return posix_file_system()->open(path);
}

StreamingCounters StreamingShards::counters() const {
  const State& st = *state_;
  std::string uncached_why;
  {
    const std::lock_guard<std::mutex> hold(st.mutex);
    uncached_why = st.uncached_why;
  }
  return {.shards = st.shards.size(),
          .cached = st.cached.load(),
          .downloaded = st.downloaded.load(),
          .downloaded_bytes = st.downloaded_bytes.load(),
          .failed = st.failed.load(),
          .uncached = st.uncached.load(),
          .range_reads = st.range_reads.load(),
          .range_bytes = st.range_bytes.load(),
          .range_seconds = double(st.range_ns.load()) * 1e-9,
          .retries = st.retries.load(),
          .read_ahead = st.read_ahead.load(),
          .uncached_why = std::move(uncached_why)};
}

void StreamingShards::wait_for_downloads() const {
  std::unique_lock<std::mutex> hold(state_->mutex);
  state_->settled.wait(hold, [&] { return state_->running == 0; });
}

}  // namespace conveyor
