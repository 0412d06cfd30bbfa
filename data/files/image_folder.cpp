#include "data/files/image_folder.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "data/image_extensions.h"
#include "data/quote_bytes.h"

namespace conveyor {

namespace fs = std::filesystem;

namespace {

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
        if (is_image_extension(name.extension().string())) here.names.push_back(name.string());
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

Dataset dataset_from_folder(const fs::path& root) {
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
  DatasetBuilder b;
  std::vector<std::string> empty;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    const std::vector<fs::path> files = walker.files(root / classes[c]);
    if (files.empty()) empty.push_back(classes[c]);
    for (const fs::path& f : files) b.add_file({}, f.native(), static_cast<std::int64_t>(c));
  }
  if (!empty.empty()) {
    std::string msg = name + ": found no valid file for the classes ";
    for (std::size_t i = 0; i < empty.size(); ++i) msg += (i ? ", " : "") + quote_bytes(empty[i]);
    msg += "; image files have one of the extensions";
    for (std::string_view ext : kImageExtensions) (msg += ' ') += ext;
    msg += " (.tif, .tiff and .webp are taken, so indices match, but not decoded)";
    throw DatasetError(msg);
  }

  b.set_classes(std::move(classes));
  return b.build(root);
}

}  // namespace conveyor
