#include "data/dataset.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <system_error>
#include <utility>

#include "pipeline/fnv1a.h"
#include "data/file_system.h"
#include "data/quote_bytes.h"
#include "data/shards/shard_index.h"

namespace conveyor {

namespace fs = std::filesystem;

namespace {

// torchvision's IMG_EXTENSIONS.
constexpr std::array<std::string_view, 13> kImageExtensions = {
    ".jpg", ".jpeg", ".png", ".ppm", ".pgm", ".pbm", ".pnm", ".bmp", ".tga", ".gif", ".tif", ".tiff", ".webp"};

constexpr std::string_view kBlank = " \t\r\v\f";
constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(kBlank);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kBlank) - first + 1);
}

// A listed path without its "." segments and doubled slashes ("./a//1.jpg" ->
// "a/1.jpg"). They name the same file; kept, they would change the sample's
// relative_name(), and so the dataset's name_digest(), when only some lines
// have them ("./a/1.jpg" beside "a/2.jpg"). ".." stays: when "link" is a
// symlink to a folder, "link/.." is not the folder that holds "link", so it
// cannot be folded without asking the file system. A path ending in "/" or
// "/." (or "." alone) names a folder and is kept as written, for the open to
// refuse under the name the user gave.
std::string without_dot_segments(std::string_view p) {
  if (p == "." || p.ends_with('/') || p.ends_with("/.")) return std::string(p);
  std::string out;
  if (p.starts_with('/')) out = "/";
  std::size_t start = 0;
  while (start <= p.size()) {
    const std::size_t end = std::min(p.find('/', start), p.size());
    const std::string_view part = p.substr(start, end - start);
    if (!part.empty() && part != ".") {
      if (!out.empty() && out.back() != '/') out += '/';
      out.append(part);
    }
    start = end + 1;
  }
  return out;
}

bool is_hidden(const fs::path& name) {
  const auto& s = name.native();
  return !s.empty() && s.front() == '.';
}

// Calls f(entry) for each entry of `dir`; throws DatasetError naming `dir` when it cannot be listed.
template <typename F>
void for_each_entry(const fs::path& dir, F&& f) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) f(*it);
  if (ec) throw DatasetError(dir.string() + ": cannot list directory: " + ec.message());
}

// One directory's image files, by name.
struct DirFiles {
  fs::path dir;
  std::vector<std::string> names;
};

// Walks one class directory as os.walk(followlinks=True) would, collecting the image files of each
// directory. `stack_` holds the canonical paths of the directories being walked (and the root), so a
// symlink back to one of them is not followed into an endless loop.
class ClassWalker {
 public:
  explicit ClassWalker(fs::path canonical_root) { stack_.push_back(std::move(canonical_root)); }

  // The image files under class_dir, in torchvision's order: by directory path, then by file name.
  std::vector<fs::path> files(const fs::path& class_dir) {
    found_.clear();
    std::error_code ec;
    fs::path canonical = fs::canonical(class_dir, ec);
    if (ec) throw DatasetError(class_dir.string() + ": cannot resolve directory: " + ec.message());
    walk(class_dir, std::move(canonical));
    std::sort(found_.begin(), found_.end(),
              [](const DirFiles& a, const DirFiles& b) { return a.dir.native() < b.dir.native(); });
    std::vector<fs::path> out;
    for (DirFiles& d : found_) {
      std::sort(d.names.begin(), d.names.end());
      for (const std::string& name : d.names) out.push_back(d.dir / name);
    }
    return out;
  }

 private:
  void walk(const fs::path& dir, fs::path canonical) {
    if (std::find(stack_.begin(), stack_.end(), canonical) != stack_.end()) return;  // a symlink loop
    stack_.push_back(std::move(canonical));
    DirFiles here{dir, {}};
    std::vector<std::pair<fs::path, fs::path>> subdirs;  // (path, canonical path)
    for_each_entry(dir, [&](const fs::directory_entry& entry) {
      const fs::path name = entry.path().filename();
      if (is_hidden(name)) return;
      std::error_code ec;
      if (!entry.is_directory(ec)) {  // files, links to files, and broken links, as os.walk lists them
        if (Dataset::is_image_extension(name.extension().string())) here.names.push_back(name.string());
        return;
      }
      if (!entry.is_symlink(ec)) {
        subdirs.emplace_back(entry.path(), stack_.back() / name);
        return;
      }
      fs::path target = fs::canonical(entry.path(), ec);
      if (ec) throw DatasetError(entry.path().string() + ": cannot resolve symlink: " + ec.message());
      subdirs.emplace_back(entry.path(), std::move(target));
    });
    if (!here.names.empty()) found_.push_back(std::move(here));
    for (auto& [path, canon] : subdirs) walk(path, std::move(canon));
    stack_.pop_back();
  }

  std::vector<fs::path> stack_;
  std::vector<DirFiles> found_;
};

}  // namespace

std::span<const std::string_view> Dataset::image_extensions() { return kImageExtensions; }

bool Dataset::is_image_extension(std::string_view ext) {
  std::string lower(ext);
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return std::find(kImageExtensions.begin(), kImageExtensions.end(), lower) != kImageExtensions.end();
}

Dataset::Dataset(std::vector<fs::path> paths, std::vector<std::int64_t> labels, std::vector<std::string> classes)
    : labels_(std::move(labels)), classes_(std::move(classes)) {
  if (paths.size() != labels_.size()) {
    throw std::invalid_argument("dataset: " + std::to_string(paths.size()) + " paths but " +
                                std::to_string(labels_.size()) + " labels");
  }
  check_labels();
  std::size_t bytes = 0;
  for (const fs::path& p : paths) bytes += p.native().size();
  path_chars_.reserve(bytes);
  path_ends_.reserve(paths.size());
  for (const fs::path& p : paths) add_path(p.native());
}

void Dataset::add_path(std::string_view native) {
  path_chars_.append(native);
  path_ends_.push_back(path_chars_.size());
}

void Dataset::check_labels() {
  std::int64_t max_label = -1;
  for (std::size_t i = 0; i < labels_.size(); ++i) {
    const std::int64_t l = labels_[i];
    if (l < 0) {
      throw std::invalid_argument("dataset: sample " + std::to_string(i) + " has negative label " + std::to_string(l));
    }
    if (l > kMaxLabel) {
      throw std::invalid_argument("dataset: sample " + std::to_string(i) + " has label " + std::to_string(l) +
                                  ", above the maximum " + std::to_string(kMaxLabel));
    }
    if (!classes_.empty() && static_cast<std::uint64_t>(l) >= classes_.size()) {
      throw std::invalid_argument("dataset: sample " + std::to_string(i) + " has label " + std::to_string(l) +
                                  " but there are only " + std::to_string(classes_.size()) + " classes");
    }
    max_label = std::max(max_label, l);
  }
  num_classes_ = max_label + 1;
}

std::optional<Dataset::ByteRange> Dataset::range(std::size_t i) const {
  if (i >= size()) throw_out_of_range(i);
  if (ranges_.empty()) return std::nullopt;
  return ranges_[i];
}

std::string Dataset::name(std::size_t i) const {
  if (i >= size()) throw_out_of_range(i);
  if (shards_.empty()) return std::string(stored_path(i));
  std::string out = shards_[shard_of_[i]].string() + ":" + std::string(stored_path(i));
  if (const std::string_view s = source(i); !s.empty()) out.append(" (").append(s).append(")");
  return out;
}

std::size_t Dataset::common_folder() const {
  // name(i) without an allocation per sample for files (their stored path);
  // a shard's "shard.tar:member" is built in one reused buffer.
  std::string buffer;
  const auto name_of = [&](std::size_t i) -> std::string_view {
    if (shards_.empty()) return stored_path(i);
    buffer.assign(shards_[shard_of_[i]].native()).append(":").append(stored_path(i));
    return buffer;
  };
  std::optional<std::string> first;
  std::size_t n = 0;  // bytes every name shares so far
  for (std::size_t i = 0; i < size(); ++i) {
    if (!source(i).empty()) continue;
    const std::string_view name = name_of(i);
    if (!first) {
      first = std::string(name);
      n = name.size();
      continue;
    }
    std::size_t k = 0;
    while (k < n && k < name.size() && name[k] == (*first)[k]) ++k;
    n = k;
    if (n == 0) break;
  }
  const std::size_t slash = n == 0 ? std::string::npos : first->rfind('/', n - 1);
  return slash == std::string::npos ? 0 : slash + 1;
}

std::string Dataset::relative_name(std::size_t i, std::size_t folder) const {
  if (i >= size()) throw_out_of_range(i);
  if (const std::string_view s = source(i); !s.empty()) return std::string(s);
  if (shards_.empty()) {
    const std::string_view path = stored_path(i);
    return std::string(folder <= path.size() ? path.substr(folder) : path);
  }
  const std::string name = this->name(i);  // "shard.tar:member": it has no source
  return folder <= name.size() ? name.substr(folder) : name;
}

std::uint64_t Dataset::name_digest() const {
  Fnv1a h;
  const std::size_t folder = common_folder();
  for (std::size_t i = 0; i < size(); ++i) {
    const std::string name = relative_name(i, folder);
    h.add(name.data(), name.size());
    h.add("", 1);  // a separator: "ab"+"c" differs from "a"+"bc"
    h.add_value(label(i));
  }
  return h.value;
}

Dataset Dataset::subset(std::span<const std::size_t> indices) const {
  Dataset d;
  d.classes_ = classes_;
  d.source_ = source_;
  d.shards_ = shards_;
  for (const std::size_t i : indices) {
    if (i >= size()) throw_out_of_range(i);
    d.add_path(stored_path(i));
    d.labels_.push_back(labels_[i]);
    if (!shards_.empty()) {
      d.shard_of_.push_back(shard_of_[i]);
      d.ranges_.push_back(ranges_[i]);
    }
    if (!source_ends_.empty()) d.add_source(source(i));
  }
  d.check_labels();
  d.num_classes_ = std::max(d.num_classes_, num_classes_);  // a part keeps the whole's label space
  return d;
}

Dataset Dataset::rank_subset(std::size_t rank, std::size_t world_size, ShardPolicy policy) const {
  if (shards_.empty()) throw std::invalid_argument("dataset: rank by shard needs a shard dataset (--shards)");
  if (world_size == 0 || rank >= world_size) {
    throw std::invalid_argument("dataset: rank " + std::to_string(rank) + " of " + std::to_string(world_size));
  }
  if (shards_.size() < world_size) {
    throw std::invalid_argument("dataset: " + std::to_string(shards_.size()) + " shards cannot go whole to " +
                                std::to_string(world_size) + " ranks; shard by sample instead");
  }
  std::vector<std::size_t> count(world_size), mine;
  for (std::size_t i = 0; i < size(); ++i) {
    const std::size_t r = shard_of_[i] % world_size;
    ++count[r];
    if (r == rank) mine.push_back(i);
  }
  // A rank whose shards hold no sample would have nothing to pad from: it would
  // run zero steps while the others wait for it (a hung collective). Every
  // rank finds the same count, so every rank refuses alike.
  if (const auto empty = std::find(count.begin(), count.end(), std::size_t{0}); empty != count.end()) {
    const std::size_t r = std::size_t(empty - count.begin());
    std::string names;
    for (std::size_t k = r; k < shards_.size(); k += world_size) {
      names += (names.empty() ? "" : ", ") + shards_[k].filename().string();
    }
    throw std::invalid_argument("dataset: rank " + std::to_string(r) + " of " + std::to_string(world_size) +
                                " would get no samples: its shards (" + names +
                                ") hold none; remove the empty shards or shard by sample instead");
  }
  const std::size_t target = policy == ShardPolicy::pad ? *std::max_element(count.begin(), count.end())
                                                        : *std::min_element(count.begin(), count.end());
  if (mine.size() > target) mine.resize(target);
  for (std::size_t k = 0; mine.size() < target && !mine.empty(); ++k) {
    const std::size_t again = mine[k];  // pad: repeat from the head
    mine.push_back(again);
  }
  return subset(mine);
}

void Dataset::throw_out_of_range(std::size_t i) const {
  throw std::out_of_range("dataset: sample index " + std::to_string(i) + " is out of range (size " +
                          std::to_string(size()) + ")");
}

Dataset Dataset::from_list(const fs::path& list_file) {
  const std::string name = list_file.string();
  std::error_code ec;
  const fs::file_status st = fs::status(list_file, ec);
  if (st.type() == fs::file_type::not_found) throw DatasetError(name + ": list file not found");
  if (ec) throw DatasetError(name + ": cannot stat list file: " + ec.message());
  if (fs::is_directory(st)) throw DatasetError(name + ": list file is a directory");
  // A FIFO would block the open until a writer comes (forever, for a stray
  // mkfifo) and a device never ends: a list is a regular file.
  if (!fs::is_regular_file(st)) throw DatasetError(name + ": list file is not a regular file");

  errno = 0;
  std::ifstream in(list_file, std::ios::binary);  // binary: CRLF is trimmed below, never translated
  if (!in) {
    const int err = errno;
    throw DatasetError(name + ": cannot open list file" +
                       (err != 0 ? ": " + std::generic_category().message(err) : std::string()));
  }

  // What `base / p` puts before a relative path p: base plus a separator when base ends in a
  // filename, or nothing when base is empty. A path is absolute, and kept as it is, when it starts
  // with the root directory '/' (POSIX: no root names).
  std::string prefix = (list_file.parent_path() / "x").native();
  prefix.pop_back();
  Dataset d;
  std::string line;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    std::string_view s = line;
    if (line_no == 1 && s.starts_with(kUtf8Bom)) s.remove_prefix(kUtf8Bom.size());
    const auto fail = [&](const std::string& reason) {
      throw DatasetError(name + ":" + std::to_string(line_no) + ": " + reason);
    };
    // A CR before the LF ends a CRLF line. One anywhere else is a file with
    // CR-only line ends (old Mac), which would read as one line: one sample
    // (or one comment, and no sample) without a word.
    if (const auto cr = s.find('\r'); cr != std::string_view::npos && cr + 1 != s.size()) {
      fail("a carriage return inside the line: are its line ends CR alone? (write LF or CRLF)");
    }
    s = trim(s);
    if (s.empty() || s.front() == '#') continue;

    // No path holds a NUL; kept, it would cut the path (and every message naming it) short.
    if (s.find('\0') != std::string_view::npos) fail("the line holds a NUL byte");
    const auto cut = s.find_last_of(kBlank);
    const std::string_view label_text = cut == std::string_view::npos ? s : s.substr(cut + 1);
    const std::string_view path_text = cut == std::string_view::npos ? std::string_view() : trim(s.substr(0, cut));
    const ParsedLabel parsed = parse_label(label_text);
    if (parsed.status == LabelParse::not_integer && cut == std::string_view::npos) {
      fail("no label: expected 'path label', got " + quote_bytes(s));
    }
    if (parsed.status != LabelParse::ok) fail(label_error(label_text, parsed.status));
    const std::int64_t label = parsed.value;
    if (path_text.empty()) fail("empty path before label " + quote_bytes(label_text));

    if (path_text.front() != '/') d.path_chars_.append(prefix);  // part of this sample's path
    d.add_path(without_dot_segments(path_text));
    d.labels_.push_back(label);
  }
  if (in.bad()) throw DatasetError(name + ":" + std::to_string(line_no + 1) + ": read error");

  d.path_chars_.shrink_to_fit();
  d.path_ends_.shrink_to_fit();
  d.labels_.shrink_to_fit();
  d.check_labels();
  d.source_ = list_file;
  return d;
}

Dataset Dataset::from_folder(const fs::path& root) {
  const std::string name = root.string();
  std::error_code ec;
  const fs::file_status st = fs::status(root, ec);
  if (st.type() == fs::file_type::not_found) throw DatasetError(name + ": image folder not found");
  if (ec) throw DatasetError(name + ": cannot stat image folder: " + ec.message());
  if (!fs::is_directory(st)) throw DatasetError(name + ": image folder is not a directory");

  // Class directories: the non-hidden directories (or links to them) directly in root.
  std::vector<std::string> classes;
  for_each_entry(root, [&](const fs::directory_entry& entry) {
    const fs::path cls = entry.path().filename();
    std::error_code dir_ec;
    if (!is_hidden(cls) && entry.is_directory(dir_ec)) classes.push_back(cls.string());
  });
  if (classes.empty()) throw DatasetError(name + ": no class directories (expected " + name + "/<class>/<image>)");
  std::sort(classes.begin(), classes.end());  // char_traits<char> compares as unsigned: byte order

  fs::path canonical_root = fs::canonical(root, ec);
  if (ec) throw DatasetError(name + ": cannot resolve image folder: " + ec.message());
  ClassWalker walker(std::move(canonical_root));
  Dataset d;
  std::vector<std::string> empty;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    const std::vector<fs::path> files = walker.files(root / classes[c]);
    if (files.empty()) empty.push_back(classes[c]);
    d.labels_.insert(d.labels_.end(), files.size(), static_cast<std::int64_t>(c));
    for (const fs::path& f : files) d.add_path(f.native());
  }
  if (!empty.empty()) {
    std::string msg = name + ": found no valid file for the classes ";
    for (std::size_t i = 0; i < empty.size(); ++i) msg += (i ? ", " : "") + quote_bytes(empty[i]);
    msg += "; image files have one of the extensions";
    for (std::string_view ext : kImageExtensions) (msg += ' ') += ext;
    msg += " (.tif, .tiff and .webp are taken, so indices match, but not decoded)";
    throw DatasetError(msg);
  }

  d.path_chars_.shrink_to_fit();
  d.path_ends_.shrink_to_fit();
  d.labels_.shrink_to_fit();
  d.classes_ = std::move(classes);
  d.check_labels();
  d.source_ = root;
  return d;
}

// ---------------------------------------------------------------- shards

Dataset Dataset::from_shards(const fs::path& dir, UnlistedShards unlisted) {
  const ShardIndex index = load_shard_index(dir, nullptr, PartialFolders::refuse, unlisted);
  Dataset d;
  d.source_ = dir;
  for (const auto& shard : index.shards) d.shards_.push_back(dir / shard.file);
  const bool sources = std::any_of(index.samples.begin(), index.samples.end(), [](const auto& s) { return !s.source.empty(); });
  for (const auto& sample : index.samples) {
    d.labels_.push_back(sample.label);
    d.add_path(sample.member);
    d.shard_of_.push_back(sample.shard);
    d.ranges_.push_back({sample.offset, sample.size});
    if (sources) d.add_source(sample.source);
  }
  d.classes_ = index.classes;
  d.check_labels();
  return d;
}

}  // namespace conveyor
