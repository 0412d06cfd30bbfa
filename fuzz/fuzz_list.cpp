// libFuzzer target: the list-file parser (`path label` per line, comments,
// CRLF, BOM, quoting of spaces) through a file, as `--list` reads it. Bad
// input must end in DatasetError naming file:line.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "stages/dataset.h"

using namespace conveyor;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("conveyor-fuzz-list-" + std::to_string(::getpid()) + ".txt");
  std::FILE* f = std::fopen(file.c_str(), "wb");
  if (!f) __builtin_trap();
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    const Dataset d = Dataset::from_list(file);
    for (std::size_t i = 0; i < d.size(); ++i) {
      (void)d.path(i);
      if (d.label(i) < 0) __builtin_trap();  // labels are checked non-negative
    }
  } catch (const DatasetError&) {
  }
  return 0;
}
