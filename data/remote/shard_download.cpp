#include "data/remote/shard_download.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "data/dataset.h"
#include "data/shards/manifest.h"
#include "pipeline/fnv1a.h"

namespace conveyor {

namespace fs = std::filesystem;

namespace {

// An exclusive flock on a lock file, held while the object lives.
class ShardLock {
 public:
  explicit ShardLock(const fs::path& file) : fd_(::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ < 0) throw DatasetError(file.string() + ": cannot open the lock file: " + std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd_);
      throw DatasetError(file.string() + ": cannot lock: " + std::strerror(err));
    }
  }
  ~ShardLock() { ::close(fd_); }  // closing releases the lock
  ShardLock(const ShardLock&) = delete;
  ShardLock& operator=(const ShardLock&) = delete;

 private:
  int fd_;
};

}  // namespace

bool in_place(const fs::path& file, std::optional<std::uint64_t> size) {
  struct stat st {};
  return ::stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (!size || std::uint64_t(st.st_size) == *size);
}

void fetch_one(HttpClient& http, const fs::path& dir, const Wanted& w) {
  const fs::path file = dir / w.file;
  if (in_place(file, w.size)) return;
  const ShardLock lock(dir / (w.file + ".lock"));
  if (in_place(file, w.size)) return;
  const fs::path part = dir / (w.file + ".part");
  std::error_code ec;
  try {
    http.get_to_file(w.url, part, w.size);
  } catch (const HttpError& error) {
    fs::remove(part, ec);
    throw DatasetError(error.what());
  }
  if (w.checksum) {
    const std::uint64_t sum = file_checksum(part);
    if (sum != *w.checksum) {
      fs::remove(part, ec);
      throw DatasetError(w.url.shown() + ": checksum " + hex16(sum) + ", not the " + hex16(*w.checksum) +
                         " its manifest lists (the shard was changed or damaged on the server, or on the way)");
    }
  }
  fs::rename(part, file, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(part, ignored);
    throw DatasetError(file.string() + ": cannot move the download into place: " + ec.message());
  }
}

}  // namespace conveyor
