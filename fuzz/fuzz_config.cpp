// libFuzzer target: config loading, as `conveyor run --config FILE` does it:
// toml++ through apps/toml_config.h over every run flag, then the checks the command makes
// before it starts (ranges, names, --rank below --world-size, the normalize
// flags, the pipeline Config's validate()). Bad input must end in one of the
// errors the command turns into a one-line usage message.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "apps/cli.h"
#include "apps/toml_config.h"
#include "fuzz/input_file.h"

using namespace conveyor;
using namespace conveyor::apps;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path& file = fuzz::input_file(data, size, ".toml");
  CLI::App app("fuzz");
  Options o;
  add_pipeline_flags(app, o);
  add_run_flags(app, o);
  add_config_option(app, "", "run");  // the command's reader: toml++, unknown keys an error
  const std::string path = file.string();
  const char* argv[] = {"conveyor", "--config", path.c_str()};
  try {
    app.parse(3, argv);
    check_normalize(o);
    check_shard(o);
    Config cfg = pipeline_config(o);
    cfg.sample_bytes = 3;
    cfg.validate();
  } catch (const CLI::Error&) {
  } catch (const UsageError&) {
  } catch (const ConfigError&) {
  }
  return 0;
}
