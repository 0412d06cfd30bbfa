// libFuzzer target: scan_tar (data/shards/tar_index.h), the hand-written tar header
// walk behind sharded datasets, over an in-memory archive. Bad input must end
// in TarError; every member listed must lie inside the input, block-aligned.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "data/shards/tar_index.h"

using namespace conveyor;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ReadAt read = [&](std::uint64_t offset, std::span<std::byte> out) {
    if (offset >= size) return std::size_t{0};
    const std::size_t n = std::min<std::size_t>(out.size(), size - offset);
    std::memcpy(out.data(), data + offset, n);
    return n;
  };
  try {
    for (const TarMember& m : scan_tar(read, size, "fuzz.tar")) {
      if (m.offset % 512 != 0 || m.offset > size || m.size > size - m.offset) __builtin_trap();
    }
  } catch (const TarError&) {
  }
  return 0;
}
