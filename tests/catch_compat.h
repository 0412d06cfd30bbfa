// The tests' one include of Catch2, for Catch2 2.x (<catch2/catch.hpp>, Debian 12)
// and 3.x (<catch2/catch_all.hpp>, Ubuntu 24.04 and later). tests/CMakeLists.txt
// defines CONVEYOR_CATCH2_MAJOR from the Catch2 it found; the tests are written
// against v2's names, which v3 spells differently:
//   Approx             v3: Catch::Approx
//   Catch::Contains,   v3: Catch::Matchers::ContainsSubstring
//   Catch::Matchers::Contains (for strings)
//   Catch::StartsWith  v3: Catch::Matchers::StartsWith (EndsWith likewise)
// A program with its own main defines CATCH_CONFIG_RUNNER before including this
// (v2 then compiles Catch2's implementation into it; v3 has Catch::Session in
// its library, Catch2::Catch2).
#pragma once

#if !defined(CONVEYOR_CATCH2_MAJOR)
#error "CONVEYOR_CATCH2_MAJOR is not defined: tests/CMakeLists.txt defines it from find_package(Catch2)"
#elif CONVEYOR_CATCH2_MAJOR >= 3
#include <catch2/catch_all.hpp>
#include <string>

using Catch::Approx;

// v2's Catch::Matchers::Contains(string) is v3's ContainsSubstring; v3's own
// Contains(T&&) matches a range's element, and as a template it would win over a
// plain Contains(const std::string&) for every argument but a const string. So
// one non-template overload per kind of argument, each an exact match (where a
// template and a non-template tie, the non-template wins).
namespace Catch::Matchers {
inline StringContainsMatcher Contains(const char* text, CaseSensitive cs = CaseSensitive::Yes) {
  return ContainsSubstring(text, cs);
}
inline StringContainsMatcher Contains(const std::string& text, CaseSensitive cs = CaseSensitive::Yes) {
  return ContainsSubstring(text, cs);
}
inline StringContainsMatcher Contains(std::string& text, CaseSensitive cs = CaseSensitive::Yes) {
  return ContainsSubstring(text, cs);
}
inline StringContainsMatcher Contains(std::string&& text, CaseSensitive cs = CaseSensitive::Yes) {
  return ContainsSubstring(text, cs);
}
}  // namespace Catch::Matchers

namespace Catch {
using Matchers::Contains;
using Matchers::EndsWith;
using Matchers::StartsWith;
}  // namespace Catch
#else
#include <catch2/catch.hpp>
#endif
