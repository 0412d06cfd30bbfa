// Remote shards: a folder of shards that `conveyor pack` wrote, read from an
// http://, https:// or s3:// prefix through a local cache. fetch_shards() fetches
// PREFIX/.conveyor-manifest, downloads each shard it lists whole into the
// cache (a temporary renamed into place once its size and checksum match the
// manifest's), and returns the cache folder, which dataset_from_shards then
// reads as any local folder: the same bytes in the same order as the shards
// read where they were packed, for any worker count, with exact resume.
// open_remote_shards() returns the dataset at once instead, its shards read
// while they download (streaming_shards.h).
//
//   const auto dir = fetch_shards("https://host/data/train/", {});
//   Dataset d = dataset_from_shards(dir);
//   Dataset streamed = open_remote_shards("s3://bucket/data/train/");
//
// The cache: CACHE_DIR/KEY/VERSION/, KEY = cache_key(prefix) (different
// prefixes never share a folder: KEY/.conveyor-url holds the prefix and is
// compared), VERSION = the FNV-1a of the manifest's text, so a prefix packed
// again gets a folder of its own and a cached shard is always the one its
// manifest lists. A shard in place was checked before it was renamed there:
// a warm cache costs one request, the manifest's (to learn whether the prefix
// was packed again), and reads no shard through twice.
// Several processes on one cache (the ranks of one job): each shard is
// downloaded by whichever takes its lock file (SHARD.lock, flock) first;
// the others wait on the lock, then find it in place. None sees a part of a
// shard: a download goes to SHARD.part, which the reader's listing skips.
// With RemoteOptions::cache_bytes, downloads make room under that limit
// (shard_cache.h); a Dataset returned here leases its cache folder while it
// lives, so no process evicts the shards it reads.
//
// Shards listed by URL instead (WebDataset's way, no manifest):
// "https://host/train-{000000..000127}.tar" (data/remote/url_list.h) or one
// ".../NAME.tar". Each is downloaded whole into CACHE_DIR/KEY/shards/, KEY
// the pattern's cache_key, and dataset_from_shards then indexes the folder
// once (one pass over each shard's headers) and caches the index there. With
// no manifest there is no size or checksum to hold a body to but the length
// the server announces, and a shard in the cache is not asked for again: after
// the shards change on the server, remove the cache folder. The samples come
// in the byte order of the shards' file names, as from a local folder.
//
// Thread safety: fetch_shards may run in several threads and processes at
// once over one cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

#include "data/dataset.h"
#include "data/remote/http_client.h"

namespace conveyor {

struct RemoteOptions {
  // The cache's root folder. Default (empty): user_cache_dir() / "remote".
  std::filesystem::path cache_dir;
  // The most bytes the files under cache_dir may hold (--cache-gb), every
  // location cached there together: the least recently used shards of
  // folders no job reads go to make room (data/remote/shard_cache.h). A
  // shard that still finds none is read by range while streaming; with
  // every shard downloaded first, the job fails in one line. Default: none.
  std::optional<std::uint64_t> cache_bytes;
  // Shards downloaded at once, each over its own connection. Default: 4.
  std::size_t parallel = 4;
  // Read the shards while they download (open_remote_shards, data/remote/
  // streaming_shards.h) where the server has the folder's index; false:
  // every shard downloaded and checked before the dataset is returned
  // (`conveyor inspect` and `pack` check so). Default: true.
  bool stream = true;
  HttpOptions http;
};

// A cache limit given in GB (--cache-gb, cache_gb=; 1 GB = 10^9 bytes) in
// bytes. Throws std::invalid_argument, its text the reason: not a finite
// number above 0, or over 16 EB.
std::uint64_t cache_gb_bytes(double gb);

// The manifest's name under a prefix, and the largest one read (64 MiB: a
// line per shard).
inline constexpr std::uint64_t kMaxManifestBytes = 64ull << 20;

// The dataset of `prefix`'s shards, returned as soon as it can be read: with
// options.stream, once the manifest and the folder's index (.conveyor-index,
// which `conveyor pack` writes beside its shards; held to the manifest) are
// in, its files() a StreamingShards that reads each shard by range until it
// has downloaded into the cache; otherwise, or where the server has no index,
// or the location lists its shards by URL, once every shard is downloaded
// (fetch_shards, fetch_listed_shards), read from the cache folder. Either
// way the same samples in the same order as the folder read locally. Throws
// what fetch_shards throws, and DatasetError for an index that does not
// match the manifest.
Dataset open_remote_shards(std::string_view prefix, const RemoteOptions& options = {});

// The local folder holding every shard `prefix`'s manifest lists, downloaded
// and checked. Blocks until the last is in place. Throws DatasetError, one
// line naming the URL (credentials hidden) or the cache file: the URL does
// not parse, the build has no libcurl, HTTP or transport errors after the
// retries (HttpError's text), a manifest that does not parse or records no
// sizes and checksums (version 1), a shard whose body or checksum does not
// match the manifest, a cache folder that cannot be made or written.
// A location that is_listed_location() goes to fetch_listed_shards instead.
std::filesystem::path fetch_shards(std::string_view prefix, const RemoteOptions& options = {});

// One rank's whole shards (Dataset::rank_subset's rule and `policy`), with
// only those shards downloaded: the folder's index (.conveyor-index, which
// `conveyor pack` writes beside its shards; kept in the cache folder once
// held to the manifest's shard names, sizes and sample counts) gives the
// whole dataset before any shard is fetched, the rank's samples are picked
// from it, and the shards they lie in are read as open_remote_shards reads
// them (streamed, or fetched first without options.stream). The same samples, in the same order, as rank_subset of the folder read
// locally. Where the server has no index (a 404), or the location lists its
// shards by URL, every shard is fetched first. Throws what fetch_shards
// throws, DatasetError for an index that does not match the manifest, and
// std::invalid_argument as rank_subset does.
Dataset fetch_rank_shards(std::string_view prefix, const RemoteOptions& options, std::size_t rank,
                          std::size_t world_size, ShardPolicy policy);

// Whether an http(s) location lists its shards by URL: it holds a brace
// group, or its last segment is NAME.tar. Throws nothing but bad_alloc.
bool is_listed_location(std::string_view location);

// The local folder holding every shard `pattern` lists (expand_url_list),
// downloaded. Blocks until the last is in place. Throws DatasetError, one
// line naming the pattern or the URL (credentials hidden): a pattern that
// does not expand, a URL that is not NAME.tar, two URLs with one file name,
// the build has no libcurl, HTTP or transport errors after the retries, a
// body shorter than the server announced, a cache folder that cannot be made
// or written.
std::filesystem::path fetch_listed_shards(std::string_view pattern, const RemoteOptions& options = {});

}  // namespace conveyor
