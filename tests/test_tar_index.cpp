// dataset_from_shards over tar shards: pack's source and class files, the index cached beside
// the shards or in the user's cache (rebuilt when stale), shards that are links or folders, and
// whole shards per rank. Reading samples through shards: test_tar_dataset.cpp.

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "catch_compat.h"
#include "data/dataset.h"
#include "data/reader.h"
#include "data/files/image_folder.h"
#include "data/shards/shard_dataset.h"
#include "data/shards/shard_index.h"
#include "tar_support.h"
#include "temp_dir.h"

using namespace conveyor;
using namespace conveyor::test;

TEST_CASE("shards: pack's .conveyor-source and .conveyor-class give sources and class names, a folder and its shards name samples alike",
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
