// ShardIndex: what dataset_from_shards needs to know about a folder of tar
// shards (each shard's name, size, times and inode; each sample's shard,
// member, byte range, label and, for shards `conveyor pack` wrote, its source
// name; the class names), scanned once and cached, so later opens read one
// small file instead of every tar header.
//
// The cache: DIR/.conveyor-index, or where that cannot be written (a read-only
// folder) the user's cache folder (user_cache_dir(): $XDG_CACHE_HOME/conveyor,
// ~/.cache/conveyor, or a private folder in the temp folder), under a name
// made from the folder's absolute path. It is text: a version line, one line
// per shard and per sample, and a checksum (FNV-1a of everything before it).
// An index whose checksum, format or shard list (names, sizes, modification
// and change times, inodes) does not match the folder is stale or corrupt: it
// is ignored and rebuilt. The change time (ctime) is what makes a shard
// rewritten with its old size and modification time (`cp -p`, `touch -r`)
// stale: no user call can set it back. The price: copying a folder with its
// index, or a chmod, costs one rebuild, and on file systems whose inode
// numbers change at each mount (some FUSE and CIFS mounts) each mount does.
//
// Thread safety: free functions; concurrent writers of one cache each write a
// temporary file and rename it, so a reader never sees half an index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.h"

namespace conveyor {

struct ShardIndex {
  struct Shard {
    std::string file;          // name within the folder, "shard-000000.tar"
    std::uint64_t size = 0;
    std::int64_t mtime_ns = 0;  // last write time, as the file system reports it
    std::int64_t ctime_ns = 0;  // last change of contents or metadata (stat's st_ctim)
    std::uint64_t inode = 0;    // a shard renamed over the old one has a new inode
    bool operator==(const Shard&) const = default;
  };
  struct Sample {
    std::uint32_t shard = 0;
    std::string member;  // the image member, "000000001.jpg"
    std::uint64_t offset = 0, size = 0;
    std::int64_t label = 0;
    std::string source;  // KEY.conveyor-source: the name it had where it was packed from ("cat/001.jpg"); "" when none
    bool operator==(const Sample&) const = default;
  };
  std::vector<Shard> shards;
  std::vector<Sample> samples;
  // From the samples' KEY.conveyor-class members, index = label: empty when no sample
  // has one; "" for a label no sample carries.
  std::vector<std::string> classes;
  bool operator==(const ShardIndex&) const = default;

  std::string serialize() const;
  // Throws DatasetError naming `where` when the text is not a valid index (format, checksum).
  static ShardIndex parse(std::string_view text, const std::string& where);
};

// The longest source or class name a shard's .conveyor-source or
// .conveyor-class may hold (PATH_MAX): pack refuses longer, readers too.
inline constexpr std::size_t kMaxPackedName = 4096;

// What `conveyor pack` writes its shards into, inside the output folder
// (".partial-PID"), before it moves them up: a folder holding one is not a
// whole dataset.
inline constexpr std::string_view kPartialPrefix = ".partial-";

// What list_shards does with a kPartialPrefix folder: refuse the folder (a
// reader), or list the shards beside it (`conveyor pack` indexing what it has
// just moved up, while another pack's claim on the folder is being withdrawn).
enum class PartialFolders { refuse, ignore };

// What a reader does with a .tar the folder's manifest does not list (a
// validation shard copied into a training folder): refuse it by name, or read
// it with the listed ones (--extra-shards, extra_shards=True).
enum class UnlistedShards { refuse, read };

// The folder's shards as they are now (name, size, times, inode), sorted by name.
// Throws DatasetError: not a directory, no .tar in it, cannot be listed, or a
// pack's unfinished kPartialPrefix folder in it (unless `partials` is ignore).
std::vector<ShardIndex::Shard> list_shards(const std::filesystem::path& dir,
                                           PartialFolders partials = PartialFolders::refuse);

// Scans every shard (dataset_from_shards's rules for keys, images, .cls,
// .conveyor-source and .conveyor-class). Throws DatasetError naming the shard and member.
ShardIndex build_shard_index(const std::filesystem::path& dir);

// How load_shard_index got its index.
enum class IndexSource {
  cached,         // read from a cache that matches the folder
  built_beside,   // scanned, and written to DIR/.conveyor-index
  built_cached,   // scanned, and written to the user's cache folder
  built,          // scanned; no cache could be written (the index still holds)
};

// The cached index when it is current, else build_shard_index() written to
// the cache; checked against DIR's manifest (check_manifest, manifest.h). Throws what
// build_shard_index and check_manifest throw.
ShardIndex load_shard_index(const std::filesystem::path& dir, IndexSource* source = nullptr,
                            PartialFolders partials = PartialFolders::refuse,
                            UnlistedShards unlisted = UnlistedShards::refuse);

// Where load_shard_index looks: DIR/.conveyor-index, then the user cache's file
// (an empty path when user_cache_dir() has none).
std::filesystem::path index_beside(const std::filesystem::path& dir);
std::filesystem::path index_in_cache(const std::filesystem::path& dir);

}  // namespace conveyor
