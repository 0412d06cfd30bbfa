#include "apps/cli.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <tuple>

#include "apps/toml_config.h"
#include "data/atomic_file.h"
#include "data/file_system.h"
#include "data/quote_bytes.h"
#include "data/remote/remote_shards.h"
#include "data/files/image_folder.h"
#include "image/default_dataset.h"
#include "source/source.h"

namespace conveyor::apps {

std::size_t env_size(std::initializer_list<const char*> names, std::size_t fallback, std::size_t max) {
  for (const char* n : names) {
    if (const char* v = std::getenv(n); v && *v) {
      // strtoull alone would take "-1" (and wrap it) and leading spaces: digits only.
      const std::string text(v);
      const bool digits = text.find_first_not_of("0123456789") == std::string::npos;
      errno = 0;
      const unsigned long long x = digits ? std::strtoull(v, nullptr, 10) : 0;
      if (!digits || errno == ERANGE || x > max) {
        throw UsageError(std::string("environment: ") + n + "='" + text + "' is not an integer from 0 to " +
                         std::to_string(max));
      }
      return std::size_t(x);
    }
  }
  return fallback;
}

namespace {
// Set from the handler, which may run on any thread: a lock-free atomic.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);
void on_signal(int sig) { g_signal.store(sig); }
}  // namespace

void catch_interrupts() {
  for (int sig : {SIGINT, SIGTERM, SIGPIPE}) {
    struct sigaction old {};
    sigaction(sig, nullptr, &old);
    if (old.sa_handler == SIG_IGN) continue;  // e.g. a background job: keep ignoring it
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    // Reads and writes in flight carry on. A second SIGINT or SIGTERM ends the
    // program at once; SIGPIPE stays caught, since every later write to the
    // closed pipe raises it again while the run stops and writes its files.
    sa.sa_flags = SA_RESTART | (sig == SIGPIPE ? 0 : SA_RESETHAND);
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

int interrupt_signal() { return g_signal.load(); }

std::string lower_case(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

const char* signal_word(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGPIPE: return "SIGPIPE (the reader of standard output went away)";
    default: return "a signal";
  }
}

Dataset shards_of_rank(const Dataset& d, const Options& o) {
  try {
    return d.rank_subset(o.rank, o.world_size, Config{}.shard_policy);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--rank-by-shard: ") + e.what());
  }
}

Dataset open_dataset(const Options& o, Announce announce, Remote remote) {
  if (int(!o.list.empty()) + int(!o.folder.empty()) + int(!o.shards.empty()) > 1) {
    throw UsageError("--list, --folder, --shards: give one dataset, not several");
  }
  DatasetSpec spec{.unlisted = o.unlisted_shards, .rank_by_shard = o.rank_by_shard, .rank_by_shard_setting = "--rank-by-shard: "};
  spec.remote.cache_dir = o.cache_dir;
  if (o.cache_gb) spec.remote.cache_bytes = cache_gb_bytes(*o.cache_gb);
  spec.remote.stream = remote == Remote::stream && !o.download_first;
  for (const auto& [path, kind, setting] : {std::tuple{&o.shards, DatasetSpec::Kind::shards, "--shards "},
                                            std::tuple{&o.list, DatasetSpec::Kind::list, "--list "},
                                            std::tuple{&o.folder, DatasetSpec::Kind::folder, "--folder "}}) {
    if (path->empty()) continue;
    spec.kind = kind;
    spec.path = *path;
    spec.setting = setting;
  }
  if (!spec.path.empty()) {
    Config ranks;  // the rank's shards are taken here; pipeline_config runs the pipeline as rank 0 of 1 then
    ranks.rank = o.rank;
    ranks.world_size = o.world_size;
    try {
      return conveyor::open_dataset(spec, ranks);
    } catch (const DatasetError& e) {
      throw UsageError(e.what());
    }
  }
  bool made = false;
  const auto dir = ensure_default_dataset({}, &made);
  if (announce == Announce::always || made) std::fprintf(stderr, "%s the embedded default dataset: %s\n", made ? "made" : "using", dir.c_str());
  return dataset_from_folder(dir);
}

std::size_t class_count(const Dataset& d) {
  if (!d.classes().empty()) return d.classes().size();
  std::vector<std::int64_t> labels(d.size());
  for (std::size_t i = 0; i < d.size(); ++i) labels[i] = d.label(i);
  std::sort(labels.begin(), labels.end());
  return std::size_t(std::unique(labels.begin(), labels.end()) - labels.begin());
}

double default_max_memory_mb() { return default_memory_limit_mb(); }

double memory_limit_mb(const Options& o) { return o.max_memory_mb > 0 ? o.max_memory_mb : default_max_memory_mb(); }

void check_memory(const Options& o, const Config& cfg, std::size_t dataset_size, const TransferConfig& tc,
                  const Device& device) {
  static const MemorySettingNames kNames{"--batch", " (--crop)", "--workers", "--host-queue", "--device-queue",
                                         "--max-memory-mb"};
  const std::string refusal = memory_refusal(estimate_memory(cfg, dataset_size, tc, device), cfg, device, o.max_memory_mb, kNames);
  if (!refusal.empty()) throw UsageError(refusal);
}

void strict_values(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string full = opt->get_type_name();  // "UINT", or "UINT:INT in [1 - 16]" with a range check
    const std::string type = full.substr(0, full.find(':'));
    // A flag (--resident) takes no value on the command line, but one from a
    // --config file (`resident = 2`) or as --resident=V, read by CLI11's flag
    // rules: 2 was on, -1 and 0.5 off, without a word.
    const bool is_flag = full.empty() && opt->get_expected_max() == 0;
    if (type == "BOOLEAN" || is_flag) {
      // CLI11 reads any integer as a boolean (-1 as false) and "" as true.
      opt->transform(CLI::Validator(
          [](std::string& value) -> std::string {
            static constexpr std::string_view kWords[] = {"1", "0", "true", "false", "on", "off", "yes", "no"};
            const std::string lower = lower_case(value);
            for (std::string_view w : kWords) {
              if (lower == w) return {};
            }
            return value + ": expected on or off (true/false, yes/no, 1/0)";
          },
          "", "ON_OFF"));
      continue;
    }
    if (type == "TEXT") {
      // A path or a name: "" (an unset variable, --resume "$CKPT") once read as
      // "not given", so a run meant to resume started afresh over its checkpoint.
      opt->transform(CLI::Validator(
          [](std::string& value) -> std::string { return value.empty() ? std::string("an empty value") : std::string(); },
          "", "NON_EMPTY"));
      continue;
    }
    if (type == "FLOAT") {
      // A range check lets NaN through (every comparison with it is false).
      opt->transform(CLI::Validator(
          [](std::string& value) -> std::string {
            char* end = nullptr;
            const double x = std::strtod(value.c_str(), &end);
            if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(x)) {
              return value + ": not a finite number";
            }
            return {};
          },
          "", "FINITE"));
      continue;
    }
    if (type != "INT" && type != "UINT") continue;
    const bool is_signed = type == "INT";
    // A transform runs before the option's other checks (its range), and hands
    // them the number as canonical decimal: "08" is 8, "+3" is 3.
    opt->transform(CLI::Validator(
        [is_signed](std::string& value) -> std::string {
          std::string_view digits = value;
          const bool negative = is_signed && !digits.empty() && digits.front() == '-';
          if (negative || (!digits.empty() && digits.front() == '+')) digits.remove_prefix(1);
          if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
            return value + ": not a decimal integer" + (is_signed ? "" : " of 0 or more");
          }
          while (digits.size() > 1 && digits.front() == '0') digits.remove_prefix(1);
          const std::string canonical = (negative ? "-" : "") + std::string(digits);
          std::uint64_t u = 0;
          std::int64_t i = 0;
          const char* last = canonical.data() + canonical.size();
          const auto [end, ec] = is_signed ? std::from_chars(canonical.data(), last, i)
                                           : std::from_chars(canonical.data(), last, u);
          if (ec != std::errc() || end != last) return value + ": out of range";
          value = canonical;
          return {};
        },
        "", "DECIMAL"));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) strict_values(*sub);
}

void refuse_empty_list_elements(const CLI::App& sub, int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") return;  // what follows is no flag
    if (!arg.starts_with("--")) continue;
    const std::size_t eq = arg.find('=');
    const std::string name(arg.substr(0, eq));
    const CLI::Option* opt = sub.get_option_no_throw(name);
    if (!opt || opt->get_delimiter() == '\0') continue;
    const char d = opt->get_delimiter();
    // "--workers=V" holds its value; "--workers V1 V2" takes the words that
    // follow up to the next flag.
    std::vector<std::string_view> values;
    if (eq != std::string_view::npos) {
      values.push_back(arg.substr(eq + 1));
    } else {
      for (int j = i + 1; j < argc && !std::string_view(argv[j]).starts_with("-"); ++j) values.push_back(argv[j]);
    }
    const std::string doubled{d, d};
    for (const std::string_view v : values) {
      if (!v.empty() && (v.front() == d || v.back() == d || v.find(doubled) != std::string_view::npos)) {
        throw UsageError(name + " " + printable(v) + ": an empty element in the list");
      }
    }
  }
}

void check_writable(const std::string& flag, const std::string& file) {
  if (file.empty()) return;
  // Create it only if it is new (and remove it again), else open the existing
  // file without truncating it: nothing is lost when the check passes.
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd >= 0) {  // created here: leave nothing behind
    ::close(fd);
    ::unlink(file.c_str());
    return;
  }
  if (errno == EEXIST) {
    const int existing = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NONBLOCK);
    if (existing >= 0) {
      ::close(existing);
      return;
    }
  }
  throw UsageError(flag + " " + file + ": cannot write there: " + std::strerror(errno));
}

void write_file(const std::string& flag, const std::string& file, const std::string& text) {
  const std::span bytes{reinterpret_cast<const unsigned char*>(text.data()), text.size()};
  if (const int err = write_file_atomically(file, bytes); err != 0) {
    throw std::runtime_error(flag + ": cannot write " + file + ": " + std::strerror(err));
  }
}

int exit_status(const char* program, const CLI::App& app, const std::string& section) {
  std::fflush(stdout);
  wipe_progress_line();
  const auto say = [program](const std::string& line, int status) {
    const std::string one = printable(line);
    std::fprintf(stderr, "%s: %s\n", program, one.c_str());
    return status;
  };
  try {
    throw;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);  // the version on stdout, status 0
  } catch (const CLI::ConfigError& e) {
    return say(config_error_line(app, section, e), 2);
  } catch (const CLI::ParseError& e) {
    return say(e.what(), 2);
  } catch (const UsageError& e) {
    return say(e.what(), 2);
  } catch (const std::exception& e) {
    return say(e.what(), 1);
  }
}

void wipe_progress_line(std::size_t width) {
  if (::isatty(STDERR_FILENO)) std::fprintf(stderr, "\r%*s\r", int(width), "");
}

namespace {
bool g_stdout_closed = false;  // set once, before any thread starts
}  // namespace

void hold_standard_fds() {
  for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    // open() returns the lowest free descriptor: this one.
    const int held = ::open("/dev/null", fd == STDIN_FILENO ? O_RDONLY : O_WRONLY);
    if (held != fd && held >= 0) ::close(held);
    if (fd == STDOUT_FILENO) g_stdout_closed = true;
  }
}

int finish_stdout(const char* program, int status) {
  if (g_stdout_closed) {
    std::fprintf(stderr, "%s: cannot write standard output: it is closed\n", program);
    return status != 0 ? status : 1;
  }
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return status;
  // `| head`: the reader left, as it meant to. Also when the pipe closed only
  // as the last lines were written, after the run's own checks for a signal.
  if (status == 128 + SIGPIPE || errno == EPIPE || interrupt_signal() == SIGPIPE) {
    return status != 0 ? status : 128 + SIGPIPE;
  }
  std::fprintf(stderr, "%s: cannot write standard output: %s\n", program, std::strerror(errno));
  return status != 0 ? status : 1;
}

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

long current_rss_kib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * (::sysconf(_SC_PAGESIZE) / 1024);
}

double consumer_idle(const PipelineStats& s) {
  const StageStats* consumer = s.stage("consumer");
  return consumer ? consumer->starved_fraction() : 0;
}

std::string gnuplot_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

namespace {
// s as one word for /bin/sh: single quotes, each ' written as '\''.
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

bool gnuplot(const std::string& output, const std::string& script_body, const std::string& data) {
  static const bool installed = std::system("command -v gnuplot >/dev/null 2>&1") == 0;  // asked once
  if (!installed) {
    static bool said = false;  // once a run, not after every epoch's plot
    if (!said) std::printf("note: gnuplot is not installed (apt-get install gnuplot-nox); %s has the figures\n", data.c_str());
    said = true;
    return false;
  }
  const std::string script = output + ".gp";
  const bool svg = lower_case(std::filesystem::path(output).extension().string()) == ".svg";
  write_file("--plot", script,
                  std::string("set terminal ") + (svg ? "svg" : "pngcairo") + " size 800,500\nset output " +
                      gnuplot_quote(output) + "\nset datafile separator ','\n" + script_body);
  const int rc = std::system(("gnuplot " + shell_quote(script) + " 2>&1").c_str());
  if (rc != 0) throw std::runtime_error("--plot: gnuplot could not draw " + output + " (script: " + script + ")");
  std::printf("wrote %s\n", output.c_str());
  return true;
}

}  // namespace conveyor::apps
