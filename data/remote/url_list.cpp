#include "data/remote/url_list.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <stdexcept>

namespace conveyor {

namespace {

class Expander {
 public:
  explicit Expander(std::size_t limit) : limit_(limit) {}

  // Every expansion of `s`, each appended to a copy of `prefix`, into out.
  void expand(std::string_view s, const std::string& prefix, std::vector<std::string>& out) const {
    const std::size_t open = s.find_first_of("{}");
    if (open == std::string_view::npos) {
      if (out.size() >= limit_) fail("more than " + std::to_string(limit_) + " URLs");
      out.push_back(prefix + std::string(s));
      return;
    }
    if (s[open] == '}') fail("a '}' with no '{' before it");
    const std::size_t close = matching(s, open);
    const std::string head = prefix + std::string(s.substr(0, open));
    const std::string_view rest = s.substr(close + 1);
    for (const std::string& item : items(s.substr(open + 1, close - open - 1))) {
      // The item may hold groups of its own: expand it, then the rest after each.
      std::vector<std::string> heads;
      expand(item, head, heads);
      for (const std::string& h : heads) expand(rest, h, out);
    }
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw std::invalid_argument(why);
  }

  // The '}' that closes the '{' at `open`.
  std::size_t matching(std::string_view s, std::size_t open) const {
    int depth = 0;
    for (std::size_t i = open; i < s.size(); ++i) {
      if (s[i] == '{') ++depth;
      if (s[i] == '}' && --depth == 0) return i;
    }
    fail("a '{' that is never closed");
  }

  // A group's items, unexpanded: its top-level alternatives, or its range.
  std::vector<std::string> items(std::string_view body) const {
    std::vector<std::string> alternatives;
    int depth = 0;
    std::size_t start = 0;
    for (std::size_t i = 0; i < body.size(); ++i) {
      if (body[i] == '{') ++depth;
      if (body[i] == '}') --depth;
      if (body[i] == ',' && depth == 0) {
        alternatives.emplace_back(body.substr(start, i - start));
        start = i + 1;
      }
    }
    if (!alternatives.empty()) {
      alternatives.emplace_back(body.substr(start));
      return alternatives;
    }
    return range(body);
  }

  std::vector<std::string> range(std::string_view body) const {
    const std::size_t dots = body.find("..");
    if (dots == std::string_view::npos) fail("the group {" + std::string(body) + "} has neither ',' nor '..'");
    const std::string_view first = body.substr(0, dots);
    std::string_view last = body.substr(dots + 2), step_text;
    if (const std::size_t more = last.find(".."); more != std::string_view::npos) {
      step_text = last.substr(more + 2);
      last = last.substr(0, more);
    }
    std::int64_t step = 1;
    if (!step_text.empty() && !integer(step_text, step)) fail("the step of {" + std::string(body) + "} is not an integer");
    if (step == 0) fail("the step of {" + std::string(body) + "} is 0");
    const std::uint64_t stride = step < 0 ? 0 - std::uint64_t(step) : std::uint64_t(step);
    std::vector<std::string> out;
    std::int64_t a = 0, b = 0;
    if (integer(first, a) && integer(last, b)) {
      const bool padded = leading_zero(first) || leading_zero(last);
      const std::size_t width = padded ? std::max(digits(first), digits(last)) : 0;
      const std::uint64_t span = a <= b ? std::uint64_t(b) - std::uint64_t(a) : std::uint64_t(a) - std::uint64_t(b);
      if (span / stride >= limit_) fail("more than " + std::to_string(limit_) + " URLs");
      for (std::uint64_t k = 0; k <= span / stride; ++k) {
        const std::int64_t v = a <= b ? a + std::int64_t(k * stride) : a - std::int64_t(k * stride);
        std::string text = std::to_string(v < 0 ? -v : v);
        if (text.size() < width) text.insert(0, width - text.size(), '0');
        out.push_back((v < 0 ? "-" : "") + text);
      }
      return out;
    }
    const auto letter = [](std::string_view t) { return t.size() == 1 && std::isalpha(static_cast<unsigned char>(t[0])); };
    if (letter(first) && letter(last)) {
      const int from = static_cast<unsigned char>(first[0]), to = static_cast<unsigned char>(last[0]);
      const int by = int(std::min<std::uint64_t>(stride, 256));
      for (int c = from; from <= to ? c <= to : c >= to; c += from <= to ? by : -by) {
        out.emplace_back(1, static_cast<char>(c));
      }
      return out;
    }
    fail("the range {" + std::string(body) + "} is neither of integers nor of letters");
  }

  static bool integer(std::string_view s, std::int64_t& v) {
    if (!s.empty() && s[0] == '+') s.remove_prefix(1);
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return !s.empty() && ec == std::errc() && end == s.data() + s.size();
  }
  static std::size_t digits(std::string_view s) { return s.size() - (!s.empty() && (s[0] == '-' || s[0] == '+')); }
  static bool leading_zero(std::string_view s) {
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
    return s.size() > 1 && s[0] == '0';
  }

  std::size_t limit_;
};

}  // namespace

std::vector<std::string> expand_url_list(std::string_view pattern, std::size_t limit) {
  std::vector<std::string> out;
  Expander(limit).expand(pattern, "", out);
  return out;
}

}  // namespace conveyor
