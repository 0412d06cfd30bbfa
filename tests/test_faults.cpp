// Faults from outside the program (issue 8's table, the rows that need no
// injected file system): files that vanish mid-epoch, list entries that are
// directories or broken links, a megabyte list line, file names that are not
// UTF-8, and a consumer that throws mid-epoch. Each fails with an error naming
// the file, or under ErrorPolicy::skip is counted and listed, and never hangs.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>

#include "image_writers.h"
#include "pipeline/pipeline.h"
#include "stages/dataset.h"
#include "stages/image_source.h"

using namespace conveyor;
namespace t = conveyor::test;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> n{0};
    path = fs::temp_directory_path() / ("conveyor-faults-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

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
      const auto paths = write_images(dir.path, 30);
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
  auto paths = write_images(dir.path, 4);
  fs::create_directory(dir.path / "a directory.jpg");
  fs::create_symlink(dir.path / "missing.jpg", dir.path / "broken link.jpg");
  const std::string latin1 = std::string("caf\xE9 \xFF.jpg");  // ISO-8859-1 bytes: not UTF-8
  t::write_file(dir.path / latin1, t::jpeg(t::photo_like(30, 20, 9)));
  {
    std::ofstream list(dir.path / "list.txt", std::ios::binary);
    list << "img0.jpg 0\na directory.jpg 1\nimg1.jpg 0\nbroken link.jpg 1\n" << latin1 << " 2\nimg2.jpg 0\n";
  }
  const Dataset ds = Dataset::from_list(dir.path / "list.txt");
  REQUIRE(ds.size() == 6);
  REQUIRE(ds.path(4) == dir.path / latin1);  // the bytes, unchanged

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

  ImageSource fail(ds, small(ErrorPolicy::fail), 2);
  REQUIRE(run_epoch(fail, 2, skipped, error) <= 2);
  REQUIRE_THAT(error, Catch::Contains("sample 1") && Catch::Contains("a directory.jpg"));
}

TEST_CASE("faults: a megabyte list line is one sample with a long path, refused when opened", "[faults]") {
  TempDir dir;
  write_images(dir.path, 1);
  const std::string long_name(1 << 20, 'x');
  {
    std::ofstream list(dir.path / "list.txt", std::ios::binary);
    list << "img0.jpg 0\n" << long_name << " 1\nimg0.jpg 2\n";
  }
  const Dataset ds = Dataset::from_list(dir.path / "list.txt");
  REQUIRE(ds.size() == 3);
  ImageSource skip(ds, small(ErrorPolicy::skip), 1);
  std::vector<SkippedSample> skipped;
  std::string error;
  REQUIRE(run_epoch(skip, 1, skipped, error) == 2);
  REQUIRE(skipped.size() == 1);
  REQUIRE(skipped[0].index == 1);
  REQUIRE_THAT(skipped[0].reason, Catch::Contains("File name too long"));
}

TEST_CASE("faults: a consumer that throws mid-epoch stops the pipeline cleanly; a new one starts", "[faults]") {
  TempDir dir;
  const auto paths = write_images(dir.path, 24);
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
