#include "data/shards/manifest.h"

#include <algorithm>
#include <charconv>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <system_error>

#include "data/file_system.h"
#include "data/shards/text.h"
#include "pipeline/fnv1a.h"

namespace conveyor {

namespace fs = std::filesystem;

namespace {
// Version 2 added each shard's size and checksum; version 1 is still read.
constexpr std::string_view kManifestMagic = "conveyor-shard-manifest 2", kManifestMagic1 = "conveyor-shard-manifest 1";
}  // namespace

std::uint64_t file_checksum(const fs::path& file) {
  std::unique_ptr<File> f;
  Fnv1a h;
  try {
    f = posix_file_system()->open(file);
    std::vector<unsigned char> buf(1 << 20);
    for (std::uint64_t at = 0;;) {
      const std::size_t n = f->read_at(at, buf.data(), buf.size());
      if (n == 0) break;
      h.add(buf.data(), n);
      at += n;
    }
  } catch (const std::exception& e) {
    throw DatasetError(file.string() + ": " + e.what());
  }
  return h.value;
}

std::string manifest_text(const ShardIndex& index, const std::vector<std::uint64_t>& checksums) {
  std::vector<std::uint64_t> counts(index.shards.size(), 0);
  for (const auto& s : index.samples) ++counts.at(s.shard);
  std::string out = std::string(kManifestMagic) + "\n";
  for (std::size_t i = 0; i < index.shards.size(); ++i) {
    out += std::to_string(counts[i]) + " " + std::to_string(index.shards[i].size) + " " + hex16(checksums.at(i)) + " " +
           shard_text::escape(index.shards[i].file) + "\n";
  }
  return out;
}

bool write_manifest(const fs::path& dir, const ShardIndex& index) {
  std::vector<std::uint64_t> checksums;
  try {
    for (const auto& s : index.shards) checksums.push_back(file_checksum(dir / s.file));
  } catch (const DatasetError&) {
    return false;
  }
  return shard_text::write_atomically(dir / kManifestName, manifest_text(index, checksums));
}

namespace {
// One "COUNT [SIZE CHECKSUM] NAME" line (the bracketed part in version 2).
std::optional<ManifestEntry> manifest_line(std::string_view line, bool sized) {
  ManifestEntry e;
  const auto number = [&line](std::uint64_t& v, int base) {
    const std::size_t space = line.find(' ');
    if (space == std::string_view::npos) return false;
    const auto [ptr, err] = std::from_chars(line.data(), line.data() + space, v, base);
    line.remove_prefix(space + 1);
    return err == std::errc{} && ptr == line.data() - 1;
  };
  std::uint64_t size = 0, sum = 0;
  if (!number(e.count, 10) || (sized && (!number(size, 10) || !number(sum, 16)))) return std::nullopt;
  if (sized) e.size = size, e.checksum = sum;
  const auto name = shard_text::unescape(line);
  if (!name || name->empty()) return std::nullopt;
  e.file = *name;
  return e;
}
}  // namespace

std::vector<ManifestEntry> parse_manifest(std::string_view text, const std::string& where, const std::string& remedy) {
  std::vector<ManifestEntry> out;
  std::size_t line_no = 0, begin = 0;
  bool sized = true;
  while (begin < text.size()) {
    const std::size_t end = std::min(text.find('\n', begin), text.size());
    std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    const std::string at = where + ":" + std::to_string(++line_no);
    // CRLF (edited on Windows) and trailing blanks: no shard name ends in one (it ends in .tar).
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    if (line_no == 1) {
      if (line != kManifestMagic && line != kManifestMagic1) {
        throw DatasetError(at + ": not a shard manifest (its first line is not '" + std::string(kManifestMagic) + "')" + remedy);
      }
      sized = line == kManifestMagic;
      continue;
    }
    if (line.empty()) continue;
    auto entry = manifest_line(line, sized);
    if (!entry) throw DatasetError(at + ": expected '" + (sized ? "COUNT SIZE CHECKSUM SHARD" : "COUNT SHARD") + "'" + remedy);
    out.push_back(std::move(*entry));
  }
  if (line_no == 0) throw DatasetError(where + ": empty (not a shard manifest)");
  return out;
}

void check_manifest(const fs::path& dir, const ShardIndex& index, UnlistedShards unlisted) {
  const fs::path file = dir / kManifestName;
  const auto text = shard_text::slurp(file);
  std::error_code ec;
  if (!text) {
    if (fs::exists(file, ec)) throw DatasetError(file.string() + ": cannot be read (not a regular file, or not readable)");
    return;
  }
  const std::string remove_it = "; remove " + file.string() + " to read the folder as it is";
  const std::vector<ManifestEntry> wanted = parse_manifest(*text, file.string(), remove_it);
  std::map<std::string, std::uint64_t> have;  // shard name -> samples in it now
  for (const auto& s : index.samples) ++have[index.shards.at(s.shard).file];
  for (const auto& s : index.shards) have.try_emplace(s.file, 0);
  const std::size_t listed = wanted.size();
  std::uint64_t total = 0;
  for (const auto& w : wanted) total += w.count;
  for (const auto& w : wanted) {
    const auto it = have.find(w.file);
    const std::string said = " (" + file.string() + ", written by conveyor pack, lists " + std::to_string(listed) +
                             " shard(s) of " + std::to_string(total) + " samples: an incomplete copy?)" + remove_it;
    if (it == have.end()) throw DatasetError((dir / w.file).string() + ": missing" + said);
    if (it->second != w.count) {
      throw DatasetError((dir / w.file).string() + ": holds " + std::to_string(it->second) + " samples, not " +
                         std::to_string(w.count) + said);
    }
  }
  if (unlisted == UnlistedShards::read) return;
  std::set<std::string> named;
  for (const auto& w : wanted) named.insert(w.file);
  for (const auto& s : index.shards) {
    if (named.count(s.file)) continue;
    throw DatasetError((dir / s.file).string() + ": not listed in " + file.string() + " (written by conveyor pack: " +
                       std::to_string(listed) + " shard(s) of " + std::to_string(total) +
                       " samples); a shard copied in later? Remove it, or read it too with --extra-shards "
                       "(Python: extra_shards=True)");
  }
}

}  // namespace conveyor
