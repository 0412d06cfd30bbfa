// Rng: the random stream of one sample (or one epoch's shuffle), derived from
// (seed, epoch, index) alone, so a sample's augmentation never depends on which
// worker ran it, how many workers there are, or what ran before.
//
// Thread safety: an Rng is a value; give each thread its own.
//
// Written by hand on purpose: the standard engines are costly to seed per sample
// (mt19937_64 carries 2.5 KB of state), and the standard distributions are
// implementation-defined, so the same seed would give different crops under
// libstdc++ and libc++. SplitMix64 (Steele et al. 2014) mixes the key;
// xoshiro256** (Blackman & Vigna 2018) generates; both are public domain
// reference algorithms, a few lines each, and their outputs are fixed for ever.
#pragma once

#include <cstdint>

namespace conveyor {

// One SplitMix64 step: advances `state` and returns a well-mixed 64-bit value.
constexpr std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  // The stream for (seed, epoch, index). Distinct keys give independent streams.
  constexpr Rng(std::uint64_t seed, std::uint64_t epoch, std::uint64_t index) {
    std::uint64_t k = seed;
    k = splitmix64(k) ^ epoch;
    k = splitmix64(k) ^ index;
    for (auto& w : s_) w = splitmix64(k);
  }

  // Uniform over all 64-bit values.
  constexpr std::uint64_t next_u64() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1), 53 bits of precision.
  constexpr double uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }

  // Uniform in [lo, hi).
  constexpr double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

  // Uniform integer in [0, n); n > 0. Lemire's multiply-shift with rejection: unbiased.
  std::uint64_t below(std::uint64_t n) {
    __extension__ typedef unsigned __int128 u128;  // GCC and Clang; __extension__ keeps -Wpedantic quiet
    u128 m = u128(next_u64()) * n;
    auto low = std::uint64_t(m);
    if (low < n) {
      const std::uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = u128(next_u64()) * n;
        low = std::uint64_t(m);
      }
    }
    return std::uint64_t(m >> 64);
  }

  // True with probability p.
  constexpr bool bernoulli(double p) { return uniform() < p; }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4]{};
};

}  // namespace conveyor
