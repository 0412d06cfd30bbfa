// Test helpers: a deterministic filler whose bytes depend on (seed, epoch,
// index) alone (batch_digest() in pipeline/batch.h compares whole streams).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "pipeline/pipeline.h"

namespace conveyor::test {

// What sample (epoch, index) must hold: bytes drawn from its own Rng.
inline void expected_bytes(std::uint64_t seed, std::uint64_t epoch, std::uint64_t index, std::span<std::byte> out) {
  Rng rng(seed, epoch, index);
  for (std::size_t i = 0; i < out.size(); i += 8) {
    const std::uint64_t v = rng.next_u64();
    std::memcpy(out.data() + i, &v, std::min<std::size_t>(8, out.size() - i));
  }
}

// Fills from the sample's own Rng, as an augmenting filler would; label = index * 3.
inline void fill_pattern(Sample& s) {
  for (std::size_t i = 0; i < s.data.size(); i += 8) {
    const std::uint64_t v = s.rng.next_u64();
    std::memcpy(s.data.data() + i, &v, std::min<std::size_t>(8, s.data.size() - i));
  }
  s.label = std::int64_t(s.index * 3);
}

}  // namespace conveyor::test
