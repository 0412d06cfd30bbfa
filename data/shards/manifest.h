// The manifest of a shard folder: DIR/.conveyor-manifest, the list of shards
// `conveyor pack` wrote, which readers hold a folder to.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/shards/shard_index.h"

namespace conveyor {

// DIR/.conveyor-manifest is written by `conveyor pack` after its
// shards, naming each shard, how many samples it holds, its size and its
// checksum. Unlike the index (a cache, rebuilt from whatever is there) no
// reader rewrites it, so a folder that lost a shard on the way (an
// interrupted copy, a deleted file) is told from a smaller dataset, and one
// holding a shard it does not name (added later by hand) from the packed one;
// a reader over HTTP lists the shards from it and checks each download
// against its size and checksum. Text: a version line, then per shard
// "COUNT SIZE CHECKSUM NAME" (version 2: CHECKSUM is file_checksum() in 16
// hex digits) or "COUNT NAME" (version 1, still read: no size or checksum).
inline constexpr std::string_view kManifestName = ".conveyor-manifest";
struct ManifestEntry {
  std::string file;
  std::uint64_t count = 0;
  std::optional<std::uint64_t> size, checksum;  // absent in a version 1 manifest
};
// The entries of a manifest's text. Throws DatasetError "WHERE:LINE: why" +
// `remedy` when it is not one.
std::vector<ManifestEntry> parse_manifest(std::string_view text, const std::string& where, const std::string& remedy = "");
// FNV-1a (pipeline/fnv1a.h) of the file's bytes. Throws DatasetError naming
// the file when it cannot be read.
std::uint64_t file_checksum(const std::filesystem::path& file);
// The manifest (version 2) of `index`, whose shard i has checksum checksums[i].
std::string manifest_text(const ShardIndex& index, const std::vector<std::uint64_t>& checksums);
// Writes DIR's manifest for `index` (a temporary renamed over it), reading
// each shard for its checksum. False when it cannot.
bool write_manifest(const std::filesystem::path& dir, const ShardIndex& index);
// Throws DatasetError naming the shard when DIR's manifest lists one that
// `index` lacks or that holds another number of samples, or (unless
// `unlisted` is read) when `index` holds a shard the manifest does not list;
// or naming the line when the manifest is not one. No manifest: nothing to
// check. Sizes and checksums are not checked here (the index already tells a
// rewritten shard; reading every shard would cost each open a full pass).
void check_manifest(const std::filesystem::path& dir, const ShardIndex& index,
                    UnlistedShards unlisted = UnlistedShards::refuse);

}  // namespace conveyor
