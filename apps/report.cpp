#include "apps/report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "apps/cli.h"
#include "data/file_system.h"
#include "data/quote_bytes.h"

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
// A JSON string's body. A file name is bytes, not always UTF-8, and JSON
// text must be: a byte that is not part of a UTF-8 sequence is written as the
// four characters \xNN, as the command's messages write it.
std::string json_escape(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    const std::size_t n = utf8_sequence(s, i);
    char buf[8];
    if (n == 0) {
      std::snprintf(buf, sizeof buf, "\\\\x%02x", static_cast<unsigned char>(c));
      out += buf;
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(s, i, n);
      i += n;
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
    ++i;
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
        << ", \"consumer_wait\": " << s.consumer_wait_fraction();
    if (!s.parts.empty()) {
      out << ", \"parts\": {";
      for (std::size_t k = 0; k < s.parts.size(); ++k) {
        out << (k ? ", " : "") << "\"" << s.parts[k].name << "\": {\"seconds\": " << s.parts[k].seconds
            << ", \"calls\": " << s.parts[k].calls << "}";
      }
      out << "}";
    }
    out << "}";
  }
  out << "},\n";
  const auto decisions = [&](const std::vector<TuneDecision>& list) {
    out << "\"decisions\": [";
    for (std::size_t i = 0; i < list.size(); ++i) {
      const TuneDecision& d = list[i];
      out << (i ? ", " : "") << "{\"at_s\": " << d.at_s << ", \"from\": " << d.from << ", \"to\": " << d.to
          << ", \"images_per_s\": " << d.images_per_s << ", \"reason\": \"" << json_escape(d.reason) << "\"}";
    }
    out << "]}";
  };
  // --workers auto: the tuner's count now and its changes (the latest kept).
  out << "  \"tune_workers\": ";
  if (o.workers_auto) {
    out << "{\"working\": " << r.stats.workers_active << ", \"changes\": " << r.stats.tune_changes << ", ";
    decisions(r.stats.tuning);
    out << ",\n";
  } else {
    out << "null,\n";
  }
  // --host-queue auto, --device-queue auto: the depth now, its ceiling and
  // the changes (from/to are depths).
  for (const auto& [name, q] : {std::pair{"tune_host_queue", &r.stats.host_queue_tuning},
                                std::pair{"tune_device_queue", &r.stats.device_queue_tuning}}) {
    out << "  \"" << name << "\": ";
    if (q->depth > 0) {
      out << "{\"depth\": " << q->depth << ", \"ceiling\": " << q->ceiling << ", \"changes\": " << q->changes << ", ";
      decisions(q->decisions);
      out << ",\n";
    } else {
      out << "null,\n";
    }
  }
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
  list("epoch_prefetched", [](const EpochFigures& f) { return f.prefetched; });  // samples decoded before it began, at least
  out << "  \"file_opens\": " << posix_file_opens() << ",\n";
  out << "  \"remote\": ";
  if (const auto& c = r.remote) {
    out << "{\"shards\": " << c->shards << ", \"cached\": " << c->cached << ", \"downloaded\": " << c->downloaded
        << ", \"downloaded_bytes\": " << c->downloaded_bytes << ", \"failed\": " << c->failed
        << ", \"uncached\": " << c->uncached << ", \"uncached_why\": \""
        << json_escape(c->uncached_why) << "\", \"range_reads\": " << c->range_reads << ", \"read_ahead\": " << c->read_ahead
        << ", \"range_bytes\": " << c->range_bytes << ", \"network_wait_s\": " << c->range_seconds
        << ", \"retries\": " << c->retries << "},\n";
  } else {
    out << "null,\n";
  }  // by the whole process: the dataset's files or shards
  out << "  \"gpu_share\": " << r.gpu_share << ", \"gpu_decoded\": " << r.gpu_decoded
      << ", \"gpu_cpu_fallbacks\": " << r.gpu_cpu_fallbacks << ",\n";
  out << "  \"consumer_idle\": " << consumer_idle(r.stats) << ",\n  \"peak_rss_mib\": " << double(peak_rss_kib()) / 1024.0
      << ",\n  \"epoch_rss_mib\": [";
  for (std::size_t i = 0; i < r.epochs.size(); ++i) out << (i ? ", " : "") << r.epochs[i].rss_mib;
  out << "],\n  \"skipped\": [";  // every sample --on-error skip left out, with its reason (which names the file)
  for (std::size_t i = 0; i < r.skipped.size(); ++i) {
    const SkippedSample& k = r.skipped[i];
    out << (i ? ",\n    " : "\n    ") << "{\"epoch\": " << k.epoch << ", \"last_epoch\": " << k.last_epoch
        << ", \"times\": " << k.times << ", \"index\": " << k.index << ", \"reason\": \"" << json_escape(k.reason) << "\"}";
  }
  out << (r.skipped.empty() ? "]\n}\n" : "\n  ]\n}\n");
  write_file("--json", file, out.str());
}

std::optional<StreamingCounters> remote_counters(const Dataset& dataset) {
  if (const auto* streaming = dynamic_cast<const StreamingShards*>(dataset.files().get())) return streaming->counters();
  return std::nullopt;
}

std::string remote_line(const StreamingCounters& c, double workers_busy_s) {
  char line[480];
  const std::uint64_t pending = c.shards - c.cached - c.downloaded - c.failed - c.uncached;
  std::snprintf(line, sizeof line,
                "remote: %llu shards, %llu in the cache at the start, %llu downloaded (%.1f MiB), %llu downloading, %llu failed, "
                "%llu not cached; %llu samples (%.1f MiB, %llu sent ahead) read by range, the workers waited %.2f s on "
                "the network of %.2f s busy, %llu retries",
                (unsigned long long)c.shards, (unsigned long long)c.cached, (unsigned long long)c.downloaded,
                double(c.downloaded_bytes) / (1 << 20),                (unsigned long long)pending, (unsigned long long)c.failed, (unsigned long long)c.uncached,
                (unsigned long long)c.range_reads, double(c.range_bytes) / (1 << 20), (unsigned long long)c.read_ahead,
                c.range_seconds, workers_busy_s, (unsigned long long)c.retries);
  std::string out = line;
  if (c.uncached > 0) {
    out += "\nnot cached, read by range: ";
    out += c.uncached_why;
  }
  if (const std::optional<std::string> network = network_bottleneck(c, workers_busy_s)) out += "\n" + *network;
  return out + "\n";
}

void report_trace(const std::string& file) {
  std::printf("trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", file.c_str());
}

void report_skipped(const RunResult& r) {
  if (r.skipped.empty()) return;
  constexpr std::size_t kShown = 5;
  std::uint64_t skips = 0;
  for (const SkippedSample& k : r.skipped) skips += k.times;
  std::printf("skipped %llu sample(s) (--on-error skip):\n", (unsigned long long)skips);
  for (std::size_t i = 0; i < std::min(kShown, r.skipped.size()); ++i) {
    const SkippedSample& k = r.skipped[i];
    if (k.times > 1) {
      std::printf("  epochs %llu-%llu (%llu times): %s\n", (unsigned long long)k.epoch, (unsigned long long)k.last_epoch,
                  (unsigned long long)k.times, printable(k.reason).c_str());
    } else {
      std::printf("  epoch %llu: %s\n", (unsigned long long)k.epoch, printable(k.reason).c_str());
    }
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
