// libFuzzer target: the list-file parser (`path label` per line, comments,
// CRLF, BOM, paths with spaces before the last field) through a file, as
// `--list` reads it. Bad input must end in DatasetError naming file:line.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "fuzz/input_file.h"
#include "data/dataset.h"
#include "data/files/list_file.h"

using namespace conveyor;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path& file = fuzz::input_file(data, size, ".txt");
  try {
    const Dataset d = dataset_from_list(file);
    for (std::size_t i = 0; i < d.size(); ++i) {
      (void)d.path(i);
      if (d.label(i) < 0) __builtin_trap();  // labels are checked non-negative
    }
  } catch (const DatasetError&) {
  }
  return 0;
}
