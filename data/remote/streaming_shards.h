// StreamingShards: the shards of a remote folder, readable from the moment its
// manifest and index are in, while they download. A FileSystem over the cache
// folder (the Dataset's files(): data/dataset.h) in which
// - a shard in place in the cache is read as a local file;
// - a shard not yet in place is read with one range request per read (a
//   sample alone, over a connection kept for the next), so the first batch
//   waits for its own samples, not for the dataset;
// - the pipeline's read-ahead advice (File::will_need: the next batch's
//   samples, in the epoch's order) for a shard not yet in place sends those
//   range requests ahead, 8 at a time, each thread over its own connection
//   (64 MiB held at most), and the worker's read takes the bytes;
// - meanwhile `parallel` threads download the shards whole, in the order
//   given (shard_download.h: under each shard's lock, checked against the
//   manifest's size and checksum, renamed into place), and reads of a shard
//   turn local the moment it lands. A sample crosses the network once at most
//   per shard download, and an epoch after the downloads is local.
// A shard the server does not have as the manifest lists it (a checksum or
// size that does not match, a 403 or 404: DownloadError::lasting) fails
// every later read of it with that line, by range too: a shard known bad is
// never read again. Bytes read by range before then are checked for length
// only (the manifest's checksums are per shard). A download that fails for a
// reason a later try may mend (the server down past the client's retries)
// goes to the back of the queue, 3 downloads in all; the shard is read by
// range meanwhile, and after, each read with its own retries. So is a shard
// the cache cannot take (no room under its limit, a lock or rename that
// fails).
//
//   auto files = std::make_shared<StreamingShards>(cache_dir, wanted, options);
//   Dataset d = dataset_from_index(cache_dir, index).with_files(files);
//
// With RemoteOptions::cache_bytes, each download first makes room under the
// limit (shard_cache.h): a shard that finds none is not downloaded, and is
// read by range every epoch. While the object lives, `dir` is leased: no job
// evicts its shards. A shard removed from the cache by other means is read
// by range again.
//
// After fork(), a child reads by range on connections of its own (the
// downloads are the parent's threads, which it does not have).
// Thread safety: as any FileSystem, open() and reads from any thread. The
// destructor stops the downloads (a transfer within about a second) and joins
// their threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/file_system.h"
#include "data/remote/remote_shards.h"
#include "data/remote/shard_cache.h"
#include "data/remote/shard_download.h"

namespace conveyor {

// What the shards' reads and downloads have done so far.
struct StreamingCounters {
  std::uint64_t shards = 0;          // shards in all
  std::uint64_t cached = 0;          // in place when reading began (a warm cache)
  std::uint64_t downloaded = 0;      // downloaded whole since (by this process or another)
  std::uint64_t downloaded_bytes = 0;  // their bytes
  std::uint64_t failed = 0;          // whose download failed for good
  std::uint64_t uncached = 0;        // not cached, read by range all the job: no room under the cache's limit, or downloads that kept failing
  std::uint64_t range_reads = 0;     // reads served by a range request
  std::uint64_t range_bytes = 0;     // their bytes
  double range_seconds = 0;          // the readers' time in range requests, failed ones too (waiting on the network)
  std::uint64_t retries = 0;         // requests retried, range reads' and downloads'
  std::uint64_t read_ahead = 0;      // of the range reads, those whose request was sent ahead (the pipeline's advice)
  std::string uncached_why;          // why the last shard not cached was not (its download's line)
};

// The bottleneck line when the network is the limit: the workers' range
// reads took more than half of their busy time `workers_busy_s` (the
// "workers" stage's busy_s over the same interval); none otherwise. Throws
// nothing but bad_alloc.
std::optional<std::string> network_bottleneck(const StreamingCounters& c, double workers_busy_s);

class StreamingShards final : public FileSystem {
 public:
  // Starts the downloads of the shards not in place in `dir`. Every Wanted
  // has its size. options.cache_dir is the cache's root (resolved: not
  // empty) when options.cache_bytes is set. Throws std::invalid_argument for
  // a Wanted without a size, HttpError when the build has no libcurl,
  // DatasetError when `dir` cannot be leased.
  StreamingShards(std::filesystem::path dir, std::vector<Wanted> shards, RemoteOptions options);
  ~StreamingShards() override;
  StreamingShards(const StreamingShards&) = delete;
  StreamingShards& operator=(const StreamingShards&) = delete;

  // A shard of the list (by its path in `dir`) as the File above; any other
  // path as posix_file_system() opens it.
  std::unique_ptr<File> open(const std::filesystem::path& path) override;

  // Throws nothing.
  StreamingCounters counters() const;
  // Blocks until every shard is in place or failed. Throws nothing.
  void wait_for_downloads() const;

  struct State;  // the implementation's: shared with the Files open() makes

 private:
  std::shared_ptr<State> state_;
};

}  // namespace conveyor
