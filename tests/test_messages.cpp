// data/quote_bytes.h (bytes quoted into a message) and data/label.h (a label as text).
#include <string>
#include <string_view>

#include "catch_compat.h"

#include "data/label.h"
#include "data/quote_bytes.h"

using namespace conveyor;
using namespace std::string_literals;

TEST_CASE("quote_bytes: valid UTF-8 reads as written", "[quote_bytes]") {
  CHECK(quote_bytes("caf\xc3\xa9/\xe6\x97\xa5.jpg") == "'caf\xc3\xa9/\xe6\x97\xa5.jpg'");
  CHECK(quote_bytes("\xf0\x9f\x90\x88") == "'\xf0\x9f\x90\x88'");  // four bytes: U+1F408
  CHECK(quote_bytes("") == "''");
  CHECK(quote_bytes("a b\\c'd") == "'a b\\c'd'");  // backslash and quote kept
}

TEST_CASE("quote_bytes: a byte that is not UTF-8 is written as a backslash, x and two hex digits", "[quote_bytes]") {
  CHECK(quote_bytes("a\xff" "b") == "'a\\xffb'");
  CHECK(quote_bytes("caf\xe9") == "'caf\\xe9'");                // Latin-1, not UTF-8
  CHECK(quote_bytes("\xc3") == "'\\xc3'");                      // a sequence cut short
  CHECK(quote_bytes("\xc0\xaf") == "'\\xc0\\xaf'");             // overlong '/'
  CHECK(quote_bytes("\xed\xa0\x80") == "'\\xed\\xa0\\x80'");    // a surrogate
}

TEST_CASE("quote_bytes: control characters are escaped, so the message stays one line", "[quote_bytes]") {
  CHECK(quote_bytes("3\0x"s) == "'3\\x00x'");
  CHECK(quote_bytes("a\nb") == "'a\\nb'");
  CHECK(quote_bytes("a\r\tb") == "'a\\r\\tb'");
  CHECK(quote_bytes("a\x1b[2Jb") == "'a\\x1b[2Jb'");
  CHECK(quote_bytes("\x7f") == "'\\x7f'");
  CHECK(quote_bytes("\xc2\x9b" "2J") == "'\\xc2\\x9b2J'");  // C1 control U+009B (CSI)
  CHECK(quote_bytes("\xc2\xa0") == "'\xc2\xa0'");           // U+00A0 is no control
}

TEST_CASE("quote_bytes: a long value is shortened and its length said", "[quote_bytes]") {
  const std::string exact(kQuoteBytesMax, 'n');
  CHECK(quote_bytes(exact) == "'" + exact + "'");
  const std::string longer(300, 'n');
  CHECK(quote_bytes(longer) == "'" + std::string(kQuoteBytesMax, 'n') + "...' (300 bytes)");
  // Never cut inside a character: 79 ASCII bytes, then a 2-byte one that would end at byte 81.
  const std::string wide = std::string(kQuoteBytesMax - 1, 'n') + "\xc3\xa9" + "tail";
  CHECK(quote_bytes(wide) == "'" + std::string(kQuoteBytesMax - 1, 'n') + "...' (" + std::to_string(wide.size()) + " bytes)");
}

TEST_CASE("printable: the whole text, never shortened, never quoted", "[quote_bytes]") {
  const std::string line = "x.jpg\n" + std::string(200, 'y') + "\xff";
  CHECK(printable(line) == "x.jpg\\n" + std::string(200, 'y') + "\\xff");
  CHECK(printable("plain") == "plain");
}

TEST_CASE("parse_label: decimal digits up to kMaxLabel", "[label]") {
  const auto ok = [](std::string_view t) {
    const ParsedLabel p = parse_label(t);
    return p.status == LabelParse::ok ? p.value : -1;
  };
  CHECK(ok("0") == 0);
  CHECK(ok("17") == 17);
  CHECK(ok("007") == 7);
  CHECK(ok("9223372036854775806") == kMaxLabel);
  for (const std::string_view bad : {"", "-0", "-1", "+3", " 4", "4 ", "1.5", "0x10", "12abc", "x1", "\xef\xbc\x91"}) {
    INFO(std::string(bad));
    CHECK(parse_label(bad).status == LabelParse::not_integer);
  }
  CHECK(parse_label("9223372036854775807").status == LabelParse::out_of_range);
  CHECK(parse_label("99999999999999999999").status == LabelParse::out_of_range);
}

TEST_CASE("label_error: one wording, the label quoted", "[label]") {
  CHECK(label_error("x1", LabelParse::not_integer) == "label 'x1' is not a non-negative decimal integer");
  CHECK(label_error("3\0x"s, LabelParse::not_integer) == "label '3\\x00x' is not a non-negative decimal integer");
  CHECK(label_error("99999999999999999999", LabelParse::out_of_range) ==
        "label '99999999999999999999' is out of range (max 9223372036854775806)");
}
