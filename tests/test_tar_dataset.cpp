// dataset_from_shards over tar shards against the same files read one by one: samples and
// batches, read-ahead through the shared descriptors, and folders, manifests and shards that are
// refused by name. The index and pack's metadata: test_tar_index.cpp.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "catch_compat.h"
#include "data/dataset.h"
#include "data/file_system.h"
#include "data/files/list_file.h"
#include "data/shards/shard_dataset.h"
#include "data/shards/manifest.h"
#include "data/shards/shard_index.h"
#include "image/image_source.h"
#include "pipeline/fnv1a.h"
#include "pipeline/pipeline.h"
#include "shards.h"
#include "tar_support.h"
#include "temp_dir.h"

using namespace conveyor;
using namespace conveyor::test;

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

TEST_CASE("shards: read-ahead advises each member's byte range through the shared descriptors, files get none",
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
