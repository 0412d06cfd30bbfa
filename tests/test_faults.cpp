// Faults from outside the program (docs/reliability.md, "Faults tried"): files that vanish
// mid-epoch, list entries that are directories or broken links, a megabyte
// list line, file names that are not UTF-8, a consumer that throws mid-epoch,
// and, through a FileSystem that injects them, EIO, short reads, truncation
// and a read that stalls. Each fails with an error naming the file, or under
// ErrorPolicy::skip is counted and listed, and never hangs.
#include <sys/stat.h>

#include "catch_compat.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "image_writers.h"
#include "pipeline/pipeline.h"
#include "shards.h"
#include "data/dataset.h"
#include "data/file_system.h"
#include "data/files/list_file.h"
#include "data/shards/shard_dataset.h"
#include "image/image_source.h"
#include "support.h"
#include "temp_dir.h"

using namespace conveyor;
namespace t = conveyor::test;
namespace fs = std::filesystem;

namespace {

using test::TempDir;

// n small JPEGs named img0.jpg ... in dir; their paths in order.
std::vector<fs::path> write_images(const fs::path& dir, std::size_t n) {
  std::vector<fs::path> paths;
  for (std::size_t i = 0; i < n; ++i) {
    paths.push_back(dir / ("img" + std::to_string(i) + ".jpg"));
    t::write_file(paths.back(), t::jpeg(t::photo_like(24 + int(i % 5), 20, i)));
  }
  return paths;
}

ImageConfig small(ErrorPolicy policy) {
  ImageConfig c;
  c.transforms = {RandomResizedCrop{{8, 8}}};
  c.on_error = policy;
  return c;
}

// Sample `index` rendered under two configs (the real files, and faults injected): the bytes, each way.
std::pair<std::vector<unsigned char>, std::vector<unsigned char>> render_both(const Dataset& ds, const ImageConfig& plain,
                                                                              const ImageConfig& injected,
                                                                              std::size_t index) {
  ImageSource a(ds, plain, 1), b(ds, injected, 1);
  std::vector<unsigned char> x(a.sample_bytes()), y(b.sample_bytes());
  Rng r1(1, 0, index), r2(1, 0, index);
  a.render_sample(index, r1, x);
  b.render_sample(index, r2, y);
  return {x, y};
}

Config config_for(const ImageSource& src, std::size_t workers) {
  Config c;
  c.batch_size = 2;
  c.sample_bytes = src.sample_bytes();
  c.workers = workers;
  c.shuffle = false;  // dataset order, so a test knows which batch holds which file
  c.epochs = 1;
  return c;
}

// Runs one epoch; returns the delivered count, or the error's message in `error`.
std::size_t run_epoch(ImageSource& src, std::size_t workers, std::vector<SkippedSample>& skipped, std::string& error,
                      const std::function<void(const Batch&)>& on_batch = {}) {
  Pipeline p(config_for(src, workers), src.dataset().size(), {src.filler()});
  std::size_t delivered = 0;
  try {
    while (auto b = p.next()) {
      delivered += (*b)->size();
      if (on_batch) on_batch(**b);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  skipped = p.skipped();
  return delivered;
}

}  // namespace

TEST_CASE("faults: a file deleted mid-epoch fails naming it, or is skipped and listed", "[faults]") {
  for (const auto policy : {ErrorPolicy::fail, ErrorPolicy::skip}) {
    for (const std::size_t workers : {1, 3}) {
      TempDir dir;
      const auto paths = write_images(dir.path(), 30);
      ImageSource src(Dataset(paths, std::vector<std::int64_t>(30, 0)), small(policy), workers);
      std::vector<SkippedSample> skipped;
      std::string error;
      // The pool bounds read-ahead to a few batches: the last file is still
      // unread when the first batch arrives, and is gone when its turn comes.
      const std::size_t delivered = run_epoch(src, workers, skipped, error, [&](const Batch& b) {
        if (b.index == 0) fs::remove(paths.back());
      });
      if (policy == ErrorPolicy::fail) {
        REQUIRE_THAT(error, Catch::Contains(paths.back().string()) && Catch::Contains("cannot open"));
        REQUIRE_THAT(error, Catch::Contains("sample 29"));
      } else {
        REQUIRE(error.empty());
        REQUIRE(delivered == 29);
        REQUIRE(skipped.size() == 1);
        REQUIRE(skipped[0].index == 29);
        REQUIRE_THAT(skipped[0].reason, Catch::Contains(paths.back().string()));
      }
    }
  }
}

TEST_CASE("faults: list entries that are a directory or a broken link, and a non-UTF-8 name", "[faults]") {
  TempDir dir;
  auto paths = write_images(dir.path(), 4);
  fs::create_directory(dir.path() / "a directory.jpg");
  fs::create_symlink(dir.path() / "missing.jpg", dir.path() / "broken link.jpg");
  const std::string latin1 = std::string("caf\xE9 \xFF.jpg");  // ISO-8859-1 bytes: not UTF-8
  t::write_file(dir.path() / latin1, t::jpeg(t::photo_like(30, 20, 9)));
  {
    std::ofstream list(dir.path() / "list.txt", std::ios::binary);
    list << "img0.jpg 0\na directory.jpg 1\nimg1.jpg 0\nbroken link.jpg 1\n" << latin1 << " 2\nimg2.jpg 0\n";
  }
  const Dataset ds = dataset_from_list(dir.path() / "list.txt");
  REQUIRE(ds.size() == 6);
  REQUIRE(ds.path(4) == dir.path() / latin1);  // the bytes, unchanged

  ImageSource skip(ds, small(ErrorPolicy::skip), 2);
  std::vector<SkippedSample> skipped;
  std::string error;
  REQUIRE(run_epoch(skip, 2, skipped, error) == 4);  // the non-UTF-8 name decodes like any other
  REQUIRE(error.empty());
  REQUIRE(skipped.size() == 2);
  REQUIRE(skipped[0].index == 1);
  REQUIRE_THAT(skipped[0].reason, Catch::Contains("a directory.jpg") && Catch::Contains("not a regular file"));
  REQUIRE(skipped[1].index == 3);
  REQUIRE_THAT(skipped[1].reason, Catch::Contains("broken link.jpg") && Catch::Contains("cannot open"));

  // One worker, so the first bad sample (1) is the first error; with more, the
  // worker on sample 3 may fail first, and the first error is the one kept.
  ImageSource fail(ds, small(ErrorPolicy::fail), 1);
  REQUIRE(run_epoch(fail, 1, skipped, error) <= 2);
  REQUIRE_THAT(error, Catch::Contains("sample 1") && Catch::Contains("a directory.jpg"));
}

TEST_CASE("faults: a megabyte list line is one sample with a long path, refused when opened", "[faults]") {
  TempDir dir;
  write_images(dir.path(), 1);
  const std::string long_name(1 << 20, 'x');
  {
    std::ofstream list(dir.path() / "list.txt", std::ios::binary);
    list << "img0.jpg 0\n" << long_name << " 1\nimg0.jpg 2\n";
  }
  const Dataset ds = dataset_from_list(dir.path() / "list.txt");
  REQUIRE(ds.size() == 3);
  ImageSource skip(ds, small(ErrorPolicy::skip), 1);
  std::vector<SkippedSample> skipped;
  std::string error;
  REQUIRE(run_epoch(skip, 1, skipped, error) == 2);
  REQUIRE(skipped.size() == 1);
  REQUIRE(skipped[0].index == 1);
  REQUIRE_THAT(skipped[0].reason, Catch::Contains("File name too long"));
}

TEST_CASE("faults: a consumer that throws mid-epoch stops the pipeline cleanly, a new one starts", "[faults]") {
  TempDir dir;
  const auto paths = write_images(dir.path(), 24);
  ImageSource src(Dataset(paths, std::vector<std::int64_t>(24, 0)), small(ErrorPolicy::fail), 3);
  for (int attempt = 0; attempt < 20; ++attempt) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      Pipeline p(config_for(src, 3), 24, {src.filler()});
      std::size_t n = 0;
      while (auto b = p.next()) {
        if (++n == std::size_t(1 + attempt % 5)) throw std::runtime_error("the training step failed");
      }
      FAIL("the consumer's exception did not leave the loop");
    } catch (const std::runtime_error& e) {
      REQUIRE(std::string(e.what()) == "the training step failed");
    }
    // The pipeline was destroyed during the unwinding, with workers mid-sample
    // and queues full: every thread joined, promptly.
    REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  }
  std::vector<SkippedSample> skipped;
  std::string error;
  REQUIRE(run_epoch(src, 3, skipped, error) == 24);  // the same ImageSource serves a new pipeline
  REQUIRE(error.empty());
}

namespace {

// The real files, with faults injected per file name (like leveldb's
// FaultInjectionTestEnv): EIO on the first read, reads of at most a few bytes,
// end of file halfway, or a read that trickles a byte at a time.
enum class Fault { eacces, eio, short_reads, truncate, stall };

class FaultyFileSystem final : public FileSystem {
 public:
  std::map<std::string, Fault> faults;  // by file name; set before use
  std::atomic<bool> stalled{false};     // a stalled read is under way
  std::atomic<bool> release{false};     // stalled reads go on at full speed

  std::unique_ptr<File> open(const fs::path& path) override {
    const auto f = faults.find(path.filename().string());
    // Made unreadable: what open(2) says for chmod 000 (which root, as in CI, bypasses).
    if (f != faults.end() && f->second == Fault::eacces) {
      throw std::runtime_error(std::string("cannot open: ") + std::strerror(EACCES));
    }
    auto inner = posix_file_system()->open(path);
    if (f == faults.end()) return inner;
    return std::make_unique<Faulty>(std::move(inner), f->second, *this);
  }

 private:
  class Faulty final : public File {
   public:
    Faulty(std::unique_ptr<File> inner, Fault fault, FaultyFileSystem& owner)
        : inner_(std::move(inner)), fault_(fault), owner_(owner) {}
    std::uint64_t size() const override { return inner_->size(); }
    std::size_t read_at(std::uint64_t offset, void* buf, std::size_t n) override {
      switch (fault_) {
        case Fault::eacces:
          return 0;  // open() threw already
        case Fault::eio:
          throw std::runtime_error(std::string("read failed: ") + std::strerror(EIO));
        case Fault::short_reads:
          return inner_->read_at(offset, buf, std::min<std::size_t>(n, 7));
        case Fault::truncate: {
          const std::uint64_t half = inner_->size() / 2;
          if (offset >= half) return 0;  // end of file halfway
          return inner_->read_at(offset, buf, std::min<std::size_t>(n, std::size_t(half - offset)));
        }
        case Fault::stall:
          // One byte per 5 ms: seconds for the smallest file, as a hung network
          // mount trickles. read_whole_file checks the stop flag between reads.
          if (owner_.release) return inner_->read_at(offset, buf, n);
          owner_.stalled = true;
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          return inner_->read_at(offset, buf, 1);
      }
      return 0;
    }

   private:
    std::unique_ptr<File> inner_;
    Fault fault_;
    FaultyFileSystem& owner_;
  };
};

}  // namespace

TEST_CASE("faults: EACCES, EIO, short reads and truncation through an injected file system", "[faults][fs]") {
  TempDir dir;
  const auto paths = write_images(dir.path(), 12);
  const Dataset ds(paths, std::vector<std::int64_t>(12, 0));
  auto faulty = std::make_shared<FaultyFileSystem>();
  faulty->faults = {{"img2.jpg", Fault::eio},
                    {"img5.jpg", Fault::short_reads},
                    {"img7.jpg", Fault::eacces},
                    {"img9.jpg", Fault::truncate}};

  // Short reads are not errors: the bytes come out as from the real files.
  ImageConfig plain = small(ErrorPolicy::skip), injected = plain;
  injected.files = faulty;
  const auto [x, y] = render_both(ds, plain, injected, 5);
  REQUIRE(x == y);

  for (const std::size_t workers : {1, 2}) {
    std::vector<SkippedSample> skipped;
    std::string error;
    ImageSource skip(ds, injected, workers);
    REQUIRE(run_epoch(skip, workers, skipped, error) == 9);
    REQUIRE(error.empty());
    REQUIRE(skipped.size() == 3);
    REQUIRE(skipped[0].index == 2);
    REQUIRE_THAT(skipped[0].reason, Catch::Contains(paths[2].string() + ": read failed: Input/output error"));
    REQUIRE(skipped[1].index == 7);
    REQUIRE_THAT(skipped[1].reason, Catch::Contains(paths[7].string() + ": cannot open: Permission denied"));
    REQUIRE(skipped[2].index == 9);
    REQUIRE_THAT(skipped[2].reason, Catch::Contains(paths[9].string() + ": "));  // the decoder: truncated data
  }
  // Fail policy with one worker, so the first bad sample (2) is the first error:
  // with more, samples 7 or 9 may fail first, and the first error is the one kept.
  ImageConfig strict = injected;
  strict.on_error = ErrorPolicy::fail;
  ImageSource fail(ds, strict, 1);
  std::vector<SkippedSample> skipped;
  std::string error;
  run_epoch(fail, 1, skipped, error);
  REQUIRE_THAT(error, Catch::Contains("sample 2") && Catch::Contains("Input/output error"));
}

TEST_CASE("faults: an ImageSource destroyed before its pipeline fails the pipeline by name, not the process", "[faults]") {
  TempDir dir;
  const auto paths = write_images(dir.path(), 12);
  for (const std::size_t workers : {1, 3}) {
    auto src = std::make_unique<ImageSource>(Dataset(paths, std::vector<std::int64_t>(12, 0)), small(ErrorPolicy::fail), workers);
    Config c = config_for(*src, workers);
    c.epochs = 0;  // endless: the workers go on filling after the source is gone
    Pipeline p(c, 12, {src->filler()});
    REQUIRE(p.next());
    src.reset();
    std::string error;
    try {
      for (int i = 0; i < 10000 && p.next(); ++i) {
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    REQUIRE_THAT(error, Catch::Contains("ImageSource: destroyed before the pipeline that calls it"));
  }
}

TEST_CASE("faults: a read that stalls shows as busy workers and a waiting consumer, stop returns promptly",
          "[faults][fs]") {
  TempDir dir;
  const auto paths = write_images(dir.path(), 12);
  auto faulty = std::make_shared<FaultyFileSystem>();
  faulty->faults = {{"img6.jpg", Fault::stall}};
  ImageConfig cfg = small(ErrorPolicy::fail);
  cfg.files = faulty;
  ImageSource src(Dataset(paths, std::vector<std::int64_t>(12, 0)), cfg, 1);
  // 1. The stats while the read stalls and the consumer waits in next() (on
  // its own thread; this one only reads stats(), which any thread may).
  {
    Pipeline p(config_for(src, 1), 12, StageFunctions{src.filler()});
    // Batches 0-2 hold samples 0-5; batch 3 waits on the stalled sample 6.
    for (int i = 0; i < 3; ++i) REQUIRE(p.next());
    bool got = false;
    std::thread consumer([&] { got = p.next().has_value(); });
    REQUIRE(conveyor::test::eventually([&] { return faulty->stalled.load(); }));
    // And the consumer inside next(): a thread started late on a loaded
    // machine would not be starved for the whole interval.
    const auto starved_s = [&] {
      const PipelineStats now = p.stats();
      const StageStats* c = now.stage("consumer");
      return c ? c->starved_s : 0.0;
    };
    const double starved_before = starved_s();  // the first three batches' waits
    REQUIRE(conveyor::test::eventually([&] { return starved_s() > starved_before; }));
    const PipelineStats before = p.stats();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // measuring an interval, not ordering threads
    const PipelineStats during = p.stats().since(before);
    faulty->release = true;  // the read finishes; the consumer gets batch 3
    consumer.join();
    REQUIRE(got);
    REQUIRE(during.bottleneck()->name == "workers");
    REQUIRE(during.bottleneck()->busy_fraction() > 0.8);  // the stalled read counts while it lasts
    for (const auto& st : during.stages) {
      if (st.name == "consumer") REQUIRE(st.starved_fraction() > 0.8);
    }
  }
  // 2. Stop with the worker inside the stalled read.
  faulty->stalled = false;
  faulty->release = false;
  std::optional<Pipeline> p;
  p.emplace(config_for(src, 1), 12, StageFunctions{src.filler()});
  for (int i = 0; i < 3; ++i) REQUIRE(p->next());
  REQUIRE(conveyor::test::eventually([&] { return faulty->stalled.load(); }));
  const auto t0 = std::chrono::steady_clock::now();
  p.reset();
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
}

TEST_CASE("faults: a FIFO and a device among the images are refused by kind, without blocking", "[faults]") {
  // A FIFO with no writer used to block open() forever (and SIGINT restarted it).
  TempDir dir;
  write_images(dir.path(), 2);
  REQUIRE(::mkfifo((dir.path() / "pipe.jpg").c_str(), 0644) == 0);
  {
    std::ofstream list(dir.path() / "list.txt", std::ios::binary);
    list << "img0.jpg 0\npipe.jpg 1\n/dev/zero 1\nimg1.jpg 0\n";
  }
  const Dataset ds = dataset_from_list(dir.path() / "list.txt");
  ImageSource skip(ds, small(ErrorPolicy::skip), 2);
  std::vector<SkippedSample> skipped;
  std::string error;
  REQUIRE(run_epoch(skip, 2, skipped, error) == 2);
  REQUIRE(error.empty());
  REQUIRE(skipped.size() == 2);
  REQUIRE_THAT(skipped[0].reason, Catch::Contains("pipe.jpg: not a regular file (a FIFO)"));
  REQUIRE_THAT(skipped[1].reason, Catch::Contains("/dev/zero: not a regular file (a character device)"));
}

TEST_CASE("faults: shards read through an injected file system: EIO, short reads, a vanished shard, a stall", "[faults][fs][shards]") {
  if (!t::have_tar()) {
    WARN("no tar here: not checked");
    return;
  }
  TempDir dir;
  const auto made = t::write_shards(dir.path(), 12, 4);  // shard-000 (0-3), shard-001 (4-7), shard-002 (8-11)
  const Dataset ds = dataset_from_shards(made.shards);
  auto faulty = std::make_shared<FaultyFileSystem>();
  // (Truncation: test_tar's "cut short" case; GNU tar pads a shard to 10 KiB, so a cut at half the file may spare every member.)
  faulty->faults = {{"shard-000.tar", Fault::short_reads}, {"shard-001.tar", Fault::eio}};
  ImageConfig plain = small(ErrorPolicy::skip), injected = plain;
  injected.files = faulty;
  const auto [x, y] = render_both(ds, plain, injected, 2);
  REQUIRE(x == y);  // short reads at an offset still read the member exactly

  for (const std::size_t workers : {1, 3}) {
    std::vector<SkippedSample> skipped;
    std::string error;
    ImageSource skip(ds, injected, workers);
    REQUIRE(run_epoch(skip, workers, skipped, error) == 8);
    REQUIRE(error.empty());
    REQUIRE(skipped.size() == 4);  // shard-001's; shard-000's short reads are no error
    for (const auto& s : skipped) {
      REQUIRE((s.index >= 4 && s.index < 8));
      REQUIRE_THAT(s.reason, Catch::Contains(ds.name(s.index) + ": read failed: Input/output error"));
    }
  }

  // A shard deleted after the index was made (between epochs, or mid-epoch
  // before its turn): its samples fail naming the shard and member.
  ImageConfig strict = plain;
  strict.on_error = ErrorPolicy::fail;
  ImageSource fail(ds, strict, 1);
  std::vector<SkippedSample> skipped;
  std::string error;
  fs::remove(made.shards / "shard-002.tar");
  REQUIRE(run_epoch(fail, 1, skipped, error) <= 8);
  REQUIRE_THAT(error, Catch::Contains("shard-002.tar:000008.jpg: cannot open: No such file or directory"));

  // A shard whose reads stall (a hung network mount trickling): stop returns
  // promptly with a worker inside the read, as for a file.
  auto stalling = std::make_shared<FaultyFileSystem>();
  stalling->faults = {{"shard-001.tar", Fault::stall}};
  ImageConfig slow = plain;
  slow.files = stalling;
  ImageSource stalled(ds, slow, 1);
  std::optional<Pipeline> p;
  p.emplace(config_for(stalled, 1), 12, StageFunctions{stalled.filler()});
  for (int i = 0; i < 2; ++i) REQUIRE(p->next());  // samples 0-3, from shard-000
  REQUIRE(conveyor::test::eventually([&] { return stalling->stalled.load(); }));
  const auto t0 = std::chrono::steady_clock::now();
  p.reset();
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
}
