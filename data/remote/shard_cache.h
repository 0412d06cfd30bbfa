// The shard cache's size limit (--cache-gb): the least recently used shards
// are removed to make room for a download, across every location cached
// under one root and every process that shares it.
//
// - What counts: every file under the root, a download in flight at the size
//   it will have (its SHARD.lock holds that size while the download holds the
//   lock), so downloads that start together cannot overrun the limit between
//   them. A shard listed by URL alone has no size until it lands: it reserves
//   nothing while in flight.
// - What goes: only shards the cache made (ROOT/KEY/VERSION/NAME.tar and
//   ROOT/KEY/shards/NAME.tar, ROOT/KEY/.conveyor-url beside), and the parts
//   downloads that died left; nothing else under the root. Where removing all
//   that may go would not make room, nothing goes.
// - Recency: a shard's mtime, set when it lands and when a job begins to read
//   it (touch_shards).
// - In use: a job leases each cache folder it reads (a shared flock on
//   FOLDER/.conveyor-lease, held while its Dataset lives). A leased folder's
//   shards are never removed, by any process: a job never loses a shard it
//   reads, and the ranks of one job on one cache keep theirs. A shard that
//   finds no room is not downloaded: streamed, it is read by range (each
//   epoch); downloaded first, the job fails in one line.
// - One decision at a time: make_room runs under ROOT/.conveyor-cache.lock
//   (an exclusive flock), which the downloads take only while they reserve.
//
//   CacheLimit limit{root, 50ull << 30};
//   const CacheLease lease(root / key / version);   // before reading or downloading
//   { const RootLock lock(limit.root, stopping); if (!make_room(limit, size)) ...; }
//
// Thread safety: every function may run in several threads and processes at
// once over one root.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>

#include "data/file_system.h"

namespace conveyor {

struct CacheLimit {
  std::filesystem::path root;  // the cache's root folder (RemoteOptions::cache_dir)
  std::uint64_t bytes = 0;     // the most the files under it may hold
};

// An exclusive flock on a lock file (made when absent), held while the
// object lives. It is tried every 50 ms until *stopping is set (null: never).
// Throws DatasetError naming the file: it cannot be opened or locked; "FILE:
// cancelled" once *stopping is set.
class FileLock {
 public:
  FileLock(const std::filesystem::path& file, const std::atomic<bool>* stopping);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  // The lock file's descriptor (a download writes its size there).
  int fd() const noexcept { return fd_; }

 private:
  int fd_;
};

// The root's lock, under which make_room decides.
inline std::filesystem::path root_lock_file(const std::filesystem::path& root) { return root / ".conveyor-cache.lock"; }

// A shared flock on FOLDER/.conveyor-lease while the object lives: no
// make_room, in any process, removes the folder's shards meanwhile. Blocks
// while make_room removes some of them. A folder this user may not write
// gets a lease opened read-only, or none where the file cannot be had (no
// process could remove its shards either). Throws DatasetError naming the
// file when it cannot be locked.
class CacheLease {
 public:
  explicit CacheLease(const std::filesystem::path& folder);
  ~CacheLease();
  CacheLease(const CacheLease&) = delete;
  CacheLease& operator=(const CacheLease&) = delete;

 private:
  int fd_;
};

// The bytes the files under `root` hold, each download in flight at the size
// its lock file announces. Throws nothing: what cannot be read counts 0.
std::uint64_t cache_usage(const std::filesystem::path& root);

// Whether `bytes` more fit under limit.root, after removing the parts dead
// downloads left, then the cache's shards of folders no process leases,
// least recently used first, until they do; nothing is removed where all of
// it would not make room. Call under root_lock_file's FileLock. Throws
// nothing but bad_alloc.
bool make_room(const CacheLimit& limit, std::uint64_t bytes);

// Sets the mtime of each NAME.tar in `folder` to now: the job about to read
// them used them last. Throws nothing.
void touch_shards(const std::filesystem::path& folder);

// The local files of a cache folder, leased while the object lives: the
// FileSystem of a Dataset read from a folder whose every shard is in place.
class LeasedFolder final : public FileSystem {
 public:
  // Throws what CacheLease throws.
  explicit LeasedFolder(const std::filesystem::path& folder);
  std::unique_ptr<File> open(const std::filesystem::path& path) override { return posix_file_system()->open(path); }

 private:
  CacheLease lease_;
};

}  // namespace conveyor
