// libFuzzer target: the .npy reader (magic, version, header dict, descr,
// shape, data size) through a file, as `--npy` datasets read it. Bad input
// must end in NpyError; it must never allocate more than the file holds.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "stages/npy.h"

using namespace conveyor;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("conveyor-fuzz-npy-" + std::to_string(::getpid()) + ".npy");
  std::FILE* f = std::fopen(file.c_str(), "wb");
  if (!f) __builtin_trap();
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    const NpyArray a = read_npy(file);
    if (a.data.size() != a.rows() * a.row_bytes()) __builtin_trap();  // the contract of read_npy
  } catch (const NpyError&) {
  }
  return 0;
}
