// A sample's label as text: the one parser for every dataset format that
// writes labels as text (a list file's last field, a tar shard's .cls member),
// so each accepts the same forms and refuses with the same words.
//
// Accepted: decimal digits only ("0", "17", "007"), at most kMaxLabel. No sign
// ("-0", "+3"), no spaces (a caller trims its format's own blanks first), no
// "0x", no locale. Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace conveyor {

// The largest label a sample may have: num_classes = max label + 1 must fit int64 too.
inline constexpr std::int64_t kMaxLabel = std::numeric_limits<std::int64_t>::max() - 1;

enum class LabelParse { ok, not_integer, out_of_range };

struct ParsedLabel {
  LabelParse status = LabelParse::not_integer;
  std::int64_t value = 0;  // the label where status is ok, else 0
};

// `text` read as a label. Never allocates, never throws.
[[nodiscard]] ParsedLabel parse_label(std::string_view text) noexcept;

// What a message says of a label `text` that parse_label refused with `why`
// (not ok), `text` quoted as quote_bytes() (data/quote_bytes.h) quotes bytes:
//   "label 'x1' is not a non-negative decimal integer"
//   "label '99999999999999999999' is out of range (max 9223372036854775806)"
[[nodiscard]] std::string label_error(std::string_view text, LabelParse why);

}  // namespace conveyor
