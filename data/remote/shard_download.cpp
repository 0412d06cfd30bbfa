#include "data/remote/shard_download.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "data/dataset.h"
#include "data/remote/retry.h"
#include "data/shards/manifest.h"
#include "pipeline/fnv1a.h"

namespace conveyor {

namespace fs = std::filesystem;

namespace {

using Kind = DownloadError::Kind;

// Whether a request that failed with `status` (0: no HTTP answer) would fail
// again if asked again later: a 4xx the retry policy does not retry.
bool lasting_status(long status) { return status >= 400 && status < 500 && after_status(status) == Outcome::fail; }

// A lock of the cache, or the DownloadError saying why not.
FileLock lock(const fs::path& file, const std::atomic<bool>* stopping) {
  try {
    return FileLock(file, stopping);
  } catch (const DatasetError& e) {
    throw DownloadError(e.what(), stopping && stopping->load() ? Kind::again : Kind::cache);
  }
}

// The line for a shard that finds no room under the cache's limit.
std::string no_room(const Wanted& w, const CacheLimit& limit) {
  std::string line = w.url.shown();
  line += ": no room for it in the cache (";
  line += limit.root.string();
  line += ") under its limit of ";
  line += std::to_string(limit.bytes);
  line += " bytes: the shards of the jobs reading from it fill it (raise --cache-gb, or stream the shards, which reads "
          "those that do not fit by range)";
  return line;
}

// Under the cache's lock: the files under its root, this download's
// reservation or `part` among them, fit its limit once the least recently
// used shards of folders no job reads are removed; else `part` is removed
// and DownloadError no_room thrown.
void require_room(const CacheLimit& limit, const Wanted& w, const fs::path& part, const std::atomic<bool>* stopping) {
  bool room = false;
  try {
    const FileLock root = lock(root_lock_file(limit.root), stopping);
    room = make_room(limit, 0);
  } catch (...) {
    std::error_code ec;
    fs::remove(part, ec);
    throw;
  }
  if (!room) {
    std::error_code ec;
    fs::remove(part, ec);
    throw DownloadError(no_room(w, limit), Kind::no_room);
  }
}

}  // namespace

bool in_place(const fs::path& file, std::optional<std::uint64_t> size) {
  struct stat st {};
  return ::stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (!size || std::uint64_t(st.st_size) == *size);
}

void fetch_one(HttpClient& http, const fs::path& dir, const Wanted& w, const std::atomic<bool>* stopping,
               const CacheLimit* limit) {
  const fs::path file = dir / w.file;
  if (in_place(file, w.size)) return;
  const FileLock shard = lock(dir / (w.file + ".lock"), stopping);
  if (in_place(file, w.size)) return;
  const fs::path part = dir / (w.file + ".part");
  std::error_code ec;
  if (limit) {
    // The reservation: the size in the lock file we hold, and the .part it
    // goes with (cache_usage counts the pair so).
    const std::string size = std::to_string(w.size.value_or(0));
    const int made = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (made < 0 || ::ftruncate(shard.fd(), 0) != 0 || ::pwrite(shard.fd(), size.data(), size.size(), 0) < 0) {
      const int err = errno;
      if (made >= 0) ::close(made);
      fs::remove(part, ec);
      throw DownloadError(part.string() + ": cannot reserve the download's room: " + std::strerror(err), Kind::cache);
    }
    ::close(made);
    require_room(*limit, w, part, stopping);
  }
  try {
    http.get_to_file(w.url, part, w.size);
  } catch (const HttpError& error) {
    fs::remove(part, ec);
    throw DownloadError(error.what(), error.wrong_body() || lasting_status(error.status()) ? Kind::lasting : Kind::again);
  }
  if (w.checksum) {
    std::uint64_t sum = 0;
    try {
      sum = file_checksum(part);
    } catch (const std::exception& e) {
      fs::remove(part, ec);
      throw DownloadError(e.what(), Kind::again);
    }
    if (sum != *w.checksum) {
      fs::remove(part, ec);
      throw DownloadError(w.url.shown() + ": checksum " + hex16(sum) + ", not the " + hex16(*w.checksum) +
                              " its manifest lists (the shard was changed or damaged on the server, or on the way)",
                          Kind::lasting);
    }
  }
  if (limit && !w.size) require_room(*limit, w, part, stopping);  // its size known only now: held to the limit as it is
  fs::rename(part, file, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(part, ignored);
    throw DownloadError(file.string() + ": cannot move the download into place: " + ec.message(), Kind::cache);
  }
}

}  // namespace conveyor
