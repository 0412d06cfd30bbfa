#include "data/shards/shard_index.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <system_error>

#include "pipeline/fnv1a.h"
#include "data/atomic_file.h"
#include "data/dataset.h"
#include "data/file_system.h"
#include "data/image_extensions.h"
#include "data/quote_bytes.h"
#include "data/shards/tar_index.h"

namespace conveyor {

namespace fs = std::filesystem;

namespace {

// Version 2 added each shard's change time and inode, version 3 the samples'
// sources and the class names (from .path and .class), version 4 took them
// from .conveyor-source and .conveyor-class: an older index fails the first
// line's check and is rebuilt.
constexpr std::string_view kMagic = "conveyor-shard-index 4";

// Names go at the end of their line: '%', CR and LF escaped so any name fits.
std::string escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '%') out += "%25";
    else if (c == '\n') out += "%0A";
    else if (c == '\r') out += "%0D";
    else out += c;
  }
  return out;
}

std::optional<std::string> unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    const auto code = s.substr(i + 1, 2);
    if (code == "25") out += '%';
    else if (code == "0A") out += '\n';
    else if (code == "0D") out += '\r';
    else return std::nullopt;
    i += 2;
  }
  return out;
}

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
  const auto n = unescape(line);
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

// The file's bytes, or nothing when it is missing, not a regular file or unreadable.
std::optional<std::string> slurp(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::nullopt;
  try {
    std::ifstream f(p, std::ios::binary);
    if (!f) return std::nullopt;
    std::string s{std::istreambuf_iterator<char>(f), {}};
    if (f.bad()) return std::nullopt;
    return s;
  } catch (const std::exception&) {  // libstdc++ throws from underflow on a read error
    return std::nullopt;
  }
}

// Removes the temporaries of `file` that a killed writer left (FILE.tmpPID-N
// whose process is gone): Ctrl-C, SIGKILL or the OOM killer between write and
// rename. A PID alive here keeps its file; one of another PID namespace that
// reads as gone loses it, and its rename then fails: its index goes unwritten,
// never wrong.
void remove_stale_temporaries(const fs::path& file) {
  const std::string prefix = file.filename().string() + ".tmp";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(file.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (pid > 0 && *end == '-' && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH) fs::remove(e.path(), ec);
  }
}

// Writes text to `file` whole or not at all (an AtomicFile). False when
// anything fails.
bool write_atomically(const fs::path& file, const std::string& text) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  remove_stale_temporaries(file);
  return write_file_atomically(file, {reinterpret_cast<const unsigned char*>(text.data()), text.size()}) == 0;
}

}  // namespace

std::string ShardIndex::serialize() const {
  std::string body = std::string(kMagic) + "\n";
  for (const auto& s : shards) {
    body += "shard " + std::to_string(s.size) + " " + std::to_string(s.mtime_ns) + " " + std::to_string(s.ctime_ns) + " " +
            std::to_string(s.inode) + " " + escape(s.file) + "\n";
  }
  for (const auto& s : samples) {
    body += "sample " + std::to_string(s.shard) + " " + std::to_string(s.offset) + " " + std::to_string(s.size) + " " +
            std::to_string(s.label) + " " + escape(s.member) + "\n";
    if (!s.source.empty()) body += "source " + escape(s.source) + "\n";  // the sample above's
  }
  for (std::size_t label = 0; label < classes.size(); ++label) {
    if (!classes[label].empty()) body += "class " + std::to_string(label) + " " + escape(classes[label]) + "\n";
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
      const auto source = unescape(line.substr(7));
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

// Version 2 added each shard's size and checksum; version 1 is still read.
constexpr std::string_view kManifestMagic = "conveyor-shard-manifest 2", kManifestMagic1 = "conveyor-shard-manifest 1";

ShardIndex current_index(const fs::path& dir, IndexSource* source, PartialFolders partials) {
  const auto now = list_shards(dir, partials);
  const fs::path cache = index_in_cache(dir);
  for (const fs::path& file : {index_beside(dir), cache}) {
    if (file.empty()) continue;
    const auto text = slurp(file);
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
  if (write_atomically(index_beside(dir), text)) {
    how = IndexSource::built_beside;
  } else if (!cache.empty() && write_atomically(cache, text)) {
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
           escape(index.shards[i].file) + "\n";
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
  return write_atomically(dir / kManifestName, manifest_text(index, checksums));
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
  const auto name = unescape(line);
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
  const auto text = slurp(file);
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
