// One shard downloaded whole into a cache folder, safely: under the shard's
// lock file (SHARD.lock, flock), so that of several processes on one cache
// one downloads it and the others find it in place; into SHARD.part, renamed
// to SHARD once its size and checksum match what the manifest lists, so no
// reader ever sees part of a shard. remote_shards.h and streaming_shards.h
// download through it.
//
//   fetch_one(http, cache_dir, {child(prefix, "shard-000000.tar"), "shard-000000.tar", size, checksum});
//
// A shard that cannot be had is a DownloadError that says whether asking
// again could mend it (streaming_shards.h tries a shard again later when it
// could, and reads it by range meanwhile).
//
// Thread safety: fetch_one may run in several threads and processes at once
// over one folder, each thread with its own HttpClient.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "data/dataset.h"
#include "data/remote/http_client.h"
#include "data/remote/shard_cache.h"
#include "data/remote/url.h"

namespace conveyor {

// One shard to fetch: its URL, its file name in the cache folder, and what
// the manifest says of it (nothing for a shard listed by URL alone).
struct Wanted {
  RemoteUrl url;
  std::string file;
  std::optional<std::uint64_t> size, checksum;
};

// A download that failed, one line naming the URL or the cache file.
class DownloadError : public DatasetError {
 public:
  enum class Kind {
    // A later try may mend it: timeouts, resets, 5xx (after the client's
    // retries), a file that cannot be written, a stop.
    again,
    // The server does not have the shard the manifest lists, and asking
    // again will not mend it (a body whose size or checksum does not match,
    // a 4xx other than 408 and 429).
    lasting,
    // The cache's limit leaves no room for it (shard_cache.h).
    no_room,
    // The cache cannot take it: its lock file cannot be opened or locked, the
    // download cannot be renamed into place.
    cache,
  };
  DownloadError(const std::string& what, Kind kind) : DatasetError(what), kind_(kind) {}
  Kind kind() const noexcept { return kind_; }

 private:
  Kind kind_;
};

// Whether `file` is a regular file of the size wanted (of any size when none
// is known). Throws nothing.
bool in_place(const std::filesystem::path& file, std::optional<std::uint64_t> size);

// Downloads `w` into dir unless it is in place there. Blocks: on the
// shard's lock while another thread or process downloads it, then on the
// transfer. Once *stopping is set (null: never) it gives up, the wait on a
// lock within 50 ms, the transfer as HttpOptions::stopping says. With a
// limit (null: none), the download first reserves its size under it
// (make_room, shard_cache.h; a shard of unknown size is held to it once
// landed, and removed when it does not fit). Throws DownloadError: HTTP or
// transport errors after the retries (HttpError's text), a body whose size
// or checksum does not match, a lock or rename that fails, no room,
// "cancelled". A failed download leaves no SHARD.part.
void fetch_one(HttpClient& http, const std::filesystem::path& dir, const Wanted& w,
               const std::atomic<bool>* stopping = nullptr, const CacheLimit* limit = nullptr);

}  // namespace conveyor
