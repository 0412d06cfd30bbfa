#include "apps/cli.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "stages/default_dataset.h"

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
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    sigaction(sig, nullptr, &old);
    if (old.sa_handler == SIG_IGN) continue;  // e.g. a background job: keep ignoring it
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;  // reads and writes in flight carry on
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

int interrupt_signal() { return g_signal.load(); }

namespace {
// Adds a flag unless the subcommand already has one of that name (sweep's
// axes), which then keeps its own meaning; returns whichever it has.
template <typename T>
CLI::Option* add_or_keep(CLI::App& app, const std::string& name, T& value, const std::string& help) {
  if (CLI::Option* existing = app.get_option_no_throw(name)) return existing;
  return app.add_option(name, value, help);
}
}  // namespace

void add_pipeline_flags(CLI::App& app, Options& o) {
  const auto option = [&](const std::string& name, auto& value, const std::string& help) {
    return add_or_keep(app, name, value, help);
  };
  const auto range = [](std::size_t lo, std::size_t hi) { return CLI::Range(lo, hi); };
  option("--list", o.list, "dataset list file: `path label` per line")->check(CLI::ExistingFile);
  option("--folder", o.folder, "dataset folder: root/<class>/<image> (ImageFolder)")->check(CLI::ExistingDirectory);
  option("--workers", o.workers, "decode/augment worker threads (default: the core count)")
      ->check(range(1, Config::kMaxWorkers));
  option("--batch", o.batch, "samples per batch")->check(range(1, Config::kMaxBatchSize));
  option("--host-queue", o.host_queue, "finished batches waiting for the transfer thread")->check(range(1, 4096));
  option("--device-queue", o.device_queue, "transferred batches waiting for the consumer")->check(range(1, 4096));
  option("--wait-yields", o.wait_yields, "times a waiting thread yields its core before it sleeps (0: sleep at once)")
      ->check(range(0, Config::kMaxWaitYields));
  option("--epochs", o.epochs, "epochs to run")->check(range(1, std::size_t(1) << 30));
  option("--seed", o.seed, "seed of the order and of every augmentation");
  option("--crop", o.crop, "output size of RandomResizedCrop (default 0: 64 on the embedded dataset, else 224)")
      ->check(CLI::Range(1, 16384));
  option("--augment", o.augment,
         "rrc: RandomResizedCrop + flip | crop: Resize + RandomCrop (padding 4) + flip | center: Resize + CenterCrop")
      ->check(CLI::IsMember({"rrc", "crop", "center"}));
  option("--device", o.device, "auto | cuda | host")->check(CLI::IsMember({"auto", "cuda", "host"}));
  option("--link-gbps", o.link_gbps, "host backend: simulated host-to-device link, GB/s (0: as fast as memcpy)")
      ->check(CLI::Range(0.0, 1e6));
  option("--host-transfer", o.host_transfer,
         "host backend: copy (each batch into a separate buffer, as a GPU copy would) or handover "
         "(the consumer gets the worker's buffer: CPU training)")
      ->check(CLI::IsMember({"copy", "handover"}));
  option("--on-error", o.on_error, "a bad image: fail (stop) or skip (count and list it)")
      ->check(CLI::IsMember({"fail", "skip"}));
  option("--rank", o.rank, "this process's shard (default: $RANK or $OMPI_COMM_WORLD_RANK, else 0)")
      ->check(range(0, (std::size_t(1) << 20) - 1));
  option("--world-size", o.world_size, "number of shards (default: $WORLD_SIZE or $OMPI_COMM_WORLD_SIZE, else 1)")
      ->check(range(1, std::size_t(1) << 20));
  option("--max-memory-mb", o.max_memory_mb,
         "the most the batch pools (host and device) may take, MiB (0: a quarter of physical memory, " +
             std::to_string(std::size_t(default_max_memory_mb())) + " here)")
      ->check(CLI::Range(0.0, 1e12));
}

void add_run_flags(CLI::App& app, Options& o) {
  app.add_flag("--resident", o.resident,
               "decode every image once (Resize + CenterCrop), upload, and batch on the device by gather");
  add_or_keep(app, "--budget-mb", o.budget_mb, "--resident: device memory the decoded set may take, MiB")
      ->check(CLI::Range(1.0, 1e9));
  add_or_keep(app, "--normalize", o.normalize, "normalized output (CHW), where --normalize-in says: off (uint8 HWC) | float32 | float16 | bfloat16")
      ->check(CLI::IsMember({"off", "float32", "float16", "bfloat16"}));
  add_or_keep(app, "--normalize-in", o.normalize_in,
                 "device: after the transfer (the GPU's kernel; the transfer thread on the host backend) | "
                 "workers: each worker writes float32 (a consumer on the CPU)")
      ->check(CLI::IsMember({"device", "workers"}));
  add_or_keep(app, "--compute", o.compute, "the consumer's synthetic step: sleep (frees the CPU, like a GPU) or spin")
      ->check(CLI::IsMember({"sleep", "spin"}));
  add_or_keep(app, "--compute-ms", o.compute_ms, "milliseconds of synthetic step per batch; 0: no step")
      ->check(CLI::Range(0.0, 1e6));
  add_or_keep(app, "--synthetic-ms", o.synthetic_ms,
                 "teaching: workers sleep this long per sample instead of decoding (known stage costs)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_flag("--serial", o.serial, "teaching: fill, copy and step one after another on one thread (no overlap)");
  add_or_keep(app, "--trace", o.trace, "write a Chrome trace (Perfetto, chrome://tracing) of the run to FILE");
}

void shard_from_environment(Options& o) {
  constexpr std::size_t kMaxRanks = std::size_t(1) << 20;  // as --world-size
  o.rank = env_size({"RANK", "OMPI_COMM_WORLD_RANK"}, 0, kMaxRanks - 1);
  o.world_size = env_size({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"}, 1, kMaxRanks);
  if (o.world_size == 0) throw UsageError("environment: WORLD_SIZE (or OMPI_COMM_WORLD_SIZE) must be at least 1");
}

Dataset open_dataset(const Options& o, bool& embedded, bool announce) {
  if (!o.list.empty() && !o.folder.empty()) throw UsageError("--list and --folder: give one dataset, not both");
  embedded = o.list.empty() && o.folder.empty();
  try {
    if (!o.list.empty()) {
      Dataset d = Dataset::from_list(o.list);
      if (d.size() == 0) throw UsageError("--list " + o.list + ": no samples (an empty list)");
      return d;
    }
    if (!o.folder.empty()) return Dataset::from_folder(o.folder);  // refuses a folder without images itself
  } catch (const DatasetError& e) {
    throw UsageError(e.what());
  }
  bool made = false;
  const auto dir = ensure_default_dataset({}, &made);
  if (announce || made) std::fprintf(stderr, "%s the embedded default dataset: %s\n", made ? "made" : "using", dir.c_str());
  return Dataset::from_folder(dir);
}

std::size_t class_count(const Dataset& d) {
  if (!d.classes().empty()) return d.classes().size();
  std::vector<std::int64_t> labels(d.size());
  for (std::size_t i = 0; i < d.size(); ++i) labels[i] = d.label(i);
  std::sort(labels.begin(), labels.end());
  return std::size_t(std::unique(labels.begin(), labels.end()) - labels.begin());
}

double default_max_memory_mb() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 4096;  // unknown: a figure any training machine has
  // A quarter: pools beyond it are a mistyped flag far more often than a plan,
  // and the decoders, the consumer and the OS need the rest.
  return double(pages) * double(page) / double(1 << 20) / 4;
}

void check_memory(const Options& o, const Config& cfg, const TransferConfig& tc, const Device& device) {
  const double mib = double(1 << 20);
  const double host = double(cfg.host_pool_bytes()) / mib, dev = double(device_pool_bytes(cfg, tc, device)) / mib;
  const double limit = o.max_memory_mb > 0 ? o.max_memory_mb : default_max_memory_mb();
  if (host + dev <= limit) return;
  const auto whole = [](double x) { return std::to_string((unsigned long long)(x + 0.5)); };
  throw UsageError("the batch pools need " + whole(host + dev) + " MiB (host " + std::to_string(cfg.host_buffer_count()) +
                   " buffers + device " + std::to_string(cfg.device_buffer_count()) + " slots of --batch " +
                   std::to_string(cfg.batch_size) + " x " + std::to_string(cfg.sample_bytes) + " bytes a sample (--crop), --workers " + std::to_string(cfg.workers) + ", --host-queue " +
                   std::to_string(cfg.host_queue_depth) + ", --device-queue " + std::to_string(cfg.device_queue_depth) +
                   "), over --max-memory-mb " + whole(limit) + (o.max_memory_mb > 0 ? "" : " (default: a quarter of physical memory)"));
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

void write_text_file(const std::string& flag, const std::string& file, const std::string& text) {
  std::FILE* f = std::fopen(file.c_str(), "w");
  if (!f) throw std::runtime_error(flag + ": cannot write " + file + ": " + std::strerror(errno));
  const bool wrote = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !wrote) {
    throw std::runtime_error(flag + ": cannot write " + file + ": " + std::strerror(wrote ? errno : err));
  }
}

int finish_stdout(const char* program, int status) {
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return status;
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
  for (const auto& st : s.stages) {
    if (st.name == "consumer") return st.starved_fraction();
  }
  return 0;
}

Config pipeline_config(const Options& o) {
  Config cfg;
  cfg.batch_size = o.batch;
  cfg.workers = o.workers;
  cfg.host_queue_depth = o.host_queue;
  cfg.device_queue_depth = o.device_queue;
  cfg.wait_yields = o.wait_yields;
  cfg.seed = o.seed;
  cfg.epochs = o.epochs;
  cfg.rank = o.rank;
  cfg.world_size = o.world_size;
  return cfg;
}

std::shared_ptr<Device> open_device_for(const Options& o) {
  DeviceConfig dc;
  dc.backend = *parse_backend(o.device);
  dc.link_gbps = o.link_gbps;
  dc.host_transfer = o.host_transfer == "handover" ? HostTransfer::handover : HostTransfer::copy;
  return open_device(dc);
}

std::optional<TransferConfig::Normalization> normalization_for(const Options& o, int crop) {
  if (o.normalize == "off" || o.normalize_in == "workers") return std::nullopt;
  return TransferConfig::Normalization{std::size_t(crop), std::size_t(crop), 3, Normalize{}, *parse_dtype(o.normalize)};
}

std::vector<Transform> transforms(const std::string& augment, int crop) {
  if (augment == "crop") {
    return {Resize{crop, {}}, RandomCrop{{crop, crop}, 4, 4, 4, 4, false}, RandomHorizontalFlip{}};
  }
  if (augment == "center") return {Resize{crop * 8 / 7, {}}, CenterCrop{{crop, crop}}};
  return {RandomResizedCrop{{crop, crop}}, RandomHorizontalFlip{}};
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

void check_normalize_flags(const Options& o) {
  if (o.normalize_in != "workers") return;
  if (o.normalize != "float32") throw UsageError("--normalize-in workers: needs --normalize float32 (what the workers write)");
  if (o.resident) throw UsageError("--normalize-in workers: not with --resident, which normalizes in its gather on the device");
}

ImageConfig image_config(const Options& o, const std::string& augment, int crop) {
  ImageConfig ic;
  ic.transforms = transforms(augment, crop);
  ic.on_error = o.on_error == "skip" ? ErrorPolicy::skip : ErrorPolicy::fail;
  check_normalize_flags(o);
  if (o.normalize_in == "workers") ic.normalize = Normalize{};
  return ic;
}

bool gnuplot(const std::string& output, const std::string& script_body, const std::string& data) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::printf("note: gnuplot is not installed (apt-get install gnuplot-nox); %s has the figures\n", data.c_str());
    return false;
  }
  const std::string script = output + ".gp";
  const bool svg = output.size() > 4 && output.substr(output.size() - 4) == ".svg";
  write_text_file("--plot", script,
                  std::string("set terminal ") + (svg ? "svg" : "pngcairo") + " size 800,500\nset output " +
                      gnuplot_quote(output) + "\nset datafile separator ','\n" + script_body);
  const int rc = std::system(("gnuplot " + shell_quote(script) + " 2>&1").c_str());
  if (rc != 0) throw std::runtime_error("--plot: gnuplot could not draw " + output + " (script: " + script + ")");
  std::printf("wrote %s\n", output.c_str());
  return true;
}

}  // namespace conveyor::apps
