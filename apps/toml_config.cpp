#include "apps/toml_config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <set>
#include <sstream>
#include <string_view>

// Debian 12's toml++ 3.3.0 asserts, where NDEBUG is not defined (a Debug
// build), on input its parser goes on to refuse: a file of "[[" and a newline
// aborts in parse_key instead of failing with "expected bare key starting
// character". A hostile config gets its one-line error in every build type,
// so its assertions are off here as they are under NDEBUG.
#define TOML_ASSERT(expr) static_assert(true)
#include <toml++/toml.h>

#include "image/transform_spec.h"

namespace conveyor::apps {
namespace {

[[noreturn]] void fail(const std::string& what) { throw CLI::ConfigError(what); }

std::string where(const toml::source_region& r) {
  return "line " + std::to_string(r.begin.line) + ", column " + std::to_string(r.begin.column);
}

// A scalar as the text a flag would be given on the command line.
std::string scalar_text(const toml::node& v, const std::string& key) {
  if (auto s = v.value_exact<std::string>()) {
    // A C string ends at a NUL: every use of the value would see another one.
    if (s->find('\0') != std::string::npos) fail(where(v.source()) + ": '" + key + "': a string holding a NUL byte (\\u0000)");
    return *s;
  }
  if (auto b = v.value_exact<bool>()) return *b ? "true" : "false";
  if (auto i = v.value_exact<std::int64_t>()) return std::to_string(*i);
  if (auto d = v.value_exact<double>()) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, *d);  // shortest text that reads back the same
    std::string text(buf, r.ptr);
    // A float stays one in its text: 4.0 and 1e3 print as "4" and "1000",
    // which an integer flag (batch, epochs, seed) would take; "4.0" it refuses.
    if (std::isfinite(*d) && text.find_first_of(".e") == std::string::npos) text += ".0";
    return text;
  }
  fail(where(v.source()) + ": '" + key + "': a date or time is not a flag value");
}

bool is_name(std::string_view s) {
  return !s.empty() && (std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_') &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// A number as the transform list's text: the shortest that reads back the same.
std::string number_text(const toml::node& v) {
  if (auto i = v.value_exact<std::int64_t>()) return std::to_string(*i);
  const double d = *v.value_exact<double>();
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d);
  return std::string(buf, r.ptr);
}

// One [[transforms]] value as the transform list's text: a number, a boolean
// (True/False) or an array of numbers (a tuple). `at` names the table.
std::string argument_text(const toml::node& v, const std::string& at, const std::string& key) {
  const std::string bad = at + ": '" + key + "' must be a number, true/false or an array of numbers";
  if (auto b = v.value_exact<bool>()) return *b ? "True" : "False";
  if (v.is_integer() || v.is_floating_point()) return number_text(v);
  const toml::array* a = v.as_array();
  if (!a || a->empty()) fail(bad);
  std::string t = "(";
  for (const toml::node& e : *a) {
    if (!e.is_integer() && !e.is_floating_point()) fail(bad);
    if (t.size() > 1) t += ", ";
    t += number_text(e);
  }
  return t + (a->size() == 1 ? ",)" : ")");
}

// [[transforms]] tables (op = "RandomResizedCrop", then torchvision's
// parameters by name) as the text `transforms = "..."` holds. Each table is
// read by parse_transforms on its own, the one parser of the parameters, so a
// mistake names the table's index (from 1) and line and the key; its values
// are checked too (check_transform), the chain as a whole by Augment later.
std::string transforms_text(const toml::array& tables) {
  std::string list;
  std::size_t index = 0;
  for (const toml::node& n : tables) {
    std::string at = "[[transforms]] table ";
    at += std::to_string(++index);
    at += " (" + where(n.source()) + ")";
    const toml::table* t = n.as_table();  // the caller passes an array of tables
    std::string op, args;
    for (auto&& [k, v] : *t) {
      const std::string key(k.str());
      if (key == "op") {
        const auto name = v.value_exact<std::string>();
        if (!name || !is_name(*name)) fail(at + ": 'op' must be a transform's name as a string (op = \"RandomResizedCrop\")");
        op = *name;
      } else if (!is_name(key)) {
        fail(at + ": '" + key + "' is not a parameter name");
      } else {
        if (!args.empty()) args += ", ";
        args += key;
        args += '=';
        args += argument_text(v, at, key);
      }
    }
    if (op.empty()) fail(at + ": 'op' is missing (op = \"RandomResizedCrop\", torchvision's class name)");
    const std::string one = op + "(" + args + ")";
    try {
      for (const Transform& parsed : parse_transforms(one)) check_transform(parsed);
    } catch (const AugmentError& e) {
      std::string what = e.what();
      if (what.rfind("transforms: ", 0) == 0) what.erase(0, 12);
      fail(at + ": " + what);
    }
    if (!list.empty()) list += ", ";
    list += one;
  }
  return list;
}

// Items for table's keys; at the top (top == true) the table named own_table is
// the top itself, and parents starts as the subcommand's section.
void collect(const toml::table& table, std::vector<std::string>& parents, const std::string& own_table, bool top,
             std::vector<CLI::ConfigItem>& out) {
  for (auto&& [k, v] : table) {
    const std::string key(k.str());
    if (key.find('\0') != std::string::npos) fail(where(k.source()) + ": a key holding a NUL byte (\\u0000)");
    if (const toml::table* sub = v.as_table()) {
      const bool own = top && key == own_table;
      if (!own) parents.push_back(key);
      collect(*sub, parents, own_table, false, out);
      if (!own) parents.pop_back();
      continue;
    }
    CLI::ConfigItem item;
    item.parents = parents;
    item.name = key;
    const toml::array* a = v.as_array();
    if (a && key == "transforms" && a->is_array_of_tables()) {
      item.inputs.push_back(transforms_text(*a));
    } else if (a) {
      for (const toml::node& e : *a) {
        if (e.is_table() || e.is_array()) {
          fail(where(e.source()) + ": '" + key + "': an array of tables or arrays is not a flag value");
        }
        item.inputs.push_back(scalar_text(e, key));
      }
    } else {
      item.inputs.push_back(scalar_text(v, key));
    }
    out.push_back(std::move(item));
  }
}

// The file as pure ASCII, with the same meaning, before toml++ sees it.
// Debian 12's toml++ 3.3.0 reaches __builtin_unreachable() -- undefined
// behaviour -- when it asks whether some non-ASCII characters are whitespace
// (U+00A1..U+0499, U+2D4E..U+3147, U+FB06..U+FEFE: fuzz_config found it with
// U+FEDF, inside a string in a bad place too), so it is given none: comments
// become spaces, each non-ASCII character of a "basic" string becomes its
// \uXXXX or \UXXXXXXXX escape, and one anywhere else (a 'literal' string, a
// bare key, which TOML keeps ASCII) is refused naming the line. Invalid UTF-8
// is refused too. Whatever this scanner takes for a string, its output holds
// no byte above 0x7F.
std::string ascii_toml(std::string_view t) {
  std::string out;
  out.reserve(t.size());
  std::size_t line = 1, i = 0;
  const std::size_t n = t.size();
  const auto refuse = [&](const char* what) { fail("line " + std::to_string(line) + ": " + what); };
  // The code point of the UTF-8 sequence at t[i], advancing i; refuses invalid UTF-8.
  const auto decode = [&]() -> char32_t {
    const auto b0 = static_cast<unsigned char>(t[i]);
    const int len = b0 >= 0xF0 && b0 <= 0xF4 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC2 && b0 <= 0xDF ? 2 : 0;
    if (len == 0 || i + std::size_t(len) > n) refuse("invalid UTF-8");
    char32_t cp = b0 & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const auto bk = static_cast<unsigned char>(t[i + std::size_t(k)]);
      if ((bk & 0xC0) != 0x80) refuse("invalid UTF-8");
      cp = (cp << 6) | (bk & 0x3F);
    }
    const char32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) refuse("invalid UTF-8");
    i += std::size_t(len);
    return cp;
  };
  while (i < n) {
    const char c = t[i];
    if (c == '#') {  // a comment: its text never matters
      while (i < n && t[i] != '\n') {
        out += ' ';
        ++i;
      }
    } else if (c == '"' || c == '\'') {
      const bool triple = t.substr(i, 3) == std::string(3, c);
      out.append(triple ? 3 : 1, c);
      i += triple ? 3 : 1;
      while (i < n) {
        const char d = t[i];
        if (c == '"' && d == '\\') {  // an escape: the backslash and the (ASCII) character after it
          out += d;
          ++i;
          if (i < n && static_cast<unsigned char>(t[i]) >= 0x80) refuse("a non-ASCII character after a backslash");
          if (i < n) {
            if (t[i] == '\n') ++line;
            out += t[i++];
          }
        } else if (triple ? t.substr(i, 3) == std::string(3, c) : d == c) {
          std::size_t close = triple ? 3 : 1;
          for (int extra = 0; triple && extra < 2 && i + close < n && t[i + close] == c; ++extra) ++close;
          out.append(t.substr(i, close));
          i += close;
          break;
        } else if (static_cast<unsigned char>(d) >= 0x80) {
          if (c == '\'') refuse("a non-ASCII character in a 'literal' string (write it in a \"basic\" string)");
          const char32_t cp = decode();
          char esc[12];
          std::snprintf(esc, sizeof esc, cp > 0xFFFF ? "\\U%08X" : "\\u%04X", unsigned(cp));
          out += esc;
        } else {
          if (d == '\n') {
            ++line;
            if (!triple) break;  // an unterminated string: toml++ reports it
          }
          out += d;
          ++i;
        }
      }
    } else if (static_cast<unsigned char>(c) >= 0x80) {
      refuse("a non-ASCII character outside a string or comment");
    } else {
      if (c == '\n') ++line;
      out += c;
      ++i;
    }
  }
  return out;
}

}  // namespace

std::string config_file_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return path + ": " + std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return path + ": a directory, not a config file";
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) ? "a character device"
                       : S_ISBLK(st.st_mode) ? "a block device" : S_ISSOCK(st.st_mode) ? "a socket" : "not a file";
    return path + ": not a regular file (" + kind + ")";
  }
  if (std::uintmax_t(st.st_size) > kMaxConfigBytes) {
    return path + ": " + std::to_string(st.st_size) + " bytes, over the " + std::to_string(kMaxConfigBytes >> 20) +
           " MiB a config file may hold";
  }
  return "";
}

std::string TomlConfig::to_config(const CLI::App*, bool, bool, std::string) const {
  return "";  // conveyor never writes config files
}

std::vector<CLI::ConfigItem> TomlConfig::from_config(std::istream& input) const {
  // At most one byte past the limit: a file that grew after its check is refused too.
  std::string text(kMaxConfigBytes + 1, '\0');
  input.read(text.data(), std::streamsize(text.size()));
  if (input.bad()) fail("cannot read it");
  text.resize(std::size_t(input.gcount()));
  if (text.size() > kMaxConfigBytes) fail("over the " + std::to_string(kMaxConfigBytes >> 20) + " MiB a config file may hold");
  const std::string ascii = ascii_toml(text);
  toml::table root;
  try {
    root = toml::parse(ascii);
  } catch (const toml::parse_error& e) {
    fail(where(e.source()) + ": " + std::string(e.description()));
  }
  std::vector<CLI::ConfigItem> found;  // not `items`: CLI::Config has a member of that name
  std::vector<std::string> parents;
  if (!section_.empty()) parents.push_back(section_);
  collect(root, parents, own_table_, true, found);
  // A key at the top and again in the subcommand's own table mean the same
  // flag; CLI11 would keep the first without a word. (TOML itself refuses a
  // key twice in one table.)
  std::set<std::string> seen;
  for (const CLI::ConfigItem& item : found) {
    if (!seen.insert(item.fullname()).second) {
      fail("'" + item.name + "' is set both at the top and in [" + own_table_ + "]; keep one");
    }
  }
  std::erase_if(found, [&](const CLI::ConfigItem& item) {
    return std::find(overridden_.begin(), overridden_.end(), item.name) != overridden_.end();
  });
  return found;
}

void add_config_option(CLI::App& app, const std::string& section, const std::string& own_table, int argc,
                       const char* const* argv) {
  // Checked as the command line is parsed, before CLI11 opens the file: a
  // FIFO would block the open, /dev/zero or a huge file fill memory.
  app.set_config("--config", "", "TOML file of flags (`workers = 8`); flags on the command line override it")
      ->check(CLI::Validator(config_file_problem, "FILE"))
      ->trigger_on_parse();
  // CLI11 lets a flag given on the command line win over the file's key of the
  // same name; the dataset's three keys exclude one another, so one given on
  // the command line replaces all three of the file's.
  std::vector<std::string> overridden;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    for (const std::string_view flag : {"--folder", "--list", "--shards"}) {
      if (a == flag || (a.starts_with(flag) && a.size() > flag.size() && a[flag.size()] == '=')) {
        overridden = {"folder", "list", "shards"};
      }
    }
  }
  app.config_formatter(std::make_shared<TomlConfig>(section, own_table, std::move(overridden)));
  app.allow_config_extras(CLI::config_extras_mode::error);
}

std::string config_file(const CLI::App& app) {
  const CLI::Option* opt = app.get_config_ptr();
  return opt && opt->count() > 0 ? opt->as<std::string>() : std::string();
}

std::string config_error_line(const CLI::App& app, const std::string& section, const CLI::ConfigError& e) {
  const std::string file = config_file(app);
  std::string what = e.what();
  // CLI11 says "INI was not able to parse [SECTION.]KEY" of an unknown key: it is TOML, and the key is no flag.
  const std::string ini = "INI was not able to parse ";
  if (what.rfind(ini, 0) == 0) {
    std::string key = what.substr(ini.size());
    if (!section.empty() && key.rfind(section + ".", 0) == 0) key = key.substr(section.size() + 1);
    what = "'" + key + "' is not a flag of " + (section.empty() ? app.get_name() : section);
  }
  return "--config " + (file.empty() ? std::string("FILE") : file) + ": " + what;
}

}  // namespace conveyor::apps
