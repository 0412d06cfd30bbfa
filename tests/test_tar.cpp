// scan_tar (data/shards/tar_index.h) on archives written by GNU tar (gnu and ustar
// formats) and Python's tarfile (pax), and on corrupt, truncated and hostile ones;
// dataset_from_shards over tar shards against the same files read one by one.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "catch_compat.h"
#include "pipeline/fnv1a.h"
#include "pipeline/pipeline.h"
#include "shards.h"
#include "data/dataset.h"
#include "data/file_system.h"
#include "data/reader.h"
#include "image/image_source.h"
#include "data/shards/shard_index.h"
#include "data/shards/tar_index.h"
#include "data/files/image_folder.h"
#include "data/files/list_file.h"
#include "data/shards/shard_dataset.h"
#include "temp_dir.h"

using namespace conveyor;
using conveyor::test::TempDir;

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

void spit(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f << bytes;
}

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

// Archives built with the writer pack uses (tar_header), whose fields the tests
// then break on purpose; the reader is checked against GNU tar and tarfile above.

// A header and its data, padded to whole blocks.
std::string member(const std::string& name, const std::string& data, char type = '0') {
  std::string a = tar_header(name, data.size(), type) + data;
  a.resize((a.size() + 511) / 512 * 512, '\0');
  return a;
}

const std::string kEnd(1024, '\0');  // the end-of-archive marker

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

namespace {

// Counts the files opened through it.
struct CountingFiles final : FileSystem {
  std::atomic<int> opens{0};
  std::unique_ptr<File> open(const std::filesystem::path& path) override {
    ++opens;
    return posix_file_system()->open(path);
  }
};

// Batch digests of one pass over `d` through ImageSource (RandomResizedCrop 16 + flip).
std::vector<std::uint64_t> digests(const Dataset& d, std::size_t workers, std::size_t max_open_shards = 256,
                                   std::shared_ptr<FileSystem> files = nullptr, bool read_ahead = true) {
  ImageConfig ic;
  ic.max_open_shards = max_open_shards;
  ic.files = std::move(files);
  ic.read_ahead = read_ahead;
  ic.transforms = {RandomResizedCrop{{16, 16}}, RandomHorizontalFlip{}};
  ImageSource src(d, ic, workers);
  Config c;
  c.batch_size = 5;
  c.workers = workers;
  c.sample_bytes = src.sample_bytes();
  c.epochs = 2;
  c.seed = 4;
  Pipeline p(c, d.size(), {src.filler()});
  std::vector<std::uint64_t> out;
  while (auto b = p.next()) out.push_back(batch_digest(**b));
  return out;
}

}  // namespace

TEST_CASE("shards: the same samples and batches from shards as from the files, for 1 and 4 workers", "[tar][shards]") {
  if (!conveyor::test::have_tar()) {
    WARN("no tar here: not checked");
    return;
  }
  TempDir dir;
  const auto made = conveyor::test::write_shards(dir.path(), 23, 10);  // 3 shards, the last one short
  const Dataset files = dataset_from_list(made.list);
  const Dataset shards = dataset_from_shards(made.shards);
  REQUIRE(shards.size() == 23);
  const SampleReader file_reader(files, posix_file_system(), 1 << 20), shard_reader(shards, posix_file_system(), 1 << 20);
  std::vector<unsigned char> a, b;
  for (std::size_t i = 0; i < files.size(); ++i) {
    CAPTURE(i);
    REQUIRE(shards.label(i) == files.label(i));
    file_reader.read(i, a);
    shard_reader.read(i, b);
    REQUIRE(a == b);  // the member's bytes are the file's, not re-encoded
  }
  REQUIRE(shards.name(12) == (made.shards / "shard-001.tar").string() + ":000012.jpg");
  REQUIRE(shards.path(12) == made.shards / "shard-001.tar");
  const auto reference = digests(files, 1);
  REQUIRE(digests(shards, 1) == reference);
  REQUIRE(digests(shards, 4) == reference);
  auto counted = std::make_shared<CountingFiles>();
  REQUIRE(digests(shards, 1, 256, counted) == reference);
  REQUIRE(counted->opens == 3);  // each shard opened once for two epochs of 23 samples
  counted = std::make_shared<CountingFiles>();
  REQUIRE(digests(shards, 4, 256, counted) == reference);
  REQUIRE(counted->opens <= 3 * 4);  // workers missing at the same moment may each open a shard once; not 46
  counted = std::make_shared<CountingFiles>();
  REQUIRE(digests(shards, 3, 1, counted) == reference);  // one descriptor: still right, reopened as needed
  REQUIRE(counted->opens > 3);
  const std::vector<std::size_t> some{22, 0, 12};
  const Dataset part = shards.subset(some);
  REQUIRE(part.name(0) == shards.name(22));
  SampleReader(part, posix_file_system(), 1 << 20).read(2, b);
  SampleReader(files, posix_file_system(), 1 << 20).read(12, a);
  REQUIRE(a == b);
}

namespace {

// Logs every read-ahead advice given through its files: (file name, offset, size).
struct AdviceFiles final : FileSystem {
  using Advice = std::tuple<std::string, std::uint64_t, std::uint64_t>;
  std::mutex mu;
  std::vector<Advice> advised;
  std::atomic<int> opens{0};

  std::unique_ptr<File> open(const std::filesystem::path& path) override {
    ++opens;
    return std::make_unique<Logged>(posix_file_system()->open(path), path.filename().string(), *this);
  }
  std::vector<Advice> take() {
    std::lock_guard lk(mu);
    return std::exchange(advised, {});
  }

 private:
  struct Logged final : File {
    Logged(std::unique_ptr<File> inner, std::string name, AdviceFiles& owner)
        : inner_(std::move(inner)), name_(std::move(name)), owner_(owner) {}
    std::uint64_t size() const override { return inner_->size(); }
    std::size_t read_at(std::uint64_t offset, void* buf, std::size_t n) override { return inner_->read_at(offset, buf, n); }
    void will_need(std::uint64_t offset, std::uint64_t size) noexcept override {
      std::lock_guard lk(owner_.mu);
      owner_.advised.emplace_back(name_, offset, size);
    }
    std::unique_ptr<File> inner_;
    std::string name_;
    AdviceFiles& owner_;
  };
};

}  // namespace

TEST_CASE("shards: read-ahead advises each member's byte range through the shared descriptors; files get none",
          "[tar][shards][read-ahead]") {
  if (!conveyor::test::have_tar()) {
    WARN("no tar here: not checked");
    return;
  }
  TempDir dir;
  const auto made = conveyor::test::write_shards(dir.path(), 23, 10);  // 3 shards, the last one short
  const Dataset shards = dataset_from_shards(made.shards);
  const auto advice_for = [&](std::size_t i) {
    return AdviceFiles::Advice{shards.path(i).filename().string(), shards.range(i)->offset, shards.range(i)->size};
  };
  ImageConfig ic;
  ic.transforms = {RandomResizedCrop{{16, 16}}, RandomHorizontalFlip{}};
  auto files = std::make_shared<AdviceFiles>();
  ic.files = files;
  {
    ImageSource src(shards, ic, 1);
    const std::vector<std::uint64_t> some{22, 0, 12, 99};  // 99: past the end, ignored
    src.prefetch(some);
    REQUIRE(files->take() == std::vector<AdviceFiles::Advice>{advice_for(22), advice_for(0), advice_for(12)});
    REQUIRE(files->opens == 3);
    src.prefetch(some);
    REQUIRE(files->opens == 3);  // the workers' open shards, not new descriptors
    REQUIRE(files->take().size() == 3);
  }
  {
    ImageSource src(dataset_from_list(made.list), ic, 1);
    const std::vector<std::uint64_t> some{0, 1};
    src.prefetch(some);
    REQUIRE(files->take().empty());  // a file per sample: advice would cost an open
  }

  // Through a pipeline (digests(): two epochs): each delivered sample advised once an epoch, the output unchanged.
  files->take();
  const auto plain = digests(shards, 2, 256, files, false);
  REQUIRE(files->take().empty());
  const auto workers = GENERATE(1, 4);
  CAPTURE(workers);
  REQUIRE(digests(shards, std::size_t(workers), 256, files, true) == plain);
  auto advised = files->take();
  std::vector<AdviceFiles::Advice> want;
  for (int e = 0; e < 2; ++e) {
    for (std::size_t i = 0; i < shards.size(); ++i) want.push_back(advice_for(i));
  }
  std::sort(advised.begin(), advised.end());
  std::sort(want.begin(), want.end());
  REQUIRE(advised == want);
}

TEST_CASE("shards: a folder without shards, a sample without image or label, a bad label: refused by name", "[tar][shards]") {
  TempDir dir;
  std::filesystem::create_directories(dir / "empty");
  REQUIRE_THROWS_WITH(dataset_from_shards(dir / "empty"), Catch::Contains("no .tar shards"));
  REQUIRE_THROWS_WITH(dataset_from_shards(dir / "missing"), Catch::Contains("not a directory"));
  const auto shard = [&](const std::string& bytes) {
    std::filesystem::remove_all(dir / "s");
    std::filesystem::create_directories(dir / "s");
    spit(dir / "s" / "a.tar", bytes);
    return dir / "s";
  };
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(member("k/1.jpg", "x") + kEnd)), Catch::Contains("a.tar:k/1: no label (k/1.cls)"));
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(member("k/1.cls", "1") + kEnd)), Catch::Contains("a.tar:k/1: no image member"));
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(member("k/1.jpg", "x") + member("k/1.png", "y") + member("k/1.cls", "1") + kEnd)),
                      Catch::Contains("k/1: two images (k/1.jpg, k/1.png)"));
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(member("k/1.jpg", "x") + member("k/1.cls", "cat") + kEnd)),
                      Catch::Contains("a.tar:k/1.cls: label 'cat' is not a non-negative decimal integer"));
  for (const std::string big : {"9223372036854775807", "99999999999999999999"}) {  // a number, too large: said so
    REQUIRE_THROWS_WITH(dataset_from_shards(shard(member("k/1.jpg", "x") + member("k/1.cls", big) + kEnd)),
                        Catch::Contains("a.tar:k/1.cls: label '" + big + "' is out of range (max 9223372036854775806)"));
  }
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(member("k/1.jpg", "x") + member("k/1.cls", std::string("3\0x", 3)) + kEnd)),
                      Catch::EndsWith("a.tar:k/1.cls: label '3\\x00x' is not a non-negative decimal integer"));
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(member("k/1.jpg", "x") + member("k/1.cls", "1" + std::string(64, ' ')) + kEnd)),
                      Catch::Contains("a.tar:k/1.cls: a label of 65 bytes (expected a decimal integer)"));
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(member("k/1.jpg", "x") + member("k/1.cls", "-1") + kEnd)),
                      Catch::Contains("label '-1' is not a non-negative decimal integer"));
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(member("k/1.jpg", "x") + member("k/1.cls", "-0") + kEnd)),
                      Catch::Contains("label '-0' is not a non-negative decimal integer"));  // as a list's "-0"
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(member("k/1.jpg", "x").substr(0, 600))), Catch::Contains("a.tar: member k/1.jpg claims"));
  const Dataset ok = dataset_from_shards(shard(member("k/1.JPG", "x") + member("k/1.cls", " 4\n") + member("k/1.json", "{}") + kEnd));
  REQUIRE(ok.size() == 1);
  REQUIRE(ok.label(0) == 4);
  REQUIRE(ok.range(0)->offset == 512);
  REQUIRE(ok.range(0)->size == 1);
  // `tar rf a.tar k/1.cls` appends a second label: which one is meant is not guessed.
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(member("k/1.jpg", "x") + member("k/1.cls", "1") + member("k/1.cls", "2") + kEnd)),
                      Catch::Contains("a.tar:k/1: two labels (k/1.cls, k/1.cls)"));
  REQUIRE_THROWS_WITH(dataset_from_shards(shard("")), Catch::Contains("a.tar: an empty file (0 bytes)"));
  // A link as the image or the label is refused by name; as an extra member it is skipped, as before.
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(tar_header("k/1.jpg", 0, '1') + member("k/1.cls", "1") + kEnd)),
                      Catch::Contains("a.tar:k/1.jpg: a hard link"));
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(member("k/1.jpg", "x") + tar_header("k/1.cls", 0, '2') + kEnd)),
                      Catch::Contains("a.tar:k/1.cls: a symbolic link"));
  REQUIRE(dataset_from_shards(shard(member("k/1.jpg", "x") + member("k/1.cls", "1") + tar_header("k/1.json", 0, '2') + kEnd)).size() == 1);
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(member("k/1.jpg", "x") + member("k/1.cls", "1"))),
                      Catch::Contains("a.tar: no end-of-archive marker"));
  // An upper-case .TAR is a shard, as .JPG is an image: not left out.
  std::filesystem::remove_all(dir / "s");
  std::filesystem::create_directories(dir / "s");
  spit(dir / "s" / "a.tar", member("k/1.jpg", "x") + member("k/1.cls", "1") + kEnd);
  spit(dir / "s" / "b.TAR", member("k/2.jpg", "y") + member("k/2.cls", "2") + kEnd);
  REQUIRE(dataset_from_shards(dir / "s").size() == 2);
}

TEST_CASE("shards: a folder missing a shard its manifest lists, holding other counts or a shard it does not list, is refused by name", "[tar][shards]") {
  TempDir dir;
  const auto folder = dir / "s";
  std::filesystem::create_directories(folder);
  spit(folder / "a.tar", member("k/1.jpg", "x") + member("k/1.cls", "1") + member("k/2.jpg", "y") + member("k/2.cls", "2") + kEnd);
  spit(folder / "b.tar", member("k/3.jpg", "z") + member("k/3.cls", "3") + kEnd);
  REQUIRE(write_manifest(folder, load_shard_index(folder)));
  // Each shard's count, size and FNV-1a of its bytes (what a download is checked against).
  const auto line = [&](int count, const std::string& name) {
    const std::string bytes = slurp(folder / name);
    Fnv1a h;
    h.add(bytes.data(), bytes.size());
    char sum[17];
    std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(h.value));
    return std::to_string(count) + " " + std::to_string(bytes.size()) + " " + sum + " " + name + "\n";
  };
  REQUIRE(slurp(folder / std::string(kManifestName)) == "conveyor-shard-manifest 2\n" + line(2, "a.tar") + line(1, "b.tar"));
  const auto entries = parse_manifest(slurp(folder / std::string(kManifestName)), "m");
  REQUIRE(entries.size() == 2);
  REQUIRE(entries[1].file == "b.tar");
  REQUIRE(entries[1].count == 1);
  REQUIRE(entries[1].size == std::filesystem::file_size(folder / "b.tar"));
  REQUIRE(entries[1].checksum == file_checksum(folder / "b.tar"));
  REQUIRE_THROWS_WITH(parse_manifest("conveyor-shard-manifest 2\n2 a.tar\n", "m"), "m:2: expected 'COUNT SIZE CHECKSUM SHARD'");
  REQUIRE_THROWS_WITH(parse_manifest("conveyor-shard-manifest 2\n2 10 zz a.tar\n", "m"), "m:2: expected 'COUNT SIZE CHECKSUM SHARD'");
  REQUIRE_FALSE(parse_manifest("conveyor-shard-manifest 1\n2 a.tar\n", "m")[0].size.has_value());
  REQUIRE(dataset_from_shards(folder).size() == 3);
  // A shard added by hand (a validation shard copied in) is refused by name,
  // unless asked for; the listed ones must all be there, whole.
  spit(folder / "c.tar", member("k/4.jpg", "w") + member("k/4.cls", "4") + kEnd);
  REQUIRE_THROWS_WITH(dataset_from_shards(folder),
                      Catch::StartsWith((folder / "c.tar").string() + ": not listed in " +
                                        (folder / std::string(kManifestName)).string() +
                                        " (written by conveyor pack: 2 shard(s) of 3 samples)") &&
                          Catch::Contains("--extra-shards"));
  REQUIRE(dataset_from_shards(folder, UnlistedShards::read).size() == 4);
  std::filesystem::remove(folder / "c.tar");
  std::filesystem::remove(folder / "b.tar");  // lost in a copy: once read as 2 samples, without a word
  REQUIRE_THROWS_WITH(dataset_from_shards(folder),
                      Catch::StartsWith((folder / "b.tar").string() + ": missing (") &&
                          Catch::Contains("lists 2 shard(s) of 3 samples: an incomplete copy?)"));
  spit(folder / "b.tar", member("k/3.jpg", "z") + member("k/3.cls", "3") + member("k/5.jpg", "v") + member("k/5.cls", "5") + kEnd);
  REQUIRE_THROWS_WITH(dataset_from_shards(folder), Catch::Contains("b.tar: holds 2 samples, not 1"));
  // Not a manifest: refused by file and line, not ignored.
  spit(folder / std::string(kManifestName), "conveyor-shard-manifest 1\n2 a.tar\nx b.tar\n");
  REQUIRE_THROWS_WITH(dataset_from_shards(folder), Catch::Contains(std::string(kManifestName) + ":3: expected 'COUNT SHARD'; remove "));
  // Edited on Windows, or with a blank line at the end: still read.
  spit(folder / std::string(kManifestName), "conveyor-shard-manifest 1\r\n2 a.tar\r\n2 b.tar \r\n\r\n");
  REQUIRE(dataset_from_shards(folder).size() == 4);
  spit(folder / std::string(kManifestName), "something else\n");
  REQUIRE_THROWS_WITH(dataset_from_shards(folder), Catch::Contains(":1: not a shard manifest"));
  std::filesystem::remove(folder / std::string(kManifestName));
  spit(folder / "c.tar", member("k/4.jpg", "w") + member("k/4.cls", "4") + kEnd);
  REQUIRE(dataset_from_shards(folder).size() == 5);  // no manifest: read as found (shards made by other tools)
}

TEST_CASE("shards: a shard cut short after it was indexed names the member", "[tar][shards]") {
  TempDir dir;
  std::filesystem::create_directories(dir / "s");
  spit(dir / "s" / "a.tar", member("k/1.jpg", std::string(2000, 'x')) + member("k/1.cls", "1") + kEnd);
  const Dataset d = dataset_from_shards(dir / "s");
  std::filesystem::resize_file(dir / "s" / "a.tar", 1000);
  std::vector<unsigned char> out;
  REQUIRE_THROWS_WITH(SampleReader(d, posix_file_system(), 1 << 20).read(0, out), Catch::Contains("cut short: the file is 1000 bytes, the range ends at 2512"));
  ImageSource src(d, ImageConfig{}, 1);
  Rng rng(1, 0, 0);
  std::vector<unsigned char> pixels(src.sample_bytes());
  REQUIRE_THROWS_WITH(src.render_sample(0, rng, pixels), Catch::StartsWith((dir / "s" / "a.tar").string() + ":k/1.jpg: cut short"));
}

TEST_CASE("shards: pack's .conveyor-source and .conveyor-class give sources and class names; a folder and its shards name samples alike",
          "[tar][shards]") {
  TempDir dir;
  const auto shard = [&](const std::string& bytes, const std::string& extra = "") {
    std::filesystem::remove_all(dir / "s");
    std::filesystem::create_directories(dir / "s");
    spit(dir / "s" / "a.tar", bytes);
    if (!extra.empty()) spit(dir / "s" / "b.tar", extra);
    return dir / "s";
  };
  const auto sample = [](const std::string& key, const std::string& cls, const std::string& path, const std::string& name) {
    return member(key + ".jpg", "x") + member(key + ".cls", cls) + (path.empty() ? "" : member(key + ".conveyor-source", path)) +
           (name.empty() ? "" : member(key + ".conveyor-class", name));
  };
  // Labels 0 and 2 named, 1 carried by no sample: "".
  const Dataset d = dataset_from_shards(
      shard(sample("0", "0", "cat/1.jpg", "cat") + sample("1", "2", "dog/7.jpg", "dog") + sample("2", "0", "cat/2.jpg", "cat") + kEnd));
  REQUIRE(d.classes() == std::vector<std::string>{"cat", "", "dog"});
  REQUIRE(d.name(1) == (dir / "s" / "a.tar").string() + ":1.jpg (dog/7.jpg)");
  REQUIRE(d.member(1) == "1.jpg");
  REQUIRE(d.relative_name(1, d.common_folder()) == "dog/7.jpg");
  // The index keeps them: a second open reads the cache and gives the same.
  IndexSource how{};
  const ShardIndex index = load_shard_index(dir / "s", &how);
  REQUIRE(how == IndexSource::cached);
  REQUIRE(index.samples[1].source == "dog/7.jpg");
  REQUIRE(index.classes == d.classes());
  REQUIRE(ShardIndex::parse(index.serialize(), "idx") == index);
  // A subset keeps each sample's source.
  const std::size_t pick[] = {2, 1};
  REQUIRE(d.subset(pick).name(0) == (dir / "s" / "a.tar").string() + ":2.jpg (cat/2.jpg)");

  // The same names as the folder they were packed from, wherever that lies.
  std::filesystem::create_directories(dir / "data" / "cat");
  std::filesystem::create_directories(dir / "data" / "dog");
  for (const char* f : {"cat/1.jpg", "cat/2.jpg", "dog/7.jpg"}) spit(dir / "data" / f, "x");
  const Dataset folder = dataset_from_folder(dir / "data");
  REQUIRE(folder.common_folder() == (dir / "data").string().size() + 1);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < folder.size(); ++i) names.push_back(folder.relative_name(i, folder.common_folder()));
  REQUIRE(names == std::vector<std::string>{"cat/1.jpg", "cat/2.jpg", "dog/7.jpg"});
  // Shards without sources: their shard:member, less the folder they share.
  // Another writer's .path and .class (webdataset's integer label) are not read.
  const Dataset plain = dataset_from_shards(
      shard(member("k.jpg", "x") + member("k.cls", "1") + member("k.path", "a/b.jpg") + member("k.class", "1") + kEnd));
  REQUIRE(plain.classes().empty());
  REQUIRE(plain.name(0) == (dir / "s" / "a.tar").string() + ":k.jpg");
  REQUIRE(plain.relative_name(0, plain.common_folder()) == "a.tar:k.jpg");

  // Refused by name: two of a kind, empty, too long, one label with two names,
  // some samples named and others not.
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(sample("k", "1", "a.jpg", "") + member("k.conveyor-source", "b.jpg") + kEnd)),
                      Catch::Contains("a.tar:k: two source paths (k.conveyor-source, k.conveyor-source)"));
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(sample("k", "1", "", "cat") + member("k.conveyor-class", "dog") + kEnd)),
                      Catch::Contains("a.tar:k: two class names (k.conveyor-class, k.conveyor-class)"));
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(member("k.jpg", "x") + member("k.cls", "1") + member("k.conveyor-source", "") + kEnd)),
                      Catch::Contains("a.tar:k.conveyor-source: empty"));
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(sample("k", "1", std::string(4097, 'p'), "") + kEnd)),
                      Catch::Contains("a.tar:k.conveyor-source: 4097 bytes (at most 4096 expected)"));
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(sample("0", "1", "", "cat") + sample("1", "1", "", "dog") + kEnd)),
                      Catch::Contains("a.tar:1: class 'dog' for label 1, which " + (dir / "s" / "a.tar").string() + ":0 names 'cat'"));
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(sample("0", "1", "", "cat") + kEnd, sample("1", "0", "", "") + kEnd)),
                      Catch::Contains("b.tar:1: no class name (.conveyor-class), but " + (dir / "s" / "a.tar").string() +
                                      ":0 has one: are shards of two datasets in one folder?"));
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(sample("0", "0", "", "cat") + sample("1", "1", "", "cat") + kEnd)),
                      Catch::Contains("a.tar:1: class 'cat' for label 1, which " + (dir / "s" / "a.tar").string() +
                                      ":0 gives label 0"));
  REQUIRE_THROWS_WITH(dataset_from_shards(shard(sample("0", "999999", "", "cat") + kEnd)),
                      Catch::Contains("a.tar:0: label 999999 with a class name, in a dataset of 1 samples"));
  // Members apart (another writer's order): read one by one, the same answer.
  const Dataset apart = dataset_from_shards(shard(member("k.conveyor-source", "cat/1.jpg") + member("k.jpg", std::string(20000, 'x')) +
                                                   member("k.cls", "0") + member("k.conveyor-class", "cat") + kEnd));
  REQUIRE(apart.name(0) == (dir / "s" / "a.tar").string() + ":k.jpg (cat/1.jpg)");
  REQUIRE(apart.classes() == std::vector<std::string>{"cat"});
}

TEST_CASE("shards: the index is cached beside the shards, or in the user's cache, and rebuilt when stale or corrupt", "[tar][shards]") {
  TempDir dir;
  const auto folder = dir / "s";
  std::filesystem::create_directories(folder);
  spit(folder / "a.tar", member("k/1.jpg", "xx") + member("k/1.cls", "3") + kEnd);
  spit(folder / "b.tar", member("k/2.png", "yyy") + member("k/2.cls", "5") + kEnd);
  const ShardIndex built = build_shard_index(folder);
  REQUIRE(built.samples.size() == 2);
  REQUIRE(built.samples[1] == ShardIndex::Sample{1, "k/2.png", 512, 3, 5, ""});

  // Temporaries a killed writer left (its process gone) are cleared when the
  // index is next written; a live process's, and other names, are kept.
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  REQUIRE(gone > 0);
  REQUIRE(::waitpid(gone, nullptr, 0) == gone);
  const std::string tmp = index_beside(folder).filename().string() + ".tmp";
  spit(folder / (tmp + std::to_string(gone) + "-7"), "half an index");
  spit(folder / (tmp + std::to_string(::getpid()) + "-8"), "a live writer's");
  spit(folder / (tmp + "x"), "another name");

  IndexSource how{};
  REQUIRE(load_shard_index(folder, &how) == built);
  REQUIRE(how == IndexSource::built_beside);
  REQUIRE(std::filesystem::exists(index_beside(folder)));
  REQUIRE_FALSE(std::filesystem::exists(folder / (tmp + std::to_string(gone) + "-7")));
  REQUIRE(std::filesystem::exists(folder / (tmp + std::to_string(::getpid()) + "-8")));
  REQUIRE(std::filesystem::exists(folder / (tmp + "x")));
  std::filesystem::remove(folder / (tmp + std::to_string(::getpid()) + "-8"));
  std::filesystem::remove(folder / (tmp + "x"));
  REQUIRE(load_shard_index(folder, &how) == built);
  REQUIRE(how == IndexSource::cached);

  std::string text = slurp(index_beside(folder));  // corrupt: one label changed, checksum left alone
  text.replace(text.find(" 5 k/2.png"), 9, " 6 k/2.png");
  spit(index_beside(folder), text);
  REQUIRE_THROWS_WITH(ShardIndex::parse(text, "idx"), Catch::Contains("idx: not a valid shard index: checksum"));
  REQUIRE(load_shard_index(folder, &how) == built);
  REQUIRE(how == IndexSource::built_beside);

  spit(folder / "c.tar", member("k/3.jpg", "z") + member("k/3.cls", "1") + kEnd);  // a shard added: stale
  REQUIRE(load_shard_index(folder, &how).samples.size() == 3);
  REQUIRE(how == IndexSource::built_beside);
  REQUIRE(dataset_from_shards(folder).size() == 3);

  // Where the folder takes no index (here .conveyor-index is a directory; a
  // read-only folder does the same for a user who is not root): the user's cache.
  std::filesystem::remove(index_beside(folder));
  std::filesystem::create_directories(index_beside(folder));
  ::setenv("XDG_CACHE_HOME", (dir / "cache").c_str(), 1);
  REQUIRE(load_shard_index(folder, &how).samples.size() == 3);
  REQUIRE(how == IndexSource::built_cached);
  REQUIRE(index_in_cache(folder).parent_path() == dir / "cache" / "conveyor");
  REQUIRE(std::filesystem::exists(index_in_cache(folder)));
  REQUIRE(load_shard_index(folder, &how).samples.size() == 3);
  REQUIRE(how == IndexSource::cached);
  ::unsetenv("XDG_CACHE_HOME");

  // Neither XDG_CACHE_HOME nor HOME: a private folder in the temp folder, never
  // a shared one where another user could plant an index with other labels.
  const std::string home = std::getenv("HOME") ? std::getenv("HOME") : "";
  const std::string tmpdir = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "";
  ::unsetenv("HOME");
  ::setenv("TMPDIR", (dir / "tmp").c_str(), 1);
  std::filesystem::create_directories(dir / "tmp");
  const auto mine = dir / "tmp" / ("conveyor-" + std::to_string(::geteuid()));
  REQUIRE(load_shard_index(folder, &how).samples.size() == 3);
  REQUIRE(how == IndexSource::built_cached);
  REQUIRE(index_in_cache(folder).parent_path() == mine);
  REQUIRE((std::filesystem::status(mine).permissions() & std::filesystem::perms::all) == std::filesystem::perms::owner_all);
  REQUIRE(load_shard_index(folder, &how).samples.size() == 3);
  REQUIRE(how == IndexSource::cached);
  std::filesystem::permissions(mine, std::filesystem::perms::all);  // opened to everyone: no longer trusted
  REQUIRE(index_in_cache(folder).empty());
  REQUIRE(load_shard_index(folder, &how).samples.size() == 3);
  REQUIRE(how == IndexSource::built);
  // A link planted at conveyor-UID (to a folder of the right mode) is not the folder.
  std::filesystem::remove_all(mine);
  std::filesystem::create_directories(dir / "planted");
  std::filesystem::permissions(dir / "planted", std::filesystem::perms::owner_all);
  std::filesystem::create_directory_symlink(dir / "planted", mine);
  REQUIRE(index_in_cache(folder).empty());
  std::filesystem::remove(mine);
  if (::geteuid() == 0) {  // another user's folder of the right mode: only root can make one here
    std::filesystem::create_directories(mine);
    std::filesystem::permissions(mine, std::filesystem::perms::owner_all, std::filesystem::perm_options::replace);
    REQUIRE(::chown(mine.c_str(), 12345, 12345) == 0);
    REQUIRE(index_in_cache(folder).empty());
    REQUIRE(::chown(mine.c_str(), 0, 0) == 0);
    REQUIRE(index_in_cache(folder).parent_path() == mine);
  }
  if (!home.empty()) ::setenv("HOME", home.c_str(), 1);
  if (tmpdir.empty()) ::unsetenv("TMPDIR");
  else ::setenv("TMPDIR", tmpdir.c_str(), 1);

  ShardIndex odd;  // names with the escape character and line breaks survive the text form
  odd.shards = {{"we%ird\n.tar", 10, -3, -4, 5}};
  odd.samples = {{0, "a\r\nb%0A.jpg", 512, 7, 2}};
  REQUIRE(ShardIndex::parse(odd.serialize(), "x") == odd);
}

TEST_CASE("shards: a shard rewritten with its old size and modification time is re-indexed", "[tar][shards]") {
  TempDir dir;
  const auto folder = dir / "s";
  std::filesystem::create_directories(folder);
  const auto shard = folder / "a.tar";
  spit(shard, member("k/1.jpg", "xx") + member("k/1.cls", "3") + kEnd);
  const auto mtime = std::filesystem::last_write_time(shard);
  const auto size = std::filesystem::file_size(shard);
  IndexSource how{};
  REQUIRE(load_shard_index(folder, &how).samples.at(0).label == 3);
  REQUIRE(how == IndexSource::built_beside);

  // Renamed over the old one (as `cp` to a temporary then `mv`, or rsync, do),
  // with the old mtime put back: the same size and mtime, a new inode.
  spit(folder / "new", member("k/1.jpg", "xx") + member("k/1.cls", "4") + kEnd);
  std::filesystem::last_write_time(folder / "new", mtime);
  std::filesystem::rename(folder / "new", shard);
  REQUIRE(std::filesystem::file_size(shard) == size);
  REQUIRE(load_shard_index(folder, &how).samples.at(0).label == 4);
  REQUIRE(how == IndexSource::built_beside);

  // Rewritten in place (`cp -p` over it), mtime put back: the same inode, a new
  // change time. Timestamps tick at the kernel's clock granularity (a few ms),
  // so the rewrite waits past it.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  spit(shard, member("k/1.jpg", "xx") + member("k/1.cls", "5") + kEnd);
  std::filesystem::last_write_time(shard, mtime);
  REQUIRE(std::filesystem::file_size(shard) == size);
  REQUIRE(load_shard_index(folder, &how).samples.at(0).label == 5);
  REQUIRE(how == IndexSource::built_beside);
  REQUIRE(load_shard_index(folder, &how).samples.at(0).label == 5);
  REQUIRE(how == IndexSource::cached);
  REQUIRE(dataset_from_shards(folder).label(0) == 5);
}

TEST_CASE("shards: a .tar that is a dangling link or a folder is refused by name, not skipped", "[tar][shards]") {
  TempDir dir;
  const auto folder = dir / "s";
  std::filesystem::create_directories(folder);
  spit(folder / "a.tar", member("k/1.jpg", "xx") + member("k/1.cls", "3") + kEnd);
  std::filesystem::create_symlink(dir / "gone.tar", folder / "b.tar");
  REQUIRE_THROWS_WITH(list_shards(folder), Catch::Contains("b.tar: cannot stat: No such file or directory"));
  std::filesystem::remove(folder / "b.tar");
  std::filesystem::create_directories(folder / "c.tar");
  REQUIRE_THROWS_WITH(dataset_from_shards(folder), Catch::Contains("c.tar: not a regular file"));
}

TEST_CASE("shards: whole shards per rank, every sample in exactly one rank, counts evened by pad or drop", "[tar][shards]") {
  TempDir dir;
  const auto folder = dir / "s";
  std::filesystem::create_directories(folder);
  std::size_t n = 0;
  for (int s = 0; s < 5; ++s) {  // shards of 1, 2, 3, 4, 5 samples: 15
    std::string tar;
    for (int k = 0; k <= s; ++k, ++n) {
      const std::string key = "k/" + std::to_string(n);
      tar += member(key + ".jpg", "x") + member(key + ".cls", std::to_string(n));  // label = sample index
    }
    spit(folder / ("s" + std::to_string(s) + ".tar"), tar + kEnd);
  }
  const Dataset all = dataset_from_shards(folder);
  REQUIRE(all.size() == 15);
  // 3 ranks: rank 0 has shards 0 and 3 (5 samples), rank 1 shards 1 and 4 (7), rank 2 shard 2 (3).
  std::vector<int> seen(15);
  for (std::size_t r = 0; r < 3; ++r) {
    const Dataset padded = all.rank_subset(r, 3, ShardPolicy::pad);
    REQUIRE(padded.size() == 7);
    const Dataset dropped = all.rank_subset(r, 3, ShardPolicy::drop);
    REQUIRE(dropped.size() == 3);
    // Each rank keeps the whole's label space (labels 0 to 14), not its own max + 1.
    REQUIRE(padded.num_classes() == 15);
    REQUIRE(dropped.num_classes() == 15);
    std::vector<std::int64_t> own;
    for (std::size_t i = 0; i < padded.size(); ++i) {
      const std::int64_t label = padded.label(i);
      REQUIRE(all.name(std::size_t(label)) == padded.name(i));
      if (std::find(own.begin(), own.end(), label) == own.end()) own.push_back(label);
    }
    for (auto label : own) ++seen[std::size_t(label)];
    for (std::size_t i = 0; i < padded.size(); ++i) {  // the rank's shards only
      const auto shard = padded.path(i).filename().string();
      REQUIRE((std::stoi(shard.substr(1)) % 3) == int(r));
    }
  }
  REQUIRE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  REQUIRE_THROWS_WITH(all.rank_subset(0, 6, ShardPolicy::pad), Catch::Contains("5 shards cannot go whole to 6 ranks"));
  REQUIRE_THROWS_WITH(Dataset({"a.jpg"}, {0}).rank_subset(0, 1, ShardPolicy::pad), Catch::Contains("needs a shard dataset"));
  // An empty shard that leaves a rank with nothing: every rank refuses, naming it
  // (one rank running zero steps would hang the others' collectives).
  spit(folder / "s5.tar", kEnd);  // 6 shards; rank 2 of 3 gets s2 (3 samples) and s5 (none)
  spit(folder / "s8.tar", kEnd);
  const Dataset with_empty = dataset_from_shards(folder);
  for (std::size_t r = 0; r < 3; ++r) REQUIRE_NOTHROW(with_empty.rank_subset(r, 3, ShardPolicy::pad));
  for (std::size_t r = 0; r < 7; ++r) {  // 7 shards over 7 ranks: s5 and s8 alone on ranks 5 and 6
    REQUIRE_THROWS_WITH(with_empty.rank_subset(r, 7, ShardPolicy::pad),
                        Catch::Contains("rank 5 of 7 would get no samples: its shards (s5.tar) hold none"));
  }
}
