#include "data/remote/streaming_shards.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
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
  std::unordered_map<std::string, std::size_t> by_name;
  std::unique_ptr<std::atomic<Where>[]> where;
  std::atomic<bool> stopping{false};
  std::atomic<std::size_t> next{0};
  std::vector<std::size_t> to_fetch;  // the shards not in place at the start, in the order given

  mutable std::mutex mutex;  // guards failures, idle, running; with settled for its waiters
  mutable std::condition_variable settled;
  std::unordered_map<std::size_t, std::string> failures;
  std::vector<std::unique_ptr<HttpClient>> idle;  // range readers' clients, kept for their connections
  std::size_t running = 0;                        // download threads not yet done

  // The process that made it: a child of fork() has none of its download
  // threads, and must not share its pooled connections (their sockets).
  const pid_t owner = ::getpid();
  std::atomic<std::uint64_t> cached{0}, downloaded{0}, failed{0}, range_reads{0}, range_bytes{0}, range_ns{0}, retries{0};
  std::vector<std::jthread> threads;

  HttpOptions http_options() const {
    HttpOptions o = options.http;
    o.stopping = &stopping;
    return o;
  }

  void download() {
    std::uint64_t tries = 0;
    try {
      HttpClient http(http_options());
      for (std::size_t k; !stopping.load() && (k = next.fetch_add(1)) < to_fetch.size();) {
        const std::size_t s = to_fetch[k];
        try {
          fetch_one(http, dir, shards[s]);
          where[s].store(Where::local);
          downloaded.fetch_add(1);
        } catch (const std::exception& e) {
          if (stopping.load()) break;
          {
            const std::lock_guard<std::mutex> hold(mutex);
            failures[s] = e.what();
          }
          where[s].store(Where::failed);
          failed.fetch_add(1);
        }
        settled.notify_all();
      }
      tries = http.retries();
    } catch (const std::exception&) {
      // No client (the constructor checked libcurl): the shards stay remote,
      // and their reads say why.
    }
    retries.fetch_add(tries);
    const std::lock_guard<std::mutex> hold(mutex);
    --running;
    settled.notify_all();
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
      case Where::local: return local().read_at(offset, buf, n);
      case Where::remote: break;
    }
    if (offset >= size()) return 0;
    n = std::size_t(std::min<std::uint64_t>(n, size() - offset));
    if (n > 0) state_->read_range(shard_, offset, buf, n, stopping);
    return n;
  }

  void will_need(std::uint64_t offset, std::uint64_t size) noexcept override {
    if (state_->where[shard_].load() != Where::local) return;  // a range read is its own read-ahead
    try {
      local().will_need(offset, size);
    } catch (...) {
      // advice only: the read reports the error
    }
  }

 private:
  File& local() {
    const std::lock_guard<std::mutex> hold(mutex_);
    if (!local_) local_ = posix_file_system()->open(state_->dir / state_->shards[shard_].file);
    return *local_;
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
      st.to_fetch.push_back(s);
    }
  }
  if (st.to_fetch.empty()) return;
  HttpClient check(st.http_options());  // throws the line saying the build has no libcurl
  const std::size_t n = std::clamp<std::size_t>(st.options.parallel, 1, st.to_fetch.size());
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
    static_cast<void>(new std::vector<std::unique_ptr<HttpClient>>(std::move(st.idle)));
    return;
  }
  st.stopping.store(true);
  st.threads.clear();  // jthread: joins
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
  return {.shards = st.shards.size(),
          .cached = st.cached.load(),
          .downloaded = st.downloaded.load(),
          .failed = st.failed.load(),
          .range_reads = st.range_reads.load(),
          .range_bytes = st.range_bytes.load(),
          .range_seconds = double(st.range_ns.load()) * 1e-9,
          .retries = st.retries.load()};
}

void StreamingShards::wait_for_downloads() const {
  std::unique_lock<std::mutex> hold(state_->mutex);
  state_->settled.wait(hold, [&] { return state_->running == 0; });
}

}  // namespace conveyor
