#include "data/quote_bytes.h"

#include <cstdio>

namespace conveyor {
namespace {

void append_hex(std::string& out, unsigned char byte) {
  char hex[5];
  std::snprintf(hex, sizeof hex, "\\x%02x", byte);
  out += hex;
}

// Appends the sequence of n bytes at s[i] (n from utf8_sequence) as the policy shows it.
void append_shown(std::string& out, std::string_view s, std::size_t i, std::size_t n) {
  const auto u = static_cast<unsigned char>(s[i]);
  if (n == 0) return append_hex(out, u);
  if (n == 1) {
    if (u == '\n') out += "\\n";
    else if (u == '\r') out += "\\r";
    else if (u == '\t') out += "\\t";
    else if (u < 0x20 || u == 0x7f) append_hex(out, u);
    else out += s[i];
    return;
  }
  if (u == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) {  // C1 control, U+0080..U+009F
    append_hex(out, u);
    return append_hex(out, static_cast<unsigned char>(s[i + 1]));
  }
  out.append(s.substr(i, n));
}

}  // namespace

std::size_t utf8_sequence(std::string_view s, std::size_t i) noexcept {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  const std::size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
  }
  // Overlong three- and four-byte forms, surrogates, and past U+10FFFF.
  if ((c == 0xe0 && b(i + 1) < 0xa0) || (c == 0xed && b(i + 1) > 0x9f) || (c == 0xf0 && b(i + 1) < 0x90) ||
      (c == 0xf4 && b(i + 1) > 0x8f)) {
    return 0;
  }
  return n;
}

std::string printable(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t n = utf8_sequence(bytes, i);
    append_shown(out, bytes, i, n);
    i += n == 0 ? 1 : n;
  }
  return out;
}

// Built by appending, not as "'" + printable(...): GCC 12 at -O3 takes that
// concatenation for an overlapping memcpy (-Werror=restrict, a false warning).
std::string quote_bytes(std::string_view bytes) {
  std::string out = "'";
  if (bytes.size() <= kQuoteBytesMax) {
    out += printable(bytes);
    out += '\'';
    return out;
  }
  std::size_t cut = 0;  // the end of the last whole character within kQuoteBytesMax bytes
  while (cut < kQuoteBytesMax) {
    const std::size_t n = utf8_sequence(bytes, cut);
    const std::size_t next = cut + (n == 0 ? 1 : n);
    if (next > kQuoteBytesMax) break;
    cut = next;
  }
  out += printable(bytes.substr(0, cut));
  out += "...' (";
  out += std::to_string(bytes.size());
  out += " bytes)";
  return out;
}

}  // namespace conveyor
