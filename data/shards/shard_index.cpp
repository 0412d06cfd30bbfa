#include "data/shards/shard_index.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <system_error>

#include "pipeline/fnv1a.h"
#include "data/atomic_file.h"
#include "data/dataset.h"
#include "data/file_system.h"
#include "data/image_extensions.h"
#include "data/quote_bytes.h"
#include "data/shards/manifest.h"
#include "data/shards/tar_index.h"
#include "data/shards/text.h"

namespace conveyor {

namespace fs = std::filesystem;

namespace {

// Version 2 added each shard's change time and inode, version 3 the samples'
// sources and the class names (from .path and .class), version 4 took them
// from .conveyor-source and .conveyor-class: an older index fails the first
// line's check and is rebuilt.
constexpr std::string_view kMagic = "conveyor-shard-index 4";

// Reads `count` space-separated integers then the rest of the line as a name.
template <typename... Ints>
bool fields(std::string_view line, std::string& name, Ints&... ints) {
  bool ok = true;
  const auto take = [&](auto& v) {
    if (!ok) return;
    const auto sp = line.find(' ');
    if (sp == std::string_view::npos) return void(ok = false);
    const auto r = std::from_chars(line.data(), line.data() + sp, v);
    ok = r.ec == std::errc{} && r.ptr == line.data() + sp;
    line.remove_prefix(sp + 1);
  };
  (take(ints), ...);
  if (!ok) return false;
  const auto n = shard_text::unescape(line);
  if (!n || n->empty()) return false;
  name = *n;
  return true;
}

// webdataset's split of a member path: key = up to the first '.' of the file
// name, extension = the rest with its dot, lower case.
std::pair<std::string_view, std::string> split_key(std::string_view member) {
  const auto slash = member.rfind('/');
  const auto dot = member.find('.', slash == std::string_view::npos ? 0 : slash + 1);
  if (dot == std::string_view::npos) return {member, ""};
  std::string ext(member.substr(dot));
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return {member.substr(0, dot), ext};
}

// A member's text with the blanks around it cut off (a label written by hand
// may end in a newline).
std::string_view trimmed(std::string_view text) {
  constexpr std::string_view kBlank = " \t\r\n\v\f";
  const auto first = text.find_first_not_of(kBlank);
  return first == std::string_view::npos ? std::string_view{} : text.substr(first, text.find_last_not_of(kBlank) - first + 1);
}

std::int64_t parse_cls(std::string_view bytes, const std::string& where) {
  const std::string_view text = trimmed(bytes);
  const ParsedLabel label = parse_label(text);
  if (label.status != LabelParse::ok) throw DatasetError(where + ": " + label_error(text, label.status));
  return label.value;
}

// The most a sample's small members may hold: a label 64 bytes, a source or
// class name kMaxPackedName.
constexpr std::uint64_t kMaxLabelMember = 64, kMaxSmallMember = kMaxPackedName;

// Reads a sample's small members (.cls first, then .conveyor-source and
// .conveyor-class: nullptr where absent) into out[k]; one pread when, as
// `conveyor pack` writes them, they lie together, else one each. Throws
// DatasetError naming the member.
void read_small_members(File& file, const fs::path& shard, const std::array<const TarMember*, 3>& members,
                        std::array<std::string, 3>& out) {
  std::uint64_t begin = std::numeric_limits<std::uint64_t>::max(), end = 0;
  for (const TarMember* m : members) {
    if (!m) continue;
    if (m == members[0] && m->size > kMaxLabelMember) {
      throw DatasetError(shard.string() + ":" + m->name + ": a label of " + std::to_string(m->size) +
                         " bytes (expected a decimal integer)");
    }
    if (m->size > kMaxSmallMember) {
      throw DatasetError(shard.string() + ":" + m->name + ": " + std::to_string(m->size) + " bytes (at most " +
                         std::to_string(kMaxSmallMember) + " expected)");
    }
    begin = std::min(begin, m->offset);
    end = std::max(end, m->offset + m->size);
  }
  std::vector<unsigned char> bytes;
  const auto read = [&](const TarMember& m, std::uint64_t at, std::uint64_t size) {
    try {
      read_file_range(file, at, size, size, bytes);
    } catch (const std::exception& e) {
      throw DatasetError(shard.string() + ":" + m.name + ": " + e.what());
    }
  };
  const bool together = end - begin <= 4 * kMaxSmallMember;
  if (together) read(**std::find_if(members.begin(), members.end(), [](auto* m) { return m; }), begin, end - begin);
  for (std::size_t k = 0; k < members.size(); ++k) {
    const TarMember* m = members[k];
    if (!m) continue;
    if (!together) read(*m, m->offset, m->size);
    const std::uint64_t at = together ? m->offset - begin : 0;
    out[k].assign(reinterpret_cast<const char*>(bytes.data()) + at, m->size);
  }
}

// One shard's samples, in the order their keys first appear. `class_of` is
// each sample's KEY.conveyor-class, or "" (kept beside `out`, not in the index).
void scan_shard(const fs::path& shard, std::uint32_t s, std::vector<ShardIndex::Sample>& out,
                std::vector<std::string>& class_of) {
  std::vector<TarMember> members;
  try {
    members = scan_tar(shard);
  } catch (const TarError& e) {
    throw DatasetError(e.what());
  }
  // A sample's members by role; .conveyor-source and .conveyor-class are what
  // `conveyor pack` adds: where the sample came from, and its class's name
  // (names of its own: other writers' .path or .class are not read, and
  // webdataset's decoders take `.class` for an integer label).
  enum Role { cls, path, class_name };
  struct Grouped {
    std::string key;
    const TarMember* image = nullptr;
    std::array<const TarMember*, 3> small{};  // by Role
  };
  const auto role_of = [](std::string_view ext) -> int {
    return ext == ".cls" ? cls : ext == ".conveyor-source" ? path : ext == ".conveyor-class" ? class_name : -1;
  };
  std::vector<Grouped> samples;
  std::map<std::string_view, std::size_t> by_key;
  for (const TarMember& m : members) {
    const auto [key, ext] = split_key(m.name);
    const auto [it, fresh] = by_key.try_emplace(key, samples.size());
    if (fresh) samples.push_back({std::string(key)});
    Grouped& g = samples[it->second];
    const int role = role_of(ext);
    if (!m.unreadable.empty()) {
      // A link or sparse file as a member read here cannot be read; as any
      // other member (KEY.json) it is not read at all.
      if (role >= 0 || is_image_extension(ext)) throw DatasetError(shard.string() + ":" + m.name + ": " + m.unreadable);
      continue;
    }
    if (role >= 0) {
      // `tar rf shard.tar k.cls` appends a second label; which one is meant is
      // not ours to guess (as two images are not).
      if (const TarMember* before = g.small[role]) {
        static constexpr const char* kWhat[] = {"labels", "source paths", "class names"};
        throw DatasetError(shard.string() + ":" + g.key + ": two " + kWhat[role] + " (" + before->name + ", " + m.name + ")");
      }
      g.small[role] = &m;
    } else if (is_image_extension(ext)) {
      if (g.image) throw DatasetError(shard.string() + ":" + g.key + ": two images (" + g.image->name + ", " + m.name + ")");
      g.image = &m;
    }
  }
  std::unique_ptr<File> file;  // opened once for all the shard's small members
  std::array<std::string, 3> text;
  for (const Grouped& g : samples) {
    const std::string where = shard.string() + ":" + g.key;
    if (!g.image) throw DatasetError(where + ": no image member (" + std::string(kImageExtensions[0]) + ", ...)");
    if (!g.small[cls]) throw DatasetError(where + ": no label (" + g.key + ".cls)");
    if (!file) {
      try {
        file = posix_file_system()->open(shard);
      } catch (const std::exception& e) {
        throw DatasetError(shard.string() + ": " + e.what());
      }
    }
    text = {};
    read_small_members(*file, shard, g.small, text);
    const std::int64_t label = parse_cls(text[cls], shard.string() + ":" + g.small[cls]->name);
    for (const Role r : {path, class_name}) {
      if (g.small[r] && text[r].empty()) throw DatasetError(shard.string() + ":" + g.small[r]->name + ": empty");
    }
    out.push_back({s, g.image->name, g.image->offset, g.image->size, label, std::move(text[path])});
    class_of.push_back(std::move(text[class_name]));
  }
}

}  // namespace

std::string ShardIndex::serialize() const {
  std::string body = std::string(kMagic) + "\n";
  for (const auto& s : shards) {
    body += "shard " + std::to_string(s.size) + " " + std::to_string(s.mtime_ns) + " " + std::to_string(s.ctime_ns) + " " +
            std::to_string(s.inode) + " " + shard_text::escape(s.file) + "\n";
  }
  for (const auto& s : samples) {
    body += "sample " + std::to_string(s.shard) + " " + std::to_string(s.offset) + " " + std::to_string(s.size) + " " +
            std::to_string(s.label) + " " + shard_text::escape(s.member) + "\n";
    if (!s.source.empty()) body += "source " + shard_text::escape(s.source) + "\n";  // the sample above's
  }
  for (std::size_t label = 0; label < classes.size(); ++label) {
    if (!classes[label].empty()) body += "class " + std::to_string(label) + " " + shard_text::escape(classes[label]) + "\n";
  }
  return body + "checksum " + hex16(fnv1a(body)) + "\n";
}

ShardIndex ShardIndex::parse(std::string_view text, const std::string& where) {
  const auto bad = [&](const std::string& why) { return DatasetError(where + ": not a valid shard index: " + why); };
  const auto tail = text.rfind("checksum ");
  if (tail == std::string_view::npos || text.substr(tail) != "checksum " + hex16(fnv1a(text.substr(0, tail))) + "\n") {
    throw bad("checksum mismatch or missing");
  }
  ShardIndex index;
  std::string_view body = text.substr(0, tail);
  std::size_t line_no = 0;
  while (!body.empty()) {
    const auto nl = body.find('\n');
    const std::string_view line = body.substr(0, nl);
    body.remove_prefix(nl == std::string_view::npos ? body.size() : nl + 1);
    if (line_no++ == 0) {
      if (line != kMagic) throw bad("first line is not '" + std::string(kMagic) + "'");
      continue;
    }
    if (line.starts_with("shard ")) {
      Shard s;
      if (!fields(line.substr(6), s.file, s.size, s.mtime_ns, s.ctime_ns, s.inode)) throw bad("line " + std::to_string(line_no));
      index.shards.push_back(std::move(s));
    } else if (line.starts_with("sample ")) {
      Sample s;
      if (!fields(line.substr(7), s.member, s.shard, s.offset, s.size, s.label) || s.shard >= index.shards.size() ||
          s.label < 0) {
        throw bad("line " + std::to_string(line_no));
      }
      index.samples.push_back(std::move(s));
    } else if (line.starts_with("source ")) {
      const auto source = shard_text::unescape(line.substr(7));
      if (index.samples.empty() || !index.samples.back().source.empty() || !source || source->empty()) {
        throw bad("line " + std::to_string(line_no));
      }
      index.samples.back().source = *source;
    } else if (line.starts_with("class ")) {
      std::string name;
      std::size_t label = 0;
      if (!fields(line.substr(6), name, label) || label >= index.samples.size() + 4096) throw bad("line " + std::to_string(line_no));
      if (label >= index.classes.size()) index.classes.resize(label + 1);
      index.classes[label] = std::move(name);
    } else {
      throw bad("line " + std::to_string(line_no));
    }
  }
  return index;
}

std::vector<ShardIndex::Shard> list_shards(const fs::path& dir, PartialFolders partials) {
  const std::string name = dir.string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw DatasetError(name + ": not a directory (--shards wants a folder of .tar files)");
  std::vector<ShardIndex::Shard> out;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    if (partials == PartialFolders::refuse && p.filename().string().starts_with(kPartialPrefix)) {
      throw DatasetError(name + ": holds " + p.filename().string() +
                         ", left by a `conveyor pack` into it that did not finish; pack again (it clears it) or remove it");
    }
    std::string ext = p.extension().string();  // .TAR too, as image extensions are matched
    for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (ext != ".tar") continue;
    struct stat st {};
    // A .tar that is a dangling link or not a file is refused, not skipped:
    // skipping it would train on part of the dataset without a word.
    if (::stat(p.c_str(), &st) != 0) throw DatasetError(p.string() + ": cannot stat: " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw DatasetError(p.string() + ": not a regular file (a shard must be a .tar file)");
    const auto ns = [](const timespec& t) { return std::int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec; };
    out.push_back({p.filename().string(), std::uint64_t(st.st_size), ns(st.st_mtim), ns(st.st_ctim), std::uint64_t(st.st_ino)});
  }
  if (ec) throw DatasetError(name + ": cannot list: " + ec.message());
  if (out.empty()) throw DatasetError(name + ": no .tar shards in this folder");
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.file < b.file; });
  return out;
}

namespace {
// The class names the samples carry (class_of[i]: sample i's, or ""), index =
// label. Throws DatasetError naming the members when some samples name their
// class and others do not (shards of two datasets in one folder), or when one
// label has two names.
std::vector<std::string> class_names(const fs::path& dir, const ShardIndex& index, const std::vector<std::string>& class_of) {
  const auto where = [&](std::size_t i) {
    const auto& s = index.samples[i];
    return (dir / index.shards[s.shard].file).string() + ":" + std::string(split_key(s.member).first);
  };
  const auto named = std::find_if(class_of.begin(), class_of.end(), [](const auto& c) { return !c.empty(); });
  if (named == class_of.end()) return {};
  const std::size_t first = std::size_t(named - class_of.begin());
  std::vector<std::string> classes;
  std::vector<std::size_t> named_by;  // the sample that gave each label its name
  std::map<std::string, std::size_t> label_of;  // and back: a folder's class names are distinct
  for (std::size_t i = 0; i < class_of.size(); ++i) {
    if (class_of[i].empty()) {
      throw DatasetError(where(i) + ": no class name (.conveyor-class), but " + where(first) +
                         " has one: are shards of two datasets in one folder?");
    }
    const auto label = std::size_t(index.samples[i].label);
    if (label >= classes.size()) {
      if (label >= index.samples.size() + 4096) {  // names for labels no sample has would be ""; this many is not a pack's
        throw DatasetError(where(i) + ": label " + std::to_string(label) + " with a class name, in a dataset of " +
                           std::to_string(index.samples.size()) + " samples");
      }
      classes.resize(label + 1);
      named_by.resize(label + 1);
    }
    if (classes[label].empty()) {
      if (const auto [it, fresh] = label_of.try_emplace(class_of[i], label); !fresh) {
        throw DatasetError(where(i) + ": class '" + class_of[i] + "' for label " + std::to_string(label) + ", which " +
                           where(named_by[it->second]) + " gives label " + std::to_string(it->second));
      }
      classes[label] = class_of[i];
      named_by[label] = i;
    } else if (classes[label] != class_of[i]) {
      throw DatasetError(where(i) + ": class '" + class_of[i] + "' for label " + std::to_string(label) + ", which " +
                         where(named_by[label]) + " names '" + classes[label] + "'");
    }
  }
  return classes;
}

// Scans the shards `listed` (list_shards' answer) of dir.
ShardIndex scan_shards(const fs::path& dir, std::vector<ShardIndex::Shard> listed) {
  ShardIndex index;
  index.shards = std::move(listed);
  std::vector<std::string> class_of;
  for (std::uint32_t s = 0; s < index.shards.size(); ++s) {
    scan_shard(dir / index.shards[s].file, s, index.samples, class_of);
  }
  index.classes = class_names(dir, index, class_of);
  return index;
}
}  // namespace

ShardIndex build_shard_index(const fs::path& dir) { return scan_shards(dir, list_shards(dir)); }

fs::path index_beside(const fs::path& dir) { return dir / ".conveyor-index"; }

fs::path index_in_cache(const fs::path& dir) {
  std::error_code ec;
  const fs::path absolute = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  Fnv1a h;
  h.add(absolute.native().data(), absolute.native().size());
  const auto root = user_cache_dir();
  return root ? *root / ("shards-" + hex16(h.value) + ".index") : fs::path();
}

namespace {

ShardIndex current_index(const fs::path& dir, IndexSource* source, PartialFolders partials) {
  const auto now = list_shards(dir, partials);
  const fs::path cache = index_in_cache(dir);
  for (const fs::path& file : {index_beside(dir), cache}) {
    if (file.empty()) continue;
    const auto text = shard_text::slurp(file);
    if (!text) continue;
    try {
      ShardIndex cached = ShardIndex::parse(*text, file.string());
      if (cached.shards == now) {
        if (source) *source = IndexSource::cached;
        return cached;
      }
    } catch (const DatasetError&) {  // corrupt: rebuilt below
    }
  }
  ShardIndex index = scan_shards(dir, now);  // the listing just compared: the folder is read once
  const std::string text = index.serialize();
  IndexSource how = IndexSource::built;
  if (shard_text::write_atomically(index_beside(dir), text)) {
    how = IndexSource::built_beside;
  } else if (!cache.empty() && shard_text::write_atomically(cache, text)) {
    how = IndexSource::built_cached;
  }
  if (source) *source = how;
  return index;
}

}  // namespace

ShardIndex load_shard_index(const fs::path& dir, IndexSource* source, PartialFolders partials, UnlistedShards unlisted) {
  ShardIndex index = current_index(dir, source, partials);
  check_manifest(dir, index, unlisted);
  return index;
}

}  // namespace conveyor
