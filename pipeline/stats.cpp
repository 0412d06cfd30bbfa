#include "pipeline/stats.h"

#include <cstdio>

namespace conveyor {

void accumulate(StageStats& into, const StageCounters::Reading& r, Clock::time_point now) {
  const auto so_far = [&](std::int64_t since) {
    const std::int64_t dt = since ? now.time_since_epoch().count() - since : 0;
    return dt > 0 ? double(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::duration(dt)).count()) * 1e-9 : 0.0;
  };
  into.items += r.items;
  into.busy_s += double(r.busy_ns) * 1e-9 + so_far(r.busy_since);
  into.blocked_s += double(r.blocked_ns) * 1e-9 + so_far(r.blocked_since);
  into.starved_s += double(r.starved_ns) * 1e-9 + so_far(r.starved_since);
  into.consumer_wait_s += double(r.consumer_wait_ns) * 1e-9;
  into.parked_s += double(r.parked_ns) * 1e-9 + so_far(r.parked_since);
}

namespace {
const StageStats* find_stage(const std::vector<StageStats>& stages, std::string_view name) {
  for (const auto& s : stages) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

// The consumer's share of the time measured where its thread cannot see it: the
// delivery thread's waits in the transfer for memory the consumer still held (a slot its device work
// reads). Not the waits for room in the device queue: those a consumer's own
// thread shows as busy, or they come before it first asks for a batch.
double hidden_consumer_fraction(const std::vector<StageStats>& stages) {
  const StageStats* delivery = find_stage(stages, kDeliveryStage);
  return delivery ? delivery->consumer_wait_fraction() : 0.0;
}

// The stage that sets the pace (PipelineStats::bottleneck), and whether it is
// the consumer named for its hidden share rather than its own busy time.
struct Pace {
  const StageStats* stage = nullptr;
  bool by_hidden_share = false;
};

Pace pace_setter(const std::vector<StageStats>& stages) {
  Pace p;
  for (const auto& s : stages) {
    if (!p.stage || s.busy_fraction() > p.stage->busy_fraction()) p.stage = &s;
  }
  const StageStats* consumer = find_stage(stages, "consumer");
  if (p.stage && consumer && hidden_consumer_fraction(stages) > p.stage->busy_fraction()) p = {consumer, true};
  return p;
}
}  // namespace

const StageStats* PipelineStats::stage(std::string_view name) const { return find_stage(stages, name); }

double PipelineStats::busy_s(std::string_view name) const {
  double busy = 0;
  for (const StageStats& stage : stages) busy += stage.name == name ? stage.busy_s : 0;
  return busy;
}

const StageStats* PipelineStats::bottleneck() const { return pace_setter(stages).stage; }

namespace {
int pct(double f) { return int(f * 100.0 + 0.5); }

// The process's CPU time as a share of its cores over the snapshot's wall time.
double cpu_share(const PipelineStats& s) {
  return s.cores > 0 && s.wall_s > 0 ? s.cpu_s / (s.wall_s * double(s.cores)) : 0.0;
}

std::string hint_for(const StageStats& stage, const PipelineStats& s) {
  // As many workers as cores, and the process uses most of them (1.6-1.8 of 2
  // measured over a one-epoch bench that is CPU-bound; 1 worker: 1.0 of 2).
  if (stage.name == "workers" && stage.working_threads() + 0.5 >= double(s.cores) && cpu_share(s) >= 0.75) {
    char line[200];
    std::snprintf(line, sizeof line,
                  "the CPU is the limit (the process used %.1f of %zu cores): make each sample cheaper (smaller crop, "
                  "fewer augmentations) or give it more cores; more workers would share the same ones",
                  cpu_share(s) * double(s.cores), s.cores);
    return line;
  }
  if (stage.name == "workers") return "add workers or make each sample cheaper (smaller crop, fewer augmentations)";
  if (stage.name == kDeliveryStage) return "the copy or device-side work limits: check the link, or move work off the transfer stage";
  if (!stage.hint.empty()) return stage.hint;
  if (stage.name == "consumer") return "the training step is the limit: the input pipeline keeps up";
  return "";
}
}  // namespace

std::string PipelineStats::bottleneck_summary() const {
  const Pace pace = pace_setter(stages);
  const StageStats* b = pace.stage;
  if (!b) return "bottleneck: none (no stage ran)";
  const StageStats* consumer = find_stage(stages, "consumer");
  const std::string hint = hint_for(*b, *this);
  char line[512];
  if (pace.by_hidden_share) {
    std::snprintf(line, sizeof line,
                  "bottleneck: consumer (busy %d%% on its thread; the transfer waited %d%% of the time for buffers it "
                  "still held, as when its step runs on the device) - %s",
                  pct(b->busy_fraction()), pct(hidden_consumer_fraction(stages)), hint.c_str());
  } else if (consumer && b != consumer) {
    std::snprintf(line, sizeof line, "bottleneck: %s (busy %d%%), consumer waiting %d%% - %s", b->name.c_str(),
                  pct(b->busy_fraction()), pct(consumer->starved_fraction()), hint.c_str());
  } else {
    std::snprintf(line, sizeof line, "bottleneck: %s (busy %d%%) - %s", b->name.c_str(), pct(b->busy_fraction()),
                  hint.c_str());
  }
  return line;
}

std::string PipelineStats::table() const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-10s %7s %10s %7s %8s %8s\n", "stage", "threads", "items", "busy%", "blocked%",
                "starved%");
  out += line;
  for (const auto& s : stages) {
    std::snprintf(line, sizeof line, "%-10s %7zu %10llu %7d %8d %8d\n", s.name.c_str(), s.threads,
                  (unsigned long long)s.items, pct(s.busy_fraction()), pct(s.blocked_fraction()),
                  pct(s.starved_fraction()));
    out += line;
  }
  for (const auto& s : stages) {
    if (s.parts.empty()) continue;
    out += s.name + " parts:";
    for (std::size_t i = 0; i < s.parts.size(); ++i) {
      const StagePart& p = s.parts[i];
      std::snprintf(line, sizeof line, "%s %s %.2f s over %llu calls (%.3f ms each)", i ? "," : "", p.name.c_str(),
                    p.seconds, (unsigned long long)p.calls, p.calls ? 1e3 * p.seconds / double(p.calls) : 0.0);
      out += line;
    }
    out += '\n';
  }
  // A tuner's latest three changes, under its heading line.
  const auto latest = [&](const std::vector<TuneDecision>& list) {
    for (std::size_t i = list.size() > 3 ? list.size() - 3 : 0; i < list.size(); ++i) {
      const TuneDecision& d = list[i];
      std::snprintf(line, sizeof line, "  %.2f s: %zu -> %zu at %.0f images/s (%s)\n", d.at_s, d.from, d.to,
                    d.images_per_s, d.reason.c_str());
      out += line;
    }
  };
  if (workers_active > 0) {
    std::snprintf(line, sizeof line, "workers tuned: %zu working now; %llu changes%s\n", workers_active,
                  (unsigned long long)tune_changes, tuning.empty() ? "" : ", the latest:");
    out += line;
    latest(tuning);
  }
  for (const auto& [name, q] : {std::pair{"host", &host_queue_tuning}, std::pair{"device", &device_queue_tuning}}) {
    if (q->depth == 0) continue;
    std::snprintf(line, sizeof line, "%s queue tuned: depth %zu of at most %zu; %llu changes%s\n", name, q->depth,
                  q->ceiling, (unsigned long long)q->changes, q->decisions.empty() ? "" : ", the latest:");
    out += line;
    latest(q->decisions);
  }
  std::snprintf(line, sizeof line, "%-13s %8s %10s %10s\n", "queue", "capacity", "mean", "high-water");
  out += line;
  for (const auto& q : queues) {
    std::snprintf(line, sizeof line, "%-13s %8zu %10.2f %10zu\n", q.name.c_str(), q.stats.capacity,
                  q.stats.mean_occupancy, q.stats.high_water);
    out += line;
  }
  std::snprintf(line, sizeof line, "delivered: %llu batches, %llu samples, %llu skipped\n", (unsigned long long)batches,
                (unsigned long long)samples, (unsigned long long)samples_skipped);
  out += line;
  out += bottleneck_summary();
  out += '\n';
  return out;
}

PipelineStats PipelineStats::since(const PipelineStats& earlier) const {
  PipelineStats d = *this;
  d.wall_s -= earlier.wall_s;
  d.batches -= earlier.batches;
  d.samples -= earlier.samples;
  d.samples_skipped -= earlier.samples_skipped;
  d.cpu_s -= earlier.cpu_s;
  for (std::size_t i = 0; i < d.stages.size() && i < earlier.stages.size(); ++i) {
    StageStats& s = d.stages[i];
    const StageStats& e = earlier.stages[i];
    s.items -= e.items;
    s.busy_s -= e.busy_s;
    s.blocked_s -= e.blocked_s;
    s.starved_s -= e.starved_s;
    s.consumer_wait_s -= e.consumer_wait_s;
    s.parked_s -= e.parked_s;
    s.wall_s -= e.wall_s;
    if (s.parts.size() == e.parts.size()) {
      for (std::size_t k = 0; k < s.parts.size(); ++k) {
        s.parts[k].seconds -= e.parts[k].seconds;
        s.parts[k].calls -= e.parts[k].calls;
      }
    }
  }
  return d;
}

}  // namespace conveyor
