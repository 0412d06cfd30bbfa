// scan_tar (data/shards/tar_index.h) on archives written by GNU tar (gnu and ustar
// formats) and Python's tarfile (pax), and on corrupt, truncated and hostile ones.
// dataset_from_shards over tar shards: test_tar_dataset.cpp and test_tar_index.cpp.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "data/shards/tar_index.h"
#include "tar_support.h"
#include "temp_dir.h"

using namespace conveyor;
using namespace conveyor::test;

namespace {

bool have(const char* tool) { return std::system((std::string(tool) + " --version >/dev/null 2>&1").c_str()) == 0; }

// The files every archive holds: names past 100 bytes, an empty file, sizes on
// and off the 512-byte blocks, bytes that are not text.
std::map<std::string, std::string> sample_files() {
  std::map<std::string, std::string> files;
  files["a/0001.jpg"] = std::string(1000, 'j');
  files["a/0001.cls"] = "7";
  files["a/empty.txt"] = "";
  files["b/block.bin"] = std::string(512, '\xff');
  const std::string deep = "deep/" + std::string(60, 'd') + "/" + std::string(70, 'e');
  files[deep + "/long name with spaces.jpg"] = std::string(3, '\0') + "xyz";
  return files;
}

std::filesystem::path write_tree(const TempDir& dir, const std::map<std::string, std::string>& files) {
  const auto root = dir / "tree";
  for (const auto& [name, bytes] : files) {
    std::filesystem::create_directories((root / name).parent_path());
    spit(root / name, bytes);
  }
  return root;
}

// Every regular member, read back at its offset, equals the file it came from.
void check_members(const std::filesystem::path& archive, const std::map<std::string, std::string>& files) {
  const auto members = scan_tar(archive);
  const std::string bytes = slurp(archive);
  std::map<std::string, std::string> got;
  for (const auto& m : members) {
    REQUIRE(m.offset % 512 == 0);
    REQUIRE(m.offset + m.size <= bytes.size());
    got[m.name] = bytes.substr(m.offset, m.size);
  }
  REQUIRE(got == files);
}

}  // namespace

TEST_CASE("tar: GNU tar's gnu and ustar formats read back byte for byte", "[tar]") {
  if (!have("tar")) {
    WARN("no tar here: not checked");
    return;
  }
  TempDir dir;
  const auto files = sample_files();
  const auto root = write_tree(dir, files);
  for (const std::string format : {"gnu", "ustar", "pax"}) {
    CAPTURE(format);
    const auto archive = dir / ("t-" + format + ".tar");
    const std::string cmd = "cd '" + root.string() + "' && tar --format=" + format + " -cf '" + archive.string() +
                            "' a b deep 2>/dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
    check_members(archive, files);
  }
}

TEST_CASE("tar: GNU tar's old sparse format with extension headers is listed, and the members after it read", "[tar]") {
  if (!have("tar")) {
    WARN("no tar here: not checked");
    return;
  }
  TempDir dir;
  const auto root = dir / "tree";
  std::filesystem::create_directories(root);
  {  // eight data regions: more than the 4 an 'S' header holds, so extension headers follow it
    std::ofstream f(root / "s.jpg", std::ios::binary);
    for (int i = 0; i < 8; ++i) {
      f.seekp(std::streamoff(i) << 20);
      f << std::string(100, 'x');
    }
  }
  spit(root / "after.jpg", "after");
  const auto archive = dir / "sparse.tar";
  const std::string cmd = "cd '" + root.string() + "' && tar --sparse --format=gnu -cf '" + archive.string() +
                          "' s.jpg after.jpg 2>/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  const std::string bytes = slurp(archive);
  if (bytes[156] != 'S' || bytes[482] == 0) {
    WARN("this file system kept no holes for tar to find: not checked");
    return;
  }
  const auto members = scan_tar(archive);
  REQUIRE(members.size() == 2);
  REQUIRE_THAT(members[0].unreadable, Catch::StartsWith("a GNU sparse file"));
  REQUIRE(members[1].name == "after.jpg");
  REQUIRE(members[1].unreadable.empty());
  REQUIRE(bytes.substr(members[1].offset, members[1].size) == "after");
}

TEST_CASE("tar: Python's tarfile (pax, long and non-ASCII names) reads back byte for byte", "[tar]") {
  if (!have("python3")) {
    WARN("no python3 here: not checked");
    return;
  }
  TempDir dir;
  auto files = sample_files();
  files["\xc3\xa9t\xc3\xa9/caf\xc3\xa9.jpg"] = "accents";  // UTF-8: stored as a pax path record
  const auto root = write_tree(dir, files);
  const auto archive = dir / "py.tar";
  spit(dir / "make.py",
       "import sys, tarfile\n"
       "with tarfile.open(sys.argv[2], 'w', format=tarfile.PAX_FORMAT) as t:\n"
       "    for name in sys.argv[3:]:\n"
       "        t.add(sys.argv[1] + '/' + name, arcname=name)\n");
  std::string cmd = "python3 '" + (dir / "make.py").string() + "' '" + root.string() + "' '" + archive.string() + "'";
  for (const auto& [name, bytes] : files) cmd += " '" + name + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  check_members(archive, files);
}

namespace {

// Archives built with member() (tar_support.h), whose fields the tests break on purpose;
// the reader is checked against GNU tar and tarfile above.

std::string archive(const std::string& name, const std::string& data) { return member(name, data) + kEnd; }

std::vector<TarMember> scan(const std::string& bytes) {
  const ReadAt read = [&](std::uint64_t offset, std::span<std::byte> out) {
    if (offset >= bytes.size()) return std::size_t{0};
    const std::size_t n = std::min<std::size_t>(out.size(), bytes.size() - offset);
    std::memcpy(out.data(), bytes.data() + offset, n);
    return n;
  };
  return scan_tar(read, bytes.size(), "t.tar");
}

}  // namespace

TEST_CASE("tar: corrupt, truncated and hostile archives are refused by name", "[tar]") {
  const std::string good = archive("k/0001.jpg", "hello");
  REQUIRE(scan(good) == std::vector<TarMember>{{"k/0001.jpg", 512, 5}});
  REQUIRE(scan(std::string(1024, '\0')).empty());  // an empty archive
  REQUIRE_THROWS_WITH(scan(""), Catch::Contains("t.tar: an empty file (0 bytes), not a tar archive"));
  // Cut at a member boundary: tar reads on with a warning; here it would be a
  // smaller dataset without a word (a shard still being written or copied).
  REQUIRE_THROWS_WITH(scan(member("k/0001.jpg", "hello")),
                      Catch::Contains("t.tar: no end-of-archive marker after byte 1024: cut short, or still being written"));
  REQUIRE(scan(member("k/0001.jpg", "hello") + std::string(512, '\0')).size() == 1);  // one zero block ends it too
  // `cat a.tar b.tar`: b's members behind a's marker, directly or after a's padding to a 10 KiB record
  REQUIRE_THROWS_WITH(scan(archive("k/1.jpg", "x") + archive("k/2.jpg", "y")),
                      Catch::Contains("t.tar: a tar header at byte 2048, after the end-of-archive marker at byte 1024: "
                                      "archives joined with cat?"));
  std::string padded = archive("k/1.jpg", "x");
  padded.resize(10240, '\0');
  REQUIRE_THROWS_WITH(scan(padded + archive("k/2.jpg", "y")), Catch::Contains("a tar header at byte 10240"));
  // Beyond a record too (tar -b sets other record sizes): only zeros may follow a marker.
  REQUIRE_THROWS_WITH(scan(padded + std::string(10240, '\0') + archive("k/2.jpg", "y")),
                      Catch::Contains("a tar header at byte 20480"));
  REQUIRE(scan(padded + std::string(200 * 512, '\0')).size() == 1);  // long zero padding is still one archive
  // GNU tar's layout when the first zero block is a record's last: the next
  // archive's header lies 21 blocks after the marker (a 20-block window missed it).
  std::string edge = member("k/1.jpg", std::string(17 * 512 + 1, 'x'));  // 19 blocks: the marker is block 20
  REQUIRE(edge.size() == 19 * 512);
  edge.resize(2 * 10240, '\0');
  REQUIRE_THROWS_WITH(scan(edge + archive("k/2.jpg", "y")),
                      Catch::Contains("a tar header at byte 20480, after the end-of-archive marker at byte 9728"));

  std::string bad = good;
  bad[0] = 'K';  // the checksum no longer matches
  REQUIRE_THROWS_WITH(scan(bad), Catch::Contains("t.tar: header checksum error at byte 0"));

  REQUIRE_THROWS_WITH(scan(good.substr(0, 512 + 3)), Catch::Contains("member k/0001.jpg claims 5 bytes") &&
                                                         Catch::Contains("past the end of the file"));
  REQUIRE_THROWS_WITH(scan(good.substr(0, 300)), Catch::Contains("ends inside a header at byte 0"));

  const std::string huge = tar_header("k/big.jpg", 077777777777ULL) + std::string(1024, '\0');
  REQUIRE_THROWS_WITH(scan(huge), Catch::Contains("member k/big.jpg claims 8589934591 bytes"));

  REQUIRE_THROWS_WITH(scan(archive("../escape.jpg", "x")), Catch::Contains("member ../escape.jpg: a path that is absolute or climbs out"));
  REQUIRE_THROWS_WITH(scan(archive("a/../../x.jpg", "x")), Catch::Contains("climbs out"));
  REQUIRE_THROWS_WITH(scan(archive("/etc/passwd", "x")), Catch::Contains("absolute"));

  REQUIRE_THROWS_WITH(scan(member("PaxHeader/x", "9 path\n", 'x') + archive("k/1.jpg", "x")),
                      Catch::Contains("pax header at byte 512: a record does not parse"));
  REQUIRE_THROWS_WITH(scan(member("PaxHeader/x", "10 size=z\n", 'x') + archive("k/1.jpg", "x")),
                      Catch::Contains("bad size z"));

  // Directories and FIFOs are not samples: skipped.
  const std::string mixed = tar_header("k/", 0, '5') + tar_header("k/f", 0, '6') + archive("k/1.cls", "3");
  REQUIRE(scan(mixed) == std::vector<TarMember>{{"k/1.cls", 3 * 512, 1}});
  // Links and sparse members have no bytes of their own (or not all) at their
  // offset: listed as unreadable, for the shard index to refuse or skip.
  const auto unreadable = [](const std::string& bytes) { return scan(bytes).at(0).unreadable; };
  REQUIRE_THAT(unreadable(tar_header("k/2.jpg", 0, '1') + kEnd), Catch::StartsWith("a hard link"));
  REQUIRE_THAT(unreadable(tar_header("k/2.jpg", 0, '2') + kEnd), Catch::StartsWith("a symbolic link"));
  REQUIRE_THAT(unreadable(member("k/2.jpg", "x", 'S') + kEnd), Catch::StartsWith("a GNU sparse file"));
  const auto pax_sparse = scan(member("PaxHeader/x", "22 GNU.sparse.major=1\n10 size=1\n", 'x') + member("k/2.jpg", "x") +
                               archive("k/3.jpg", "y"));
  REQUIRE(pax_sparse.size() == 2);
  REQUIRE_THAT(pax_sparse[0].unreadable, Catch::StartsWith("a GNU sparse file"));
  REQUIRE(pax_sparse[1].unreadable.empty());  // the pax record described the one member after it
  REQUIRE(scan(archive("k/4.jpg", "z")).at(0).unreadable.empty());
}

TEST_CASE("tar: an archive cut at any byte before its end marker is refused, never read as fewer members", "[tar]") {
  const std::string full = member("k/0001.jpg", std::string(700, 'a')) + archive("k/0001.cls", "12");
  const auto all = scan(full);
  REQUIRE(all.size() == 2);
  const std::size_t marker = full.size() - kEnd.size();  // the first zero block
  for (std::size_t cut = 0; cut < full.size(); ++cut) {
    CAPTURE(cut);
    if (cut < marker + 512) {
      REQUIRE_THROWS_WITH(scan(full.substr(0, cut)), Catch::StartsWith("t.tar: "));
    } else {
      REQUIRE(scan(full.substr(0, cut)) == all);
    }
  }
}
