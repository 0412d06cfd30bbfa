#include "apps/cli.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "stages/default_dataset.h"

namespace conveyor::apps {

std::size_t env_size(std::initializer_list<const char*> names, std::size_t fallback) {
  for (const char* n : names) {
    if (const char* v = std::getenv(n); v && *v) {
      char* end = nullptr;
      const unsigned long long x = std::strtoull(v, &end, 10);
      if (*end != '\0') throw UsageError(std::string("environment: ") + n + "='" + v + "' is not a non-negative integer");
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

void add_pipeline_flags(CLI::App& app, Options& o) {
  app.add_option("--list", o.list, "dataset list file: `path label` per line")->check(CLI::ExistingFile);
  app.add_option("--folder", o.folder, "dataset folder: root/<class>/<image> (ImageFolder)")->check(CLI::ExistingDirectory);
  app.add_option("--workers", o.workers, "decode/augment worker threads")->check(CLI::Range(1, 4096));
  app.add_option("--batch", o.batch, "samples per batch")->check(CLI::Range(1, 1 << 24));
  app.add_option("--host-queue", o.host_queue, "finished batches waiting for the transfer thread")->check(CLI::Range(1, 4096));
  app.add_option("--device-queue", o.device_queue, "transferred batches waiting for the consumer")->check(CLI::Range(1, 4096));
  app.add_option("--wait-yields", o.wait_yields,
                 "times a waiting thread yields its core before it sleeps (0: sleep at once)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--epochs", o.epochs, "epochs to run")->check(CLI::Range(1, 1 << 30));
  app.add_option("--seed", o.seed, "seed of the order and of every augmentation");
  app.add_option("--crop", o.crop, "output size of RandomResizedCrop (default 64 on the embedded dataset, else 224)")
      ->check(CLI::Range(1, 16384));
  app.add_option("--augment", o.augment,
                 "rrc: RandomResizedCrop + flip | crop: Resize + RandomCrop (padding 4) + flip | center: Resize + CenterCrop")
      ->check(CLI::IsMember({"rrc", "crop", "center"}));
  app.add_option("--device", o.device, "auto | cuda | host")->check(CLI::IsMember({"auto", "cuda", "host"}));
  app.add_option("--link-gbps", o.link_gbps, "host backend: simulated host-to-device link, GB/s")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--host-transfer", o.host_transfer,
                 "host backend: copy (each batch into a separate buffer, as a GPU copy would) or handover "
                 "(the consumer gets the worker's buffer: CPU training)")
      ->check(CLI::IsMember({"copy", "handover"}));
  app.add_option("--on-error", o.on_error, "a bad image: fail (stop) or skip (count and list it)")
      ->check(CLI::IsMember({"fail", "skip"}));
  app.add_option("--rank", o.rank, "this process's shard (default: $RANK or $OMPI_COMM_WORLD_RANK, else 0)");
  app.add_option("--world-size", o.world_size, "number of shards (default: $WORLD_SIZE or $OMPI_COMM_WORLD_SIZE, else 1)")
      ->check(CLI::Range(1, 1 << 20));
}

void add_run_flags(CLI::App& app, Options& o) {
  app.add_flag("--resident", o.resident,
               "decode every image once (Resize + CenterCrop), upload, and batch on the device by gather");
  app.add_option("--budget-mb", o.budget_mb, "--resident: device memory the decoded set may take, MiB")
      ->check(CLI::Range(1.0, 1e9));
  app.add_option("--normalize", o.normalize, "normalized output (CHW), where --normalize-in says: off (uint8 HWC) | float32 | float16 | bfloat16")
      ->check(CLI::IsMember({"off", "float32", "float16", "bfloat16"}));
  app.add_option("--normalize-in", o.normalize_in,
                 "device: after the transfer (the GPU's kernel; the transfer thread on the host backend) | "
                 "workers: each worker writes float32 (a consumer on the CPU)")
      ->check(CLI::IsMember({"device", "workers"}));
  app.add_option("--compute", o.compute, "the consumer's synthetic step: sleep (frees the CPU, like a GPU) or spin")
      ->check(CLI::IsMember({"sleep", "spin"}));
  app.add_option("--compute-ms", o.compute_ms, "milliseconds of synthetic step per batch; 0: no step")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--synthetic-ms", o.synthetic_ms,
                 "teaching: workers sleep this long per sample instead of decoding (known stage costs)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_flag("--serial", o.serial, "teaching: fill, copy and step one after another on one thread (no overlap)");
  app.add_option("--trace", o.trace, "write a Chrome trace (Perfetto, chrome://tracing) of the run to FILE");
}

void shard_from_environment(Options& o) {
  o.rank = env_size({"RANK", "OMPI_COMM_WORLD_RANK"}, 0);
  o.world_size = env_size({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"}, 1);
}

Dataset open_dataset(const Options& o, bool& embedded, bool announce) {
  if (!o.list.empty() && !o.folder.empty()) throw UsageError("--list and --folder: give one dataset, not both");
  embedded = o.list.empty() && o.folder.empty();
  try {
    if (!o.list.empty()) return Dataset::from_list(o.list);
    if (!o.folder.empty()) return Dataset::from_folder(o.folder);
  } catch (const DatasetError& e) {
    throw UsageError(e.what());
  }
  bool made = false;
  const auto dir = ensure_default_dataset({}, &made);
  if (announce || made) std::fprintf(stderr, "%s the embedded default dataset: %s\n", made ? "made" : "using", dir.c_str());
  return Dataset::from_folder(dir);
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
  std::ofstream gp(script);
  const bool svg = output.size() > 4 && output.substr(output.size() - 4) == ".svg";
  gp << "set terminal " << (svg ? "svg" : "pngcairo") << " size 800,500\nset output " << gnuplot_quote(output) << "\n"
     << "set datafile separator ','\n" << script_body;
  gp.close();
  if (!gp) throw UsageError("cannot write " + script);
  const int rc = std::system(("gnuplot " + shell_quote(script) + " 2>&1").c_str());
  std::printf(rc == 0 ? "wrote %s\n" : "note: gnuplot failed on %s; the figures are in the data file\n", output.c_str());
  return rc == 0;
}

}  // namespace conveyor::apps
