// Test datasets as WebDataset tar shards, written by GNU tar from files made
// here: n JPEGs KEY.jpg (KEY = 000000, 000001, ...) with labels KEY.cls =
// i % 3, packed per_shard samples to a shard (shards/shard-000.tar, ...), and
// a list file over the same files in the same order, so a test can compare
// the two datasets sample by sample.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "image_writers.h"

namespace conveyor::test {

struct ShardedImages {
  std::filesystem::path files, shards, list;
};

inline bool have_tar() { return std::system("tar --version >/dev/null 2>&1") == 0; }

inline ShardedImages write_shards(const std::filesystem::path& dir, std::size_t n, std::size_t per_shard) {
  ShardedImages out{dir / "files", dir / "shards", dir / "list.txt"};
  std::filesystem::create_directories(out.files);
  std::filesystem::create_directories(out.shards);
  std::ofstream list(out.list);
  std::vector<std::string> members;
  for (std::size_t i = 0; i < n; ++i) {
    char key[32];
    std::snprintf(key, sizeof key, "%06zu", i);
    write_file(out.files / (std::string(key) + ".jpg"), jpeg(photo_like(24 + int(i % 5), 20 + int(i % 3), i)));
    std::ofstream(out.files / (std::string(key) + ".cls")) << i % 3;
    list << "files/" << key << ".jpg " << i % 3 << "\n";
    members.push_back(std::string(key) + ".jpg " + key + ".cls");
  }
  for (std::size_t s = 0; s * per_shard < n; ++s) {
    char name[48];
    std::snprintf(name, sizeof name, "shard-%03zu.tar", s);
    std::string cmd = "cd '" + out.files.string() + "' && tar --format=gnu -cf '" + (out.shards / name).string() + "'";
    for (std::size_t i = s * per_shard; i < std::min(n, (s + 1) * per_shard); ++i) cmd += " " + members[i];
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("tar failed: " + cmd);
  }
  return out;
}

}  // namespace conveyor::test
