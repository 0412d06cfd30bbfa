// For fuzz targets whose entry reads a file: writes libFuzzer's input to one
// temporary file per process (same path every run) and returns its path.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace conveyor::fuzz {

inline const std::filesystem::path& input_file(const std::uint8_t* data, std::size_t size, const char* suffix) {
  static const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("conveyor-fuzz-" + std::to_string(::getpid()) + suffix);
  std::FILE* f = std::fopen(file.c_str(), "wb");
  if (!f) __builtin_trap();
  if (size && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  return file;
}

}  // namespace conveyor::fuzz
