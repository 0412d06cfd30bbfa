#include "apps/report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "apps/cli.h"
#include "stages/file_system.h"

namespace conveyor::apps {

EpochFigures RunResult::total() const {
  EpochFigures t;
  for (const auto& e : epochs) {
    t.images += e.images;
    t.batches += e.batches;
    t.skipped += e.skipped;
    t.seconds += e.seconds;
  }
  return t;
}

namespace {
std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

void write_json(const std::string& file, const Options& o, const RunResult& r) {
  const EpochFigures t = r.total();
  const std::uint64_t images = t.images, batches = t.batches;
  const double seconds = t.seconds;
  std::ostringstream out;
  out << "{\n  \"device\": \"" << json_escape(r.device) << "\",\n";
  out << "  \"workers\": " << o.workers << ", \"batch\": " << o.batch << ", \"host_queue\": " << o.host_queue
      << ", \"device_queue\": " << o.device_queue << ", \"wait_yields\": " << o.wait_yields
      << ", \"epochs\": " << o.epochs << ",\n";
  // A run a signal ended: which signal, and how many epochs it began (the last
  // of them cut short), so a reader of the file alone tells it from a whole run.
  out << "  \"interrupted\": ";
  if (r.interrupted) {
    out << "\"" << signal_word(r.interrupted) << "\"";
  } else {
    out << "null";
  }
  out << ", \"epochs_run\": " << r.epochs.size() << ",\n";
  out << "  \"images\": " << images << ", \"batches\": " << batches << ", \"seconds\": " << seconds << ",\n";
  out << "  \"images_per_s\": " << (seconds > 0 ? double(images) / seconds : 0)
      << ", \"batches_per_s\": " << (seconds > 0 ? double(batches) / seconds : 0) << ",\n";
  out << "  \"stages\": {";
  for (std::size_t i = 0; i < r.stats.stages.size(); ++i) {
    const auto& s = r.stats.stages[i];
    out << (i ? ", " : "") << "\"" << s.name << "\": {\"busy\": " << s.busy_fraction() << ", \"blocked\": "
        << s.blocked_fraction() << ", \"starved\": " << s.starved_fraction()
        << ", \"consumer_wait\": " << s.consumer_wait_fraction() << "}";
  }
  out << "},\n";
  // Per epoch, for checking shards across ranks (tests/cli_test.sh): counts and digests.
  out << "  \"rank\": " << o.rank << ", \"world_size\": " << o.world_size << ",\n";
  const auto list = [&](const char* name, auto field) {
    out << "  \"" << name << "\": [";
    for (std::size_t i = 0; i < r.epochs.size(); ++i) out << (i ? ", " : "") << field(r.epochs[i]);
    out << "],\n";
  };
  list("epoch_images", [](const EpochFigures& f) { return f.images; });
  list("epoch_skipped", [](const EpochFigures& f) { return f.skipped; });
  list("epoch_batches", [](const EpochFigures& f) { return f.batches; });
  list("epoch_digest", [](const EpochFigures& f) { return f.digest; });
  list("epoch_prefetched", [](const EpochFigures& f) { return f.prefetched; });  // batches decoded before the epoch began
  out << "  \"file_opens\": " << posix_file_opens() << ",\n";  // by the whole process: the dataset's files or shards
  out << "  \"gpu_share\": " << r.gpu_share << ", \"gpu_decoded\": " << r.gpu_decoded
      << ", \"gpu_cpu_fallbacks\": " << r.gpu_cpu_fallbacks << ",\n";
  out << "  \"consumer_idle\": " << consumer_idle(r.stats) << ",\n  \"peak_rss_mib\": " << double(peak_rss_kib()) / 1024.0
      << ",\n  \"epoch_rss_mib\": [";
  for (std::size_t i = 0; i < r.epochs.size(); ++i) out << (i ? ", " : "") << r.epochs[i].rss_mib;
  out << "],\n  \"skipped\": [";  // every sample --on-error skip left out, with its reason (which names the file)
  for (std::size_t i = 0; i < r.skipped.size(); ++i) {
    const SkippedSample& k = r.skipped[i];
    out << (i ? ",\n    " : "\n    ") << "{\"epoch\": " << k.epoch << ", \"index\": " << k.index << ", \"reason\": \""
        << json_escape(k.reason) << "\"}";
  }
  out << (r.skipped.empty() ? "]\n}\n" : "\n  ]\n}\n");
  write_file("--json", file, out.str());
}

void report_trace(const std::string& file) {
  std::printf("trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", file.c_str());
}

void report_skipped(const RunResult& r) {
  if (r.skipped.empty()) return;
  constexpr std::size_t kShown = 5;
  std::printf("skipped %zu sample(s) (--on-error skip):\n", r.skipped.size());
  for (std::size_t i = 0; i < std::min(kShown, r.skipped.size()); ++i) {
    std::printf("  epoch %llu: %s\n", (unsigned long long)r.skipped[i].epoch, r.skipped[i].reason.c_str());
  }
  if (r.skipped.size() > kShown) {
    std::printf("  ... and %zu more (--json FILE lists every one)\n", r.skipped.size() - kShown);
  }
}

void report_bench(const RunResult& r) {
  std::printf("bench: %.0f images/s over %zu epoch(s)%s, peak RSS %.0f MiB\n", r.total().images_per_s(),
              r.epochs.size(), r.interrupted ? " (interrupted)" : "", double(peak_rss_kib()) / 1024.0);
}

}  // namespace conveyor::apps
