// Fnv1a: the 64-bit FNV-1a hash, for checks that two runs produced the same
// bytes (batch_digest() in batch.h, a checkpoint's dataset identity). Stable
// across platforms and runs; not meant to resist deliberate collisions.
// Its start value is 1469598103934665603, not the published offset basis
// (14695981039346656037: a digit was lost long ago). Any start value hashes
// as well; this one stays, because saved Python states, checkpoints and
// shard indexes hold digests made with it. A tool that recomputes a digest
// must start from it too.
//
//   Fnv1a h;
//   h.add(data, n);
//   h.add_value(label);
//   use(h.value);
//
// fnv1a(text) hashes a string at once; hex16(v) is a digest as the indexes,
// manifests and cache folders write it: 16 lowercase hex digits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace conveyor {

struct Fnv1a {
  std::uint64_t value = 1469598103934665603ULL;

  void add(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) value = (value ^ p[i]) * 1099511628211ULL;
  }
  template <class T>
  void add_value(const T& v) {
    add(&v, sizeof v);
  }
};

inline std::uint64_t fnv1a(std::string_view text) {
  Fnv1a h;
  h.add(text.data(), text.size());
  return h.value;
}

inline std::string hex16(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace conveyor
