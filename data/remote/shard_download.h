// One shard downloaded whole into a cache folder, safely: under the shard's
// lock file (SHARD.lock, flock), so that of several processes on one cache
// one downloads it and the others find it in place; into SHARD.part, renamed
// to SHARD once its size and checksum match what the manifest lists, so no
// reader ever sees part of a shard. remote_shards.h and streaming_shards.h
// download through it.
//
//   fetch_one(http, cache_dir, {child(prefix, "shard-000000.tar"), "shard-000000.tar", size, checksum});
//
// Thread safety: fetch_one may run in several threads and processes at once
// over one folder, each thread with its own HttpClient.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "data/remote/http_client.h"
#include "data/remote/url.h"

namespace conveyor {

// One shard to fetch: its URL, its file name in the cache folder, and what
// the manifest says of it (nothing for a shard listed by URL alone).
struct Wanted {
  RemoteUrl url;
  std::string file;
  std::optional<std::uint64_t> size, checksum;
};

// Whether `file` is a regular file of the size wanted (of any size when none
// is known). Throws nothing.
bool in_place(const std::filesystem::path& file, std::optional<std::uint64_t> size);

// Downloads `w` into dir unless it is in place there. Blocks. Throws
// DatasetError, one line naming the URL (credentials hidden) or the cache
// file: HTTP or transport errors after the retries (HttpError's text), a
// body whose size or checksum does not match, a lock or rename that fails.
// A failed download leaves no SHARD.part.
void fetch_one(HttpClient& http, const std::filesystem::path& dir, const Wanted& w);

}  // namespace conveyor
