#include "data/files/list_file.h"

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include "data/label.h"
#include "data/quote_bytes.h"

namespace conveyor {

namespace fs = std::filesystem;

namespace {

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

}  // namespace

Dataset dataset_from_list(const fs::path& list_file) {
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
  DatasetBuilder b;
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

    b.add_file(path_text.front() == '/' ? std::string_view() : std::string_view(prefix), without_dot_segments(path_text),
               label);
  }
  if (in.bad()) throw DatasetError(name + ":" + std::to_string(line_no + 1) + ": read error");

  return b.build(list_file);
}

}  // namespace conveyor
