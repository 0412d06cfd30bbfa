// TomlConfig: CLI11's --config files read by a real TOML parser (toml++ from
// Debian's libtomlplusplus-dev), because CLI11 2.1's own reader is an INI
// reader that accepts malformed TOML (a file holding only `[[` loaded as no
// settings at all).
//
//   workers = 8              ->  --workers 8
//   compute-ms = 1.5         ->  --compute-ms 1.5
//   resident = true          ->  --resident
//   [sweep]                  ->  the section named after the subcommand reading
//   workers = [1, 2, 4]          the file is that subcommand's own: --workers 1,2,4
//   [[transforms]]           ->  --transforms "RandomResizedCrop(scale=(0.08, 1), size=224), ..."
//   op = "RandomResizedCrop"     (one table per transform, in order; the
//   size = 224                    other keys are torchvision's parameters)
//   scale = [0.08, 1.0]
//
// Contract.
// - CLI11 2.1 reads a config file only for the top-level app, so the file
//   belongs to the program, and its keys are given to the subcommand being
//   run: a key at the top, or in the table named after that subcommand
//   (`[sweep]`), becomes that subcommand's flag of the same name. Any other
//   table becomes a dotted name (`run.workers` read by sweep), which is
//   reported as an unknown key. Values: strings, integers, floats, booleans,
//   and arrays of those.
// - Malformed TOML throws CLI::ConfigError "line L, column C: <what toml++
//   says>"; an array of tables or a nested array throws naming the key,
//   except `[[transforms]]`: each table is checked by parse_transforms
//   (image/transform_spec.h), and a mistake throws "[[transforms]] table N
//   (line L, column C): <transform>: <what>", naming the key. Giving both
//   `transforms = "..."` and `[[transforms]]` in one table is malformed TOML
//   (toml++ names the key); one at the top and one in the subcommand's table
//   throws "'transforms' is set both at the top and in [run]; keep one".
//   config_error_line() adds the file name.
// - Unknown keys and values of the wrong type are CLI11's to report, naming
//   the key (`--workers: Value x not in range`); config_error_line() words the
//   unknown-key message.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

namespace conveyor::apps {

class TomlConfig final : public CLI::Config {
 public:
  // section: the subcommand whose flags the keys set ("" for a program without
  // subcommands, whose own flags they set); own_table: the table name that
  // means the same ("sweep"; the program's name when section is "").
  // overridden: keys left out of the file because the command line sets what
  // they set (the dataset keys, when a dataset flag is given).
  TomlConfig(std::string section, std::string own_table, std::vector<std::string> overridden = {})
      : section_(std::move(section)), own_table_(std::move(own_table)), overridden_(std::move(overridden)) {}
  std::string to_config(const CLI::App*, bool, bool, std::string) const override;
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;

 private:
  std::string section_, own_table_;
  std::vector<std::string> overridden_;
};

// The most a --config file may hold: 1 MiB, generous for a page of flags.
inline constexpr std::size_t kMaxConfigBytes = std::size_t{1} << 20;

// Why `path` is no config file ("" when it may be one): it does not exist,
// is not a regular file (a FIFO, /dev/zero, a directory), or holds more than
// kMaxConfigBytes. Only stat()s it: nothing is opened or read.
std::string config_file_problem(const std::string& path);

// Gives the top-level app a --config FILE option read by TomlConfig, for the
// subcommand `section` ("" for none), with unknown keys an error. Flags on
// the command line override the file's; the file is checked with
// config_file_problem() as the command line is parsed, before it is read; the dataset counts as one setting:
// `--list L` on the command line replaces the file's `folder = "..."` (argv
// is looked at for --folder, --list and --shards).
void add_config_option(CLI::App& app, const std::string& section, const std::string& own_table, int argc = 0,
                       const char* const* argv = nullptr);

// The --config file app read, or "" when none was given.
std::string config_file(const CLI::App& app);
// The one-line message for a CLI::ConfigError raised while app read its --config
// file: "--config FILE: <what>".
std::string config_error_line(const CLI::App& app, const std::string& section, const CLI::ConfigError& e);

}  // namespace conveyor::apps
