// Test helpers: a deterministic filler whose bytes depend on (seed, epoch,
// index) alone, and digests to compare whole streams.
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

// FNV-1a over a batch's identity, indices, labels and bytes.
inline std::uint64_t digest(const Batch& b) {
  std::uint64_t h = 1469598103934665603ULL;
  auto mix = [&](const void* p, std::size_t n) {
    auto c = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ULL;
  };
  mix(&b.epoch, sizeof b.epoch);
  mix(&b.index, sizeof b.index);
  mix(b.indices.data(), b.indices.size() * sizeof(b.indices[0]));
  mix(b.labels.data(), b.labels.size() * sizeof(b.labels[0]));
  mix(b.data, b.size() * b.sample_bytes);
  return h;
}

}  // namespace conveyor::test
