// Test helpers: a deterministic filler whose bytes depend on (seed, epoch,
// index) alone (batch_digest() in pipeline/batch.h compares whole streams).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <thread>
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

// Yields until `ready()` holds and returns true, or false after `limit_s`.
// Tests wait this way for a state the threads reach on their own (every thread
// blocked, queues full, a read stalled) instead of sleeping and hoping they got there.
template <typename Ready>
bool eventually(Ready ready, double limit_s = 60.0) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace conveyor::test
