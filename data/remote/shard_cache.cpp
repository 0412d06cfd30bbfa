#include "data/remote/shard_cache.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "data/dataset.h"

namespace conveyor {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLeaseName = ".conveyor-lease";

// The descriptors that hold an exclusive lock now (a download's, the root's,
// an eviction's). A flock belongs to the open file description, which a
// child of fork() shares: a child made while one is held would hold it for
// its whole life, and every process would wait on it. The child closes its
// copies at once (pthread_atfork), which leaves the parent's lock alone.
// Slots, not a locked container: the handler runs in the child, where a
// mutex another thread held at the fork stays held.
class HeldLocks {
 public:
  static HeldLocks& instance() {
    static HeldLocks* registry = [] {
      auto* h = new HeldLocks;  // never destroyed: the handler may run at any fork
      ::pthread_atfork(nullptr, nullptr, [] { instance().close_all(); });
      return h;
    }();
    return *registry;
  }
  void add(int fd) noexcept {
    for (auto& slot : slots_) {
      int empty = -1;
      if (slot.compare_exchange_strong(empty, fd)) return;
    }
    // Every slot taken (over 1024 exclusive locks at once): this one is not
    // closed in a child.
  }
  void remove(int fd) noexcept {
    for (auto& slot : slots_) {
      int mine = fd;
      if (slot.compare_exchange_strong(mine, -1)) return;
    }
  }

 private:
  HeldLocks() {
    for (auto& slot : slots_) slot.store(-1);
  }
  void close_all() noexcept {
    for (auto& slot : slots_) {
      const int fd = slot.exchange(-1);
      if (fd >= 0) ::close(fd);
    }
  }
  std::atomic<int> slots_[1024];
};

int open_lock_file(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw DatasetError(file.string() + ": cannot open the lock file: " + std::strerror(errno));
  return fd;
}

// An exclusive flock taken without waiting on a descriptor of its own, held
// while the object lives (and never by a child of fork()); held() false when
// another holds a lock on the file, or it cannot be opened (made, with
// `create`, when absent).
class TryLock {
 public:
  explicit TryLock(const fs::path& file, bool create = false)
      : fd_(::open(file.c_str(), create ? O_RDWR | O_CREAT | O_CLOEXEC : O_RDONLY | O_CLOEXEC, 0644)) {
    if (fd_ < 0) return;
    HeldLocks::instance().add(fd_);
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) release();
  }
  ~TryLock() { release(); }
  TryLock(const TryLock&) = delete;
  TryLock& operator=(const TryLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  void release() {
    if (fd_ < 0) return;
    HeldLocks::instance().remove(fd_);
    ::close(fd_);
    fd_ = -1;
  }
  int fd_;
};

// Whether another open file description holds a lock on `file` that
// conflicts with an exclusive one (a download in flight, a lease). Takes and
// drops it otherwise; a file that is absent or cannot be opened is not held.
bool held(const fs::path& file) {
  if (!fs::exists(file)) return false;
  const TryLock probe(file);
  return !probe.held();
}

// The size a download in flight announces in its lock file (0 when none).
std::uint64_t announced(const fs::path& lock_file) {
  const int fd = ::open(lock_file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[24] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  ::close(fd);
  return n > 0 ? std::strtoull(text, nullptr, 10) : 0;
}

bool is_shard(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.starts_with('.') && name.ends_with(".tar");
}

// Whether `file` is a shard the cache made: ROOT/KEY/VERSION/NAME.tar or
// ROOT/KEY/shards/NAME.tar with ROOT/KEY/.conveyor-url beside (what
// remote_shards.cpp writes). Nothing else under the root is ever removed: a
// --cache-dir given a folder of the user's own shards loses none of them.
bool cached_shard(const fs::path& root, const fs::path& file) {
  const fs::path key = file.parent_path().parent_path();
  return is_shard(file) && key.parent_path() == root && fs::exists(key / ".conveyor-url");
}

struct Cached {
  fs::path file;
  std::uint64_t bytes = 0;
  std::int64_t mtime_ns = 0;
};

// Every regular file under root, walked without following links; nothing
// that cannot be read.
template <typename Each>
void each_file(const fs::path& root, Each each) {
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
  for (const fs::recursive_directory_iterator end; !ec && it != end; it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    each(it->path(), st);
  }
}

}  // namespace

FileLock::FileLock(const fs::path& file, const std::atomic<bool>* stopping) : fd_(open_lock_file(file)) {
  HeldLocks::instance().add(fd_);
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if ((err != EWOULDBLOCK && err != EINTR) || (stopping && stopping->load())) {
      HeldLocks::instance().remove(fd_);
      ::close(fd_);
      throw DatasetError(file.string() + (err != EWOULDBLOCK && err != EINTR ? ": cannot lock: " + std::string(std::strerror(err))
                                                                               : std::string(": cancelled")));
    }
    if (err == EWOULDBLOCK) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

FileLock::~FileLock() {  // closing releases the lock
  HeldLocks::instance().remove(fd_);
  ::close(fd_);
}

CacheLease::CacheLease(const fs::path& folder) {
  const fs::path file = folder / kLeaseName;
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fd_ = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);  // a cache this user may read, not write
  if (fd_ < 0) return;  // nor read: no process can evict here either
  while (::flock(fd_, LOCK_SH) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    ::close(fd_);
    throw DatasetError(file.string() + ": cannot lock: " + std::strerror(err));
  }
}

CacheLease::~CacheLease() {
  if (fd_ >= 0) ::close(fd_);
}

std::uint64_t cache_usage(const fs::path& root) {
  std::uint64_t total = 0;
  each_file(root, [&](const fs::path& file, const struct stat& st) {
    std::uint64_t bytes = std::uint64_t(st.st_size);
    if (file.extension() == ".part") {
      // In flight (its lock held): at least the size its lock file
      // announces. Left by a download that died: as it is.
      fs::path lock = file;
      lock.replace_extension(".lock");
      if (held(lock)) bytes = std::max(bytes, announced(lock));
    }
    total += bytes;
  });
  return total;
}

bool make_room(const CacheLimit& limit, std::uint64_t bytes) {
  if (bytes > limit.bytes) return false;
  std::uint64_t used = cache_usage(limit.root);
  if (used + bytes <= limit.bytes) return true;
  // What could go: the cache's shards in folders no job leases, and the
  // parts that downloads which died left behind.
  std::vector<Cached> shards;
  std::uint64_t could_free = 0;
  std::vector<fs::path> stale_parts;
  each_file(limit.root, [&](const fs::path& file, const struct stat& st) {
    if (file.extension() == ".part") {
      fs::path lock = file;
      lock.replace_extension(".lock");
      if (!held(lock)) {
        stale_parts.push_back(file);
        could_free += std::uint64_t(st.st_size);
      }
      return;
    }
    if (!cached_shard(limit.root, file) || held(file.parent_path() / kLeaseName)) return;
    shards.push_back({file, std::uint64_t(st.st_size),
                      std::int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + std::int64_t(st.st_mtim.tv_nsec)});
    could_free += std::uint64_t(st.st_size);
  });
  if (used - std::min(used, could_free) + bytes > limit.bytes) return false;  // removing all would not make room: none goes
  for (const fs::path& part : stale_parts) {
    fs::path lock = part;
    lock.replace_extension(".lock");
    const TryLock dead(lock);  // the download is not in flight while this is held
    if (!dead.held() && fs::exists(lock)) continue;
    struct stat st {};
    if (::lstat(part.c_str(), &st) != 0) continue;
    std::error_code ec;
    if (fs::remove(part, ec) && !ec) used -= std::min(used, std::uint64_t(st.st_size));
    if (used + bytes <= limit.bytes) return true;
  }
  std::sort(shards.begin(), shards.end(), [](const Cached& a, const Cached& b) { return a.mtime_ns < b.mtime_ns; });
  for (const Cached& c : shards) {
    // The folder's lease file, taken exclusively while one of its shards goes:
    // no job begins to read the folder meanwhile. A folder some job leased
    // since is skipped.
    const TryLock folder(c.file.parent_path() / kLeaseName, true);
    if (!folder.held()) continue;
    std::error_code ec;
    if (fs::remove(c.file, ec) && !ec) used -= std::min(used, c.bytes);
    if (used + bytes <= limit.bytes) return true;
  }
  return false;
}

void touch_shards(const fs::path& folder) {
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    if (is_shard(it->path())) ::utimensat(AT_FDCWD, it->path().c_str(), nullptr, 0);
  }
}

LeasedFolder::LeasedFolder(const fs::path& folder) : lease_(folder) { touch_shards(folder); }

}  // namespace conveyor
