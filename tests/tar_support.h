// Helpers the tar tests share (test_tar.cpp, test_tar_dataset.cpp, test_tar_index.cpp): whole
// files read and written as bytes, and tar members built with the writer pack uses (tar_header),
// whose fields the tests then break on purpose.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "data/shards/tar_index.h"

namespace conveyor::test {

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

inline void spit(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f << bytes;
}

// A header and its data, padded to whole blocks.
inline std::string member(const std::string& name, const std::string& data, char type = '0') {
  std::string a = tar_header(name, data.size(), type) + data;
  a.resize((a.size() + 511) / 512 * 512, '\0');
  return a;
}

inline const std::string kEnd(1024, '\0');  // the end-of-archive marker

}  // namespace conveyor::test
