#include "data/remote/shard_cache.h"

#include <fcntl.h>
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

int open_lock_file(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw DatasetError(file.string() + ": cannot open the lock file: " + std::strerror(errno));
  return fd;
}

// Whether another open file description holds a lock on `file` that
// conflicts with an exclusive one (a download in flight, a lease). Takes and
// drops it otherwise; a file that is absent or cannot be opened is not held.
bool held(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool busy = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // releases it when taken
  return busy;
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
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK && err != EINTR) {
      ::close(fd_);
      throw DatasetError(file.string() + ": cannot lock: " + std::strerror(err));
    }
    if (stopping && stopping->load()) {
      ::close(fd_);
      throw DatasetError(file.string() + ": cancelled");
    }
    if (err == EWOULDBLOCK) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

FileLock::~FileLock() { ::close(fd_); }  // closing releases the lock

CacheLease::CacheLease(const fs::path& folder) : fd_(open_lock_file(folder / kLeaseName)) {
  while (::flock(fd_, LOCK_SH) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    ::close(fd_);
    throw DatasetError((folder / kLeaseName).string() + ": cannot lock: " + std::strerror(err));
  }
}

CacheLease::~CacheLease() { ::close(fd_); }

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
  std::uint64_t used = cache_usage(limit.root);
  if (used + bytes <= limit.bytes) return true;
  if (bytes > limit.bytes) return false;
  // The shards of the folders no one leases, oldest first.
  std::vector<Cached> shards;
  std::vector<fs::path> leased;
  each_file(limit.root, [&](const fs::path& file, const struct stat& st) {
    if (!is_shard(file)) return;
    shards.push_back({file, std::uint64_t(st.st_size),
                      std::int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + std::int64_t(st.st_mtim.tv_nsec)});
  });
  std::sort(shards.begin(), shards.end(), [](const Cached& a, const Cached& b) { return a.mtime_ns < b.mtime_ns; });
  for (const Cached& c : shards) {
    const fs::path folder = c.file.parent_path();
    // The folder's lease file, taken exclusively while one of its shards goes:
    // no job begins to read the folder meanwhile. A folder some job leases is
    // skipped.
    const int fd = ::open((folder / kLeaseName).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      continue;
    }
    std::error_code ec;
    if (fs::remove(c.file, ec) && !ec) used -= std::min(used, c.bytes);
    ::close(fd);
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
