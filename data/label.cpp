#include "data/label.h"

#include <charconv>
#include <system_error>

#include "data/quote_bytes.h"

namespace conveyor {

ParsedLabel parse_label(std::string_view text) noexcept {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) return {};
  std::int64_t label = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), label);
  if (ec == std::errc::result_out_of_range || label > kMaxLabel) return {LabelParse::out_of_range, 0};
  if (ec != std::errc() || ptr != text.data() + text.size()) return {};
  return {LabelParse::ok, label};
}

std::string label_error(std::string_view text, LabelParse why) {
  if (why == LabelParse::out_of_range) {
    return "label " + quote_bytes(text) + " is out of range (max " + std::to_string(kMaxLabel) + ")";
  }
  return "label " + quote_bytes(text) + " is not a non-negative decimal integer";
}

}  // namespace conveyor
