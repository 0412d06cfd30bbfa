// Bytes quoted into a message: how an error message shows a file name, URL,
// line or field that came from outside (bytes, not always UTF-8, possibly
// hostile), so that what() stays one printable line a user can read and act on.
//
// The one policy, shared by every message Conveyor writes (data/, apps/):
// - Valid UTF-8 is kept as is: "café/1.jpg" reads as the user's own name.
// - A byte that is not part of a well-formed UTF-8 sequence is "\xNN", as
//   Python's backslashreplace writes it (the Python module's messages agree).
// - Control characters are escaped, so no name can end the line, cut the
//   message at a NUL, or send a terminal escape: "\n", "\r", "\t", other C0
//   bytes and DEL as "\xNN", C1 controls (U+0080..U+009F) as their two "\xNN".
// - A backslash and a quote are kept: the rare name that holds "\x41" itself
//   is ambiguous, a cost taken for plain, readable names.
// quote_bytes() also shortens a long value: its first kQuoteBytesMax bytes (cut at a
// character boundary), then "..." and the full length in bytes.
//
// Thread safety: pure functions. Each allocates its result; none throws but
// std::bad_alloc.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace conveyor {

// The most bytes of a value quote_bytes() shows before it shortens it.
inline constexpr std::size_t kQuoteBytesMax = 80;

// `bytes` with the policy above applied, whole (no quotes, never shortened):
// for a message line as a whole. printable("a\nb\xff") == "a\\nb\\xff".
[[nodiscard]] std::string printable(std::string_view bytes);

// `bytes` in single quotes for a message, printable() and shortened:
// quote_bytes("x1") == "'x1'"; a 300-byte name gives "'<its first 80 bytes>...' (300 bytes)".
[[nodiscard]] std::string quote_bytes(std::string_view bytes);

// The length of the well-formed UTF-8 sequence at s[i] (1 to 4), or 0 where
// s[i] starts none (a stray continuation byte, an overlong form, a surrogate,
// past U+10FFFF, a sequence cut short). Requires i < s.size().
[[nodiscard]] std::size_t utf8_sequence(std::string_view s, std::size_t i) noexcept;

}  // namespace conveyor
