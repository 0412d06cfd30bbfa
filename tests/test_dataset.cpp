#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/stat.h>

#include "catch_compat.h"

#include "data/dataset.h"
#include "data/files/image_folder.h"
#include "data/files/list_file.h"
#include "data/image_extensions.h"
#include "temp_dir.h"

using namespace conveyor;
using conveyor::test::TempDir;
namespace fs = std::filesystem;

namespace {

// Makes `dir` the current directory until destruction, then restores the previous one.
class CurrentDir {
 public:
  explicit CurrentDir(const fs::path& dir) : previous_(fs::current_path()) { fs::current_path(dir); }
  ~CurrentDir() {
    std::error_code ec;
    fs::current_path(previous_, ec);
  }
  CurrentDir(const CurrentDir&) = delete;
  CurrentDir& operator=(const CurrentDir&) = delete;

 private:
  fs::path previous_;
};

// what() of the DatasetError that f throws, or a note saying it threw none.
template <typename F>
std::string dataset_error(F&& f) {
  try {
    f();
  } catch (const DatasetError& e) {
    return e.what();
  }
  return "<no DatasetError thrown>";
}

std::vector<std::string> strings(const Dataset& d) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < d.size(); ++i) out.push_back(d.path(i).string());
  return out;
}

std::vector<std::int64_t> labels(const Dataset& d) {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < d.size(); ++i) out.push_back(d.label(i));
  return out;
}

}  // namespace

// ---- dataset_from_list

TEST_CASE("dataset list: relative paths resolve against the list file's folder, absolute ones stay", "[dataset]") {
  TempDir t;
  const fs::path list = t.write("sub/list.txt", "img/a.jpg 0\n/abs/b.jpg 1\n../c.jpg 2\n");
  const Dataset d = dataset_from_list(list);
  REQUIRE(d.size() == 3);
  CHECK(d.path(0) == t.root() / "sub" / "img/a.jpg");
  CHECK(d.path(1) == fs::path("/abs/b.jpg"));
  CHECK(d.path(2) == t.root() / "sub" / "../c.jpg");
  CHECK(labels(d) == std::vector<std::int64_t>{0, 1, 2});
  CHECK(d.source() == list);
  CHECK(d.classes().empty());
  CHECK_FALSE(fs::exists(d.path(0)));  // images are never checked
}

TEST_CASE("dataset list: paths are joined to the list's folder as parent / path, without \".\" segments", "[dataset]") {
  TempDir t;
  t.mkdir("sub");
  const std::vector<std::string> texts = {"img/a.jpg", "/abs/b.jpg", "../c.jpg", "./d e.jpg", "f", "//g/h.jpg",
                                          "i//j.jpg", ".k"};
  // The same without "." segments and doubled slashes; ".." stays (a symlink's ".." is not lexical).
  const std::vector<std::string> cleaned = {"img/a.jpg", "/abs/b.jpg", "../c.jpg", "d e.jpg", "f", "/g/h.jpg",
                                            "i/j.jpg", ".k"};
  std::string content;
  for (std::size_t i = 0; i < texts.size(); ++i) content += texts[i] + " " + std::to_string(i) + "\n";
  const auto check = [&](const fs::path& list) {
    INFO("list file " << list);
    t.write("sub/list.txt", content);
    const Dataset d = dataset_from_list(list);
    REQUIRE(d.size() == texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
      const fs::path p(cleaned[i]);
      const fs::path expected = p.is_absolute() ? p : list.parent_path() / p;  // the documented rule
      CHECK(d.path(i).native() == expected.native());
      CHECK(d.path_view(i) == expected.native());
    }
  };
  check(t.root() / "sub/list.txt");
  check(t.root() / "sub/./list.txt");
  check(t.root() / "sub//list.txt");
  check(t.root() / "sub/../sub/list.txt");
  const CurrentDir cd(t.root() / "sub");
  check("list.txt");  // no parent folder: relative paths stay relative, as written
  check("./list.txt");
  check("../sub/list.txt");
}

TEST_CASE("dataset list: \"./\" on some lines only changes neither names nor the digest", "[dataset]") {
  TempDir t;
  const fs::path plain = t.write("plain.txt", "a/1.jpg 0\na/2.jpg 0\nb/3.jpg 1\n");
  const Dataset d = dataset_from_list(plain);
  for (const char* text : {"./a/1.jpg 0\na/2.jpg 0\nb/3.jpg 1\n", "a/1.jpg 0\na/./2.jpg 0\nb//3.jpg 1\n",
                                  "./a/1.jpg 0\n./a/2.jpg 0\n././b/3.jpg 1\n"}) {
    INFO(text);
    const Dataset mixed = dataset_from_list(t.write("mixed.txt", text));
    CHECK(strings(mixed) == strings(d));
    CHECK(mixed.name_digest() == d.name_digest());
  }
  // What names another file, or a folder, is kept: ".." and a trailing "/." or "/".
  const Dataset odd = dataset_from_list(t.write("odd.txt", "x/../a/1.jpg 0\na/1.jpg/. 0\na/ 0\n. 0\n"));
  CHECK(odd.path(0) == t.root() / "x/../a/1.jpg");
  CHECK(odd.path(1) == t.root() / "a/1.jpg/.");
  CHECK(odd.path(2) == t.root() / "a/");
  CHECK(odd.path(3) == t.root() / ".");
}

TEST_CASE("dataset list: a path may contain spaces and the label is the last field", "[dataset]") {
  TempDir t;
  const fs::path list = t.write("list.txt",
                                "my images/cat 1.jpg 3\n"
                                "  /data/a  b.png\t\t7   \n"
                                "/data/img#1.jpg 007\n"
                                "/data/x 5 2\n");
  const Dataset d = dataset_from_list(list);
  REQUIRE(d.size() == 4);
  CHECK(d.path(0) == t.root() / "my images/cat 1.jpg");
  CHECK(d.path(1) == fs::path("/data/a  b.png"));  // inner whitespace kept, outer trimmed
  CHECK(d.path(2) == fs::path("/data/img#1.jpg"));
  CHECK(d.path(3) == fs::path("/data/x 5"));
  CHECK(labels(d) == std::vector<std::int64_t>{3, 7, 7, 2});
}

TEST_CASE("dataset list: comments, blank lines, CRLF endings and a BOM are handled", "[dataset]") {
  TempDir t;
  const fs::path list = t.write("list.txt",
                                "\xEF\xBB\xBF# header comment\r\n"
                                "\r\n"
                                "   \t \r\n"
                                "/d/a.jpg 1\r\n"
                                "   # indented comment 5\r\n"
                                "/d/b.jpg\t2\r\n"
                                "\n"
                                "/d/c.jpg 3");  // no final newline
  const Dataset d = dataset_from_list(list);
  REQUIRE(strings(d) == std::vector<std::string>{"/d/a.jpg", "/d/b.jpg", "/d/c.jpg"});
  CHECK(labels(d) == std::vector<std::int64_t>{1, 2, 3});
}

TEST_CASE("dataset list: a list with no samples gives an empty dataset", "[dataset]") {
  TempDir t;
  SECTION("comments and blank lines only") {
    const Dataset d = dataset_from_list(t.write("list.txt", "# nothing\n\n  \r\n"));
    CHECK(d.size() == 0);
    CHECK(d.num_classes() == 0);
  }
  SECTION("zero bytes") {
    const Dataset d = dataset_from_list(t.write("list.txt", ""));
    CHECK(d.size() == 0);
    CHECK(d.num_classes() == 0);
  }
}

TEST_CASE("dataset list: each malformed line throws file:line: reason", "[dataset]") {
  TempDir t;
  // The bad line is line 4, after a comment, a blank line and a good line, with CRLF endings.
  const auto error_for = [&](const std::string& bad) {
    const fs::path list = t.write("list.txt", "# c\r\n\r\n/d/ok.jpg 1\r\n" + bad + "\r\n/d/after.jpg 2\r\n");
    return dataset_error([&] { dataset_from_list(list); });
  };
  const std::string at = (t.root() / "list.txt").string() + ":4: ";

  CHECK(error_for("/d/a.jpg") == at + "no label: expected 'path label', got '/d/a.jpg'");
  // CR-only line ends: one line of three samples (or one comment), never read as one sample or none
  CHECK(error_for("/d/a.jpg 0\r/d/b.jpg 1\r/d/c.jpg 2") ==
        at + "a carriage return inside the line: are its line ends CR alone? (write LF or CRLF)");
  const fs::path mac = t.write("mac.txt", "# made on a Mac\r/d/a.jpg 0\r/d/b.jpg 1\r");
  CHECK(dataset_error([&] { dataset_from_list(mac); }) ==
        mac.string() + ":1: a carriage return inside the line: are its line ends CR alone? (write LF or CRLF)");
  CHECK(error_for("/d/a.jpg x1") == at + "label 'x1' is not a non-negative decimal integer");
  CHECK(error_for("/d/a.jpg -3") == at + "label '-3' is not a non-negative decimal integer");
  CHECK(error_for("/d/a.jpg -0") == at + "label '-0' is not a non-negative decimal integer");
  CHECK(error_for("/d/a.jpg +3") == at + "label '+3' is not a non-negative decimal integer");
  CHECK(error_for("/d/a.jpg 12abc") == at + "label '12abc' is not a non-negative decimal integer");
  CHECK(error_for("/d/a.jpg 1.5") == at + "label '1.5' is not a non-negative decimal integer");
  CHECK(error_for("/d/a.jpg 0x10") == at + "label '0x10' is not a non-negative decimal integer");
  CHECK(error_for("/d/a.jpg 99999999999999999999") ==
        at + "label '99999999999999999999' is out of range (max 9223372036854775806)");
  CHECK(error_for("/d/a.jpg 9223372036854775807") ==
        at + "label '9223372036854775807' is out of range (max 9223372036854775806)");
  CHECK(error_for("17") == at + "empty path before label '17'");
  CHECK(error_for(" \t 4 ") == at + "empty path before label '4'");
}

TEST_CASE("dataset list: the largest label is int64 max - 1", "[dataset]") {
  TempDir t;
  const Dataset d = dataset_from_list(t.write("list.txt", "/d/a.jpg 9223372036854775806\n/d/b.jpg 0\n"));
  REQUIRE(d.size() == 2);
  CHECK(d.label(0) == INT64_MAX - 1);
  CHECK(d.num_classes() == INT64_MAX);
}

TEST_CASE("dataset list: a missing list file or a directory throws naming it", "[dataset]") {
  TempDir t;
  const fs::path missing = t.root() / "nope" / "train.txt";
  CHECK(dataset_error([&] { dataset_from_list(missing); }) == missing.string() + ": list file not found");
  const fs::path dir = t.mkdir("a_dir");
  CHECK(dataset_error([&] { dataset_from_list(dir); }) == dir.string() + ": list file is a directory");
}

TEST_CASE("dataset list: num_classes is the max label + 1", "[dataset]") {
  TempDir t;
  const Dataset d = dataset_from_list(t.write("list.txt", "/a 0\n/b 5\n/c 2\n"));
  CHECK(d.num_classes() == 6);
  CHECK(d.classes().empty());
}

TEST_CASE("dataset list: many lines load in order", "[dataset]") {
  TempDir t;
  std::string text;
  constexpr int kLines = 20000;
  for (int i = 0; i < kLines; ++i) text += "img/" + std::to_string(i) + ".jpg " + std::to_string(i % 1000) + "\n";
  const Dataset d = dataset_from_list(t.write("list.txt", text));
  REQUIRE(d.size() == kLines);
  CHECK(d.path(12345) == t.root() / "img/12345.jpg");
  CHECK(d.label(12345) == 345);
  CHECK(d.num_classes() == 1000);
  for (std::size_t i = 0; i < d.size(); i += 997) {
    CHECK(d.path_view(i) == (t.root() / ("img/" + std::to_string(i) + ".jpg")).native());
  }
  CHECK(d.path_view(0) == (t.root() / "img/0.jpg").native());
  CHECK(d.path_view(kLines - 1) == (t.root() / ("img/" + std::to_string(kLines - 1) + ".jpg")).native());
  CHECK_THROWS_AS(d.path(kLines), std::out_of_range);
  CHECK_THROWS_AS(d.path_view(kLines), std::out_of_range);
}

// ---- dataset_from_folder

TEST_CASE("dataset folder: classes sorted in byte order give the labels", "[dataset]") {
  TempDir t;
  t.write("data/b/1.jpg");
  t.write("data/a/1.jpg");
  t.write("data/a/2.jpg");
  t.write("data/C/1.jpg");
  const fs::path root = t.root() / "data";
  const Dataset d = dataset_from_folder(root);
  REQUIRE(d.classes() == std::vector<std::string>{"C", "a", "b"});
  CHECK(d.num_classes() == 3);
  CHECK(d.source() == root);
  CHECK(strings(d) == std::vector<std::string>{(root / "C/1.jpg").string(), (root / "a/1.jpg").string(),
                                               (root / "a/2.jpg").string(), (root / "b/1.jpg").string()});
  CHECK(labels(d) == std::vector<std::int64_t>{0, 1, 1, 2});
  for (std::size_t i = 0; i < d.size(); ++i) CHECK(d.path_view(i) == d.path(i).native());
  CHECK_THROWS_AS(d.path_view(4), std::out_of_range);
}

TEST_CASE("dataset folder: nested files come in torchvision's walk order", "[dataset]") {
  TempDir t;
  // sorted(os.walk(...)) orders by directory path ("k" < "k/a" < "k/a-b" < "k/a/b", since '-' < '/'),
  // then by file name: not the order of the full paths sorted as strings.
  t.write("data/k/top.jpg");
  t.write("data/k/a/x.jpg");
  t.write("data/k/a/b/z.jpg");
  t.write("data/k/a-b/y.jpg");
  t.write("data/k/b.jpg");
  const fs::path root = t.root() / "data";
  const Dataset d = dataset_from_folder(root);
  CHECK(strings(d) == std::vector<std::string>{(root / "k/b.jpg").string(), (root / "k/top.jpg").string(),
                                               (root / "k/a/x.jpg").string(), (root / "k/a-b/y.jpg").string(),
                                               (root / "k/a/b/z.jpg").string()});
  CHECK(labels(d) == std::vector<std::int64_t>{0, 0, 0, 0, 0});
}

TEST_CASE("dataset folder: the extension filter is case-insensitive", "[dataset]") {
  TempDir t;
  for (const char* name : {"a.JPEG", "b.Png", "c.txt", "d", "e.jpg.bak", "f.webp", "g.TIFF", "h.tga", "i.jpgx",
                           "jpg", "k.pbm"}) {
    t.write(std::string("data/cls/") + name);
  }
  const fs::path root = t.root() / "data";
  const Dataset d = dataset_from_folder(root);
  std::vector<std::string> expected;
  for (const char* name : {"a.JPEG", "b.Png", "f.webp", "g.TIFF", "h.tga", "k.pbm"}) {
    expected.push_back((root / "cls" / name).string());
  }
  CHECK(strings(d) == expected);
  CHECK(kImageExtensions.size() == 13);
}

TEST_CASE("dataset folder: hidden files and directories are skipped", "[dataset]") {
  TempDir t;
  t.write("data/cls/.hidden.jpg");
  t.write("data/cls/.git/x.jpg");
  t.write("data/cls/sub/.y.png");
  t.write("data/cls/seen.jpg");
  t.write("data/.ipynb_checkpoints/z.jpg");  // a hidden class dir is not a class
  const fs::path root = t.root() / "data";
  const Dataset d = dataset_from_folder(root);
  CHECK(d.classes() == std::vector<std::string>{"cls"});
  CHECK(strings(d) == std::vector<std::string>{(root / "cls/seen.jpg").string()});
}

TEST_CASE("dataset folder: files directly in root are ignored", "[dataset]") {
  TempDir t;
  t.write("data/stray.jpg");
  t.write("data/README.txt");
  t.write("data/dog/1.png");
  const fs::path root = t.root() / "data";
  const Dataset d = dataset_from_folder(root);
  CHECK(d.classes() == std::vector<std::string>{"dog"});
  CHECK(strings(d) == std::vector<std::string>{(root / "dog/1.png").string()});
}

TEST_CASE("dataset folder: a class without image files throws naming it", "[dataset]") {
  TempDir t;
  t.write("data/a/1.jpg");
  t.write("data/b/readme.txt");
  t.mkdir("data/c/empty_sub");
  const fs::path root = t.root() / "data";
  const std::string msg = dataset_error([&] { dataset_from_folder(root); });
  const std::string head = root.string() + ": found no valid file for the classes 'b', 'c'; image files have one of the extensions";
  CHECK(msg.substr(0, head.size()) == head);
  CHECK(msg.find(".jpeg") != std::string::npos);
  CHECK(msg.find('\n') == std::string::npos);
}

TEST_CASE("dataset folder: a missing root, a file as root and a root without classes throw", "[dataset]") {
  TempDir t;
  const fs::path missing = t.root() / "missing";
  CHECK(dataset_error([&] { dataset_from_folder(missing); }) == missing.string() + ": image folder not found");
  const fs::path file = t.write("file.jpg");
  CHECK(dataset_error([&] { dataset_from_folder(file); }) == file.string() + ": image folder is not a directory");
  t.write("flat/1.jpg");
  t.mkdir("flat/.hidden");
  const fs::path flat = t.root() / "flat";
  const std::string msg = dataset_error([&] { dataset_from_folder(flat); });
  CHECK(msg.substr(0, flat.string().size() + 25) == flat.string() + ": no class directories (e");
}

TEST_CASE("dataset folder: symlinks are followed and a link loop is entered once", "[dataset]") {
  TempDir t;
  t.write("elsewhere/cats/1.jpg");
  t.write("elsewhere/more/2.jpg");
  t.write("data/dogs/1.jpg");
  t.write("target.jpg");
  const fs::path root = t.root() / "data";
  fs::create_directory_symlink(t.root() / "elsewhere/cats", root / "cats");      // a linked class dir
  fs::create_directory_symlink(t.root() / "elsewhere/more", root / "dogs/more");  // a linked subdir
  fs::create_symlink(t.root() / "target.jpg", root / "dogs/link.jpg");            // a linked file
  fs::create_directory_symlink(root / "dogs", root / "dogs/loop");                // back to an ancestor
  fs::create_directory_symlink(root, root / "dogs/up");                           // back to the root
  const Dataset d = dataset_from_folder(root);
  CHECK(d.classes() == std::vector<std::string>{"cats", "dogs"});
  CHECK(strings(d) == std::vector<std::string>{(root / "cats/1.jpg").string(), (root / "dogs/1.jpg").string(),
                                               (root / "dogs/link.jpg").string(), (root / "dogs/more/2.jpg").string()});
  CHECK(labels(d) == std::vector<std::int64_t>{0, 1, 1, 1});
}

// ---- vectors

TEST_CASE("dataset vectors: builds and reports num_classes", "[dataset]") {
  const Dataset d({"/x/a.jpg", "/x/b.jpg", "/x/c.jpg"}, {2, 0, 4});
  CHECK(d.size() == 3);
  CHECK(d.path(1) == fs::path("/x/b.jpg"));
  CHECK(d.label(2) == 4);
  CHECK(d.num_classes() == 5);
  CHECK(d.source().empty());
  CHECK(d.classes().empty());
  CHECK_THROWS_AS(d.path(3), std::out_of_range);
  CHECK_THROWS_AS(d.path_view(3), std::out_of_range);
  CHECK_THROWS_AS(d.path(static_cast<std::size_t>(-1)), std::out_of_range);
  CHECK_THROWS_AS(d.label(3), std::out_of_range);

  const Dataset empty({}, {});
  CHECK(empty.size() == 0);
  CHECK(empty.num_classes() == 0);
  CHECK_THROWS_AS(empty.path(0), std::out_of_range);
  CHECK_THROWS_AS(empty.path_view(0), std::out_of_range);

  const Dataset named({"/a", "/b"}, {1, 1}, {"cat", "dog"});
  CHECK(named.classes() == std::vector<std::string>{"cat", "dog"});
  CHECK(named.num_classes() == 2);
}

TEST_CASE("dataset vectors: paths come back byte for byte, by value and as views", "[dataset]") {
  static_assert(std::is_same_v<decltype(std::declval<const Dataset&>().path(0)), fs::path>);
  static_assert(std::is_same_v<decltype(std::declval<const Dataset&>().path_view(0)), std::string_view>);
  const std::vector<fs::path> paths = {"/x/a.jpg", "", "rel//b c.png", std::string("nul\0inside", 10), "/",
                                       std::string(300, 'z'), "y"};
  const Dataset d(paths, std::vector<std::int64_t>(paths.size(), 0));
  REQUIRE(d.size() == paths.size());
  for (std::size_t i = 0; i < paths.size(); ++i) {
    INFO("sample " << i);
    CHECK(d.path(i).native() == paths[i].native());
    CHECK(d.path_view(i) == paths[i].native());
  }
  CHECK(d.path_view(1).empty());
  CHECK(d.path(1).empty());

  // A returned path is a copy: changing it leaves the dataset alone.
  fs::path p = d.path(0);
  p /= "more";
  CHECK(d.path_view(0) == "/x/a.jpg");

  // Copies and moves keep every sample.
  const Dataset copy = d;
  Dataset source = d;
  const Dataset moved = std::move(source);
  for (std::size_t i = 0; i < paths.size(); ++i) {
    CHECK(copy.path_view(i) == paths[i].native());
    CHECK(moved.path_view(i) == paths[i].native());
  }

  // A single short path (kept inside std::string's small buffer) survives a move too.
  Dataset small({"a"}, {0});
  const Dataset small_moved = std::move(small);
  CHECK(small_moved.path_view(0) == "a");
  CHECK(small_moved.path(0) == fs::path("a"));
}

TEST_CASE("dataset vectors: bad input throws std::invalid_argument", "[dataset]") {
  CHECK_THROWS_AS(Dataset({"/a", "/b"}, {0}), std::invalid_argument);
  CHECK_THROWS_AS(Dataset({"/a"}, {0, 1}), std::invalid_argument);
  CHECK_THROWS_AS(Dataset({"/a", "/b"}, {0, -1}), std::invalid_argument);
  CHECK_THROWS_AS(Dataset({"/a"}, {INT64_MAX}), std::invalid_argument);
  CHECK_THROWS_AS(Dataset({"/a", "/b"}, {0, 2}, {"x", "y"}), std::invalid_argument);
  CHECK_NOTHROW(Dataset({"/a", "/b"}, {0, 1}, {"x", "y"}));
}

TEST_CASE("dataset list: a list that is not a regular file, and a NUL byte, are refused by name", "[dataset]") {
  TempDir t;
  // A FIFO would block the open until a writer came; a device never ends.
  const fs::path fifo = t.root() / "fifo.txt";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  CHECK(dataset_error([&] { dataset_from_list(fifo); }) == fifo.string() + ": list file is not a regular file");
  CHECK(dataset_error([&] { dataset_from_list("/dev/null"); }) == "/dev/null: list file is not a regular file");
  const fs::path nul = t.write("nul.txt", std::string("/d/a.jpg 0\n/d/b\0c.jpg 1\n", 24));
  CHECK(dataset_error([&] { dataset_from_list(nul); }) == nul.string() + ":2: the line holds a NUL byte");
}
