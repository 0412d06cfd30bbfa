// libFuzzer target: the .npy reader (magic, version, header dict, descr,
// shape, data size) through a file, as `--npy` datasets read it. Bad input
// must end in NpyError; it must never allocate more than the file holds.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "fuzz/input_file.h"
#include "data/npy.h"

using namespace conveyor;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path& file = fuzz::input_file(data, size, ".npy");
  try {
    const NpyArray a = read_npy(file);
    if (a.data.size() != a.rows() * a.row_bytes()) __builtin_trap();  // the contract of read_npy
  } catch (const NpyError&) {
  }
  return 0;
}
