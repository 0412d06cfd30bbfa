#include "apps/toml_config.h"

#include <charconv>
#include <iterator>
#include <sstream>

#include <toml++/toml.h>

namespace conveyor::apps {
namespace {

[[noreturn]] void fail(const std::string& what) { throw CLI::ConfigError(what); }

std::string where(const toml::source_region& r) {
  return "line " + std::to_string(r.begin.line) + ", column " + std::to_string(r.begin.column);
}

// A scalar as the text a flag would be given on the command line.
std::string scalar_text(const toml::node& v, const std::string& key) {
  if (auto s = v.value_exact<std::string>()) return *s;
  if (auto b = v.value_exact<bool>()) return *b ? "true" : "false";
  if (auto i = v.value_exact<std::int64_t>()) return std::to_string(*i);
  if (auto d = v.value_exact<double>()) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, *d);  // shortest text that reads back the same
    return std::string(buf, r.ptr);
  }
  fail(where(v.source()) + ": '" + key + "': a date or time is not a flag value");
}

// Items for table's keys; at the top (top == true) the table named own_table is
// the top itself, and parents starts as the subcommand's section.
void collect(const toml::table& table, std::vector<std::string>& parents, const std::string& own_table, bool top,
             std::vector<CLI::ConfigItem>& out) {
  for (auto&& [k, v] : table) {
    const std::string key(k.str());
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
    if (const toml::array* a = v.as_array()) {
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

}  // namespace

std::string TomlConfig::to_config(const CLI::App*, bool, bool, std::string) const {
  return "";  // conveyor never writes config files
}

std::vector<CLI::ConfigItem> TomlConfig::from_config(std::istream& input) const {
  const std::string text{std::istreambuf_iterator<char>(input), std::istreambuf_iterator<char>()};
  if (input.bad()) fail("cannot read it");
  toml::table root;
  try {
    root = toml::parse(text);
  } catch (const toml::parse_error& e) {
    fail(where(e.source()) + ": " + std::string(e.description()));
  }
  std::vector<CLI::ConfigItem> found;  // not `items`: CLI::Config has a member of that name
  std::vector<std::string> parents;
  if (!section_.empty()) parents.push_back(section_);
  collect(root, parents, own_table_, true, found);
  return found;
}

void add_config_option(CLI::App& app, const std::string& section, const std::string& own_table) {
  app.set_config("--config", "", "TOML file of flags (`workers = 8`); flags on the command line override it")
      ->check(CLI::ExistingFile);
  app.config_formatter(std::make_shared<TomlConfig>(section, own_table));
  app.allow_config_extras(CLI::config_extras_mode::error);
}

std::string config_error_line(const CLI::App& app, const std::string& section, const CLI::ConfigError& e) {
  std::string file;
  if (const CLI::Option* opt = app.get_config_ptr(); opt && opt->count() > 0) file = opt->as<std::string>();
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
