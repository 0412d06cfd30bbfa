// The worker tuner: its rules on modelled stage costs with known best counts,
// then in a pipeline whose stages sleep for known times.
#include <atomic>
#include <cmath>
#include <memory>
#include <random>
#include <thread>
#include <utility>

#include "pipeline/autotune.h"
#include "pipeline_support.h"

using namespace conveyor;
using namespace conveyor::test;

namespace {

// A pipeline of known costs, window by window: each worker fills `per_worker`
// images/s using `cpu_per_worker` of a core; past the cores, workers share
// them (and lose `crowding` per extra thread); the consumer takes at most `cap`
// images/s and spends `consumer_cpu` cores. Noise: each window's rate times
// (1 + U(-noise, noise)).
struct Model {
  double per_worker = 100, cpu_per_worker = 1.0, cap = 1e9, consumer_cpu = 0.05, crowding = 0.0, noise = 0.0;
  std::size_t cores = 2;

  double rate(std::size_t n) const {
    const double cpu_limit = cpu_per_worker > 0 ? (double(cores) - consumer_cpu) / cpu_per_worker : 1e9;
    double workers = std::min(double(n), cpu_limit);
    if (double(n) > cpu_limit) workers *= 1.0 - crowding * (double(n) - cpu_limit);
    return std::min(workers * per_worker, cap);
  }
  TuneWindow window(std::size_t n, std::mt19937& rng) const {
    TuneWindow w;
    w.active = n;
    const double r = rate(n);
    std::uniform_real_distribution<double> jitter(-noise, noise);
    w.images_per_s = r * (1.0 + jitter(rng));
    w.consumer_images_per_s = r * (1.0 + jitter(rng));
    const double can = std::min(double(n), cpu_per_worker > 0 ? double(cores) / cpu_per_worker : 1e9) * per_worker;
    w.blocked = can > 0 ? std::max(0.0, 1.0 - r / can) : 0.0;
    w.busy = 1.0 - w.blocked;
    w.cores_used = std::min(double(cores), (r / per_worker) * cpu_per_worker + consumer_cpu);
    w.cores = cores;
    return w;
  }
  // The best rate any count up to `ceiling` gives, and the fewest workers within 5% of it.
  std::pair<double, std::size_t> best(std::size_t ceiling) const {
    double top = 0;
    for (std::size_t n = 1; n <= ceiling; ++n) top = std::max(top, rate(n));
    for (std::size_t n = 1; n <= ceiling; ++n) {
      if (rate(n) >= 0.95 * top) return {top, n};
    }
    return {top, ceiling};
  }
};

// Runs f on a thread of its own and fails unless it ends within `seconds`.
template <class F>
void within_seconds(int seconds, F f) {
  auto task = std::async(std::launch::async, f);
  REQUIRE(task.wait_for(std::chrono::seconds(seconds)) == std::future_status::ready);
  task.get();
}

// Runs the tuner for `windows` windows; returns the count it holds at the end.
std::size_t tune(const Model& m, std::size_t ceiling, std::size_t windows, unsigned seed = 1,
                 std::vector<TuneDecision>* log = nullptr) {
  WorkerTuner t(ceiling);
  std::mt19937 rng(seed);
  for (std::size_t i = 0; i < windows; ++i) {
    TuneDecision d;
    const std::size_t before = t.active();
    const std::size_t n = t.next(m.window(t.active(), rng), &d);
    REQUIRE(n >= 1);
    REQUIRE(n <= ceiling);
    REQUIRE(n == t.active());
    if (n != before && log) log->push_back(d);
  }
  return t.active();
}

// Hands `t` `windows` windows of the model, each at the count it holds.
void run_windows(WorkerTuner& t, const Model& m, std::mt19937& rng, std::size_t windows) {
  for (std::size_t i = 0; i < windows; ++i) t.next(m.window(t.active(), rng), nullptr);
}

// A tuner that climbed to 16 sleeping workers for a consumer that takes all;
// `m` then slows to what 8 workers make, so the 16 are blocked half their time.
WorkerTuner at_16_then_slowed(Model& m, std::mt19937& rng) {
  WorkerTuner t(16);
  m.cpu_per_worker = 0.0;
  run_windows(t, m, rng, 30);
  REQUIRE(t.active() == 16);
  m.cap = 800;
  return t;
}

}  // namespace

TEST_CASE("tuner: workers that sleep grow until the consumer is the limit, then give the extra back", "[autotune]") {
  Model m;
  m.cpu_per_worker = 0.02;  // sleeping workers: the cores stay free
  m.cap = 550;               // best: 6 workers (5 give 500, 91%)
  std::vector<TuneDecision> log;
  const std::size_t n = tune(m, 16, 60, 1, &log);
  CHECK(m.rate(n) >= 0.95 * m.best(16).first);
  CHECK(n >= 6);
  CHECK(n <= 7);
  REQUIRE(!log.empty());
  CHECK(log.front().from == 1);
  CHECK(log.front().reason.rfind("grow:", 0) == 0);
}

TEST_CASE("tuner: starts at the count it is given, and its first grow doubles it", "[autotune]") {
  Model m;
  m.cpu_per_worker = 0.02;  // sleeping workers
  m.cap = 550;               // best: 6 workers
  WorkerTuner t(16, 2);
  CHECK(t.active() == 2);
  std::mt19937 rng(1);
  TuneDecision d;
  CHECK(t.next(m.window(t.active(), rng), &d) == 4);
  CHECK(d.from == 2);
  run_windows(t, m, rng, 60);
  CHECK(m.rate(t.active()) >= 0.95 * m.best(16).first);
  CHECK(WorkerTuner(4, 9).active() == 4);  // clamped to the ceiling
  CHECK(WorkerTuner(4, 0).active() == 1);
}

TEST_CASE("tuner: in the first climb, workers that sleep jump to what the consumer can take, CPU-bound ones do not",
          "[autotune]") {
  Model m;
  m.cpu_per_worker = 0.02;  // workers waiting on reads
  m.cap = 550;              // the consumer takes 550 images/s: best 6 workers
  WorkerTuner t(16, 2);
  std::mt19937 rng(1);
  TuneWindow w = m.window(t.active(), rng);
  w.consumer_capacity = m.cap;
  TuneDecision d;
  // 200 images/s from 2 workers; 550 x 1.25 asks for 7.
  CHECK(t.next(w, &d) == 7);
  CHECK(d.reason.find("the consumer could take 550 images/s") != std::string::npos);
  for (int i = 0; i < 60; ++i) {
    w = m.window(t.active(), rng);
    w.consumer_capacity = m.cap;
    t.next(w, nullptr);
  }
  CHECK(m.rate(t.active()) >= 0.95 * m.best(16).first);

  // CPU-bound: 1.25 cores a worker, 1.5 of 4 free: they carry one more, not the 13 asked for, so the
  // plain doubling step stands.
  Model cpu;
  cpu.cores = 4;
  WorkerTuner c(16, 2);
  TuneWindow busy = cpu.window(2, rng);
  busy.cores_used = 2.5;
  busy.consumer_capacity = 1000;
  CHECK(c.next(busy, nullptr) == 4);
}

TEST_CASE("tuner: a look half-way through the first window takes the jump alone, and then leaves it to next()",
          "[autotune]") {
  std::mt19937 rng(2);
  // Workers waiting on reads: the half window's jump is the one next() would make.
  Model m;
  m.cpu_per_worker = 0.02;
  m.cap = 550;
  WorkerTuner t(16, 2);
  TuneWindow w = m.window(t.active(), rng);
  w.consumer_capacity = m.cap;
  TuneDecision d;
  CHECK(t.early(w, &d) == 7);
  CHECK((d.from == 2 && d.to == 7));
  CHECK(d.reason.find("the consumer could take 550 images/s") != std::string::npos);
  CHECK(t.early(w, nullptr) == 7);  // once only
  // Half a window in, the consumer may not have taken two batches yet: its capacity is enough.
  WorkerTuner u(16, 2);
  TuneWindow unseen = w;
  unseen.consumer_images_per_s = 0;
  CHECK(u.early(unseen, nullptr) == 7);
  // The jump is a trial like any grow: a whole window at 7 that gained nothing takes it back.
  TuneWindow flat = w;
  flat.active = 7;
  CHECK(t.next(flat, &d) == 2);
  CHECK(d.reason.rfind("back:", 0) == 0);

  // CPU-bound, asking no more than the plain step, or the consumer's capacity
  // unknown: nothing changes, and next() decides as it would have.
  Model cpu;
  cpu.cores = 4;
  for (const int which : {0, 1, 2}) {
    INFO("case " << which);
    WorkerTuner c(16, 2), same(16, 2);
    TuneWindow busy = cpu.window(2, rng);
    busy.consumer_capacity = 1000;
    if (which == 0) busy.cores_used = 2.5;  // CPU-bound: room for one more only
    if (which == 1) busy.consumer_capacity = 1.1 * std::min(busy.images_per_s, busy.consumer_images_per_s);  // no jump asked
    if (which == 2) busy.consumer_capacity = 0;
    d = {};
    CHECK(c.early(busy, &d) == 2);
    CHECK(d.reason.empty());
    TuneDecision a, b;
    CHECK(c.next(busy, &a) == same.next(busy, &b));
    CHECK(a.reason == b.reason);
  }
}

TEST_CASE("tuner: CPU-bound workers stop at the cores", "[autotune]") {
  for (std::size_t cores : {1u, 2u, 4u, 16u}) {
    Model m;
    m.cores = cores;
    m.crowding = 0.02;
    const std::size_t n = tune(m, 4 * cores, 80);
    INFO("cores " << cores << ", tuned to " << n);
    CHECK(m.rate(n) >= 0.95 * m.best(4 * cores).first);
    CHECK(n <= cores);
  }
}

TEST_CASE("tuner: a consumer that spins a core leaves the workers the rest", "[autotune]") {
  Model m;
  m.cores = 4;
  m.consumer_cpu = 1.0;  // the training step's own thread
  m.cap = 1e9;
  const std::size_t n = tune(m, 16, 80);
  CHECK(m.rate(n) >= 0.95 * m.best(16).first);
  CHECK(n == 3);
}

TEST_CASE("tuner: the best count within 5% under 3% noise, over many runs", "[autotune]") {
  struct Case {
    double cpu, cap;
    std::size_t cores, ceiling;
  };
  for (const Case& c : {Case{0.02, 550, 2, 16}, Case{1.0, 1e9, 2, 4}, Case{1.0, 1e9, 8, 16}, Case{0.3, 1200, 4, 32},
                        Case{1.0, 250, 4, 8}}) {
    Model m;
    m.cpu_per_worker = c.cpu;
    m.cap = c.cap;
    m.cores = c.cores;
    m.noise = 0.03;
    const auto [top, fewest] = m.best(c.ceiling);
    for (unsigned seed = 1; seed <= 20; ++seed) {
      const std::size_t n = tune(m, c.ceiling, 100, seed);
      INFO("cpu " << c.cpu << " cap " << c.cap << " cores " << c.cores << " seed " << seed << ": " << n
                  << " workers, the fewest within 5% " << fewest);
      CHECK(m.rate(n) >= 0.95 * top);
      CHECK(n <= std::max<std::size_t>(fewest * 2, fewest + 2));  // cores given back
    }
  }
}

TEST_CASE("tuner: a consumer that speeds up later gets more workers", "[autotune]") {
  Model m;
  m.cpu_per_worker = 0.02;
  m.cap = 250;
  WorkerTuner t(16);
  std::mt19937 rng(7);
  run_windows(t, m, rng, 60);
  CHECK(t.active() <= 4);
  m.cap = 1000;  // the training step got faster (a warm-up ended, evaluation finished)
  run_windows(t, m, rng, 2 * WorkerTuner::kRetryWindows + 20);
  CHECK(m.rate(t.active()) >= 0.95 * 1000);
}

TEST_CASE("tuner: workers outrunning the consumer while the buffers fill do not pass for a gain", "[autotune]") {
  // 8 workers meet the consumer's 400 images/s; at 16 the workers fill the
  // empty buffers at 1600/s for a while, but the consumer still takes 400.
  WorkerTuner t(16);
  const auto window = [](std::size_t n) {
    TuneWindow w;
    w.active = n;
    w.images_per_s = n >= 16 ? 1600 : 50.0 * double(std::min<std::size_t>(n, 8));
    w.consumer_images_per_s = std::min(w.images_per_s, 400.0);
    w.busy = 1.0;
    w.cores = 64;
    return w;
  };
  for (int i = 0; i < 40; ++i) t.next(window(t.active()), nullptr);
  CHECK(t.active() == 8);
}

TEST_CASE("tuner: blocked workers shrink to what their busy share says, plus one", "[autotune]") {
  Model m;
  std::mt19937 rng(3);
  WorkerTuner t = at_16_then_slowed(m, rng);
  std::vector<std::size_t> counts;
  for (int i = 0; i < 6; ++i) {
    t.next(m.window(t.active(), rng), nullptr);
    counts.push_back(t.active());
  }
  CHECK(counts.front() == 9);  // in one step, not seven
  CHECK(counts.back() >= 8);
  CHECK(counts.back() <= 9);
}

TEST_CASE("tuner: after a shrink, grows go one at a time and a refused one waits", "[autotune]") {
  Model m;
  std::mt19937 rng(5);
  WorkerTuner t = at_16_then_slowed(m, rng);
  run_windows(t, m, rng, 6);
  REQUIRE(t.active() <= 9);
  m.cap = 1000;  // 10 workers now
  std::size_t grows = 0;
  for (int i = 0; i < 15; ++i) {
    TuneDecision d;
    const std::size_t before = t.active();
    t.next(m.window(t.active(), rng), &d);
    if (t.active() != before && d.reason.rfind("grow:", 0) == 0) {
      ++grows;
      CHECK(d.to == d.from + 1);
    }
  }
  CHECK(t.active() == 10);
  CHECK(grows <= 3);  // 9 -> 10 kept, 10 -> 11 refused, then nothing for kRetryWindows
}

TEST_CASE("tuner: the count stays within 1 .. ceiling", "[autotune]") {
  Model m;
  m.cpu_per_worker = 0.0;
  CHECK(tune(m, 1, 30) == 1);
  CHECK(tune(m, 3, 30) == 3);
  m.cap = 0;  // nothing consumed (the consumer is away): no decision
  CHECK(tune(m, 8, 30) == 1);
  CHECK_THROWS_AS(WorkerTuner(0), std::invalid_argument);
}

namespace {
// Sleeps per sample and fills the reference bytes.
void sleepy_fill(Sample& s, std::chrono::microseconds per_sample) {
  std::this_thread::sleep_for(per_sample);
  fill_pattern(s);
}
}  // namespace

TEST_CASE("pipeline: tune_workers reaches the consumer's pace and keeps the bytes", "[autotune]") {
  // Each worker fills 8 samples in >= 16 ms (2 ms a sample); the consumer
  // takes a batch of 8 every 4 ms: 4 workers keep up, more cannot help.
  Config c = small_config();
  c.batch_size = 8;
  c.epochs = 1;
  c.workers = 12;
  c.tune_workers = true;
  c.tune_window_ms = 50;
  const std::size_t n = 4000;
  within_seconds(120, [&] {
    Pipeline p(c, n, {[](Sample& s) { sleepy_fill(s, std::chrono::microseconds(2000)); }});
    std::uint64_t samples = 0;
    const std::vector<std::uint64_t> order = p.sampler().epoch_order(0);
    std::size_t bad = 0;
    PipelineStats half;
    while (auto b = p.next()) {
      bad += bad_samples(c, **b, order);
      samples += (*b)->size();
      if (samples == n / 2) half = p.stats();
      std::this_thread::sleep_for(std::chrono::milliseconds(4));
    }
    CHECK(bad == 0);
    CHECK(samples == n);
    const PipelineStats s = p.stats();
    INFO(s.table());
    CHECK(s.tune_changes >= 2);
    REQUIRE(!s.tuning.empty());
    CHECK(half.workers_active >= 3);
    CHECK(half.workers_active <= 7);  // not the 8 or 12 the climb tried: the consumer takes no more
    // Parked workers are out of the fractions: the working ones' add up.
    const StageStats& w = s.stages.front();
    CHECK(w.parked_s > 0);
    CHECK(w.busy_fraction() + w.blocked_fraction() <= 1.05);
    CHECK(w.working_threads() < 12);
    // The second half ran at the consumer's pace, give or take sleeps' slack
    // on a loaded machine: 8 samples per >= 4 ms is at most 2000 a second.
    const PipelineStats late = s.since(half);
    CHECK(double(late.samples) / late.wall_s >= 0.5 * 2000);
  });
}

namespace {
// Digests of every batch of a run whose filler sleeps 300 us a sample, and
// how many changes the tuner made.
std::pair<std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t>, std::uint64_t> sleepy_digests(
    const Config& c, std::size_t n) {
  Pipeline p(c, n, {[](Sample& s) { sleepy_fill(s, std::chrono::microseconds(300)); }});
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> out;
  while (auto b = p.next()) out[{(*b)->epoch, (*b)->index}] = batch_digest(**b);
  return {out, p.stats().tune_changes};
}
}  // namespace

TEST_CASE("pipeline: tune_workers' output is the fixed count's, workers x queue depths", "[autotune]") {
  for (std::size_t workers : {1u, 3u, 6u}) {
    for (std::size_t depth : {1u, 3u}) {
      Config c = small_config();
      c.workers = workers;
      c.host_queue_depth = c.device_queue_depth = depth;
      Config tuned = c;
      tuned.tune_workers = true;
      tuned.tune_window_ms = 10;
      INFO("workers " << workers << ", queues " << depth);
      within_seconds(60, [&] {
        const auto [fixed, none] = sleepy_digests(c, 300);
        const auto [got, changes] = sleepy_digests(tuned, 300);
        CHECK(got == fixed);
        if (workers > 1) CHECK(changes > 0);  // the count moved during the run
      });
    }
  }
}

TEST_CASE("pipeline: at the plan's end the tuner stops and releases the parked workers", "[autotune]") {
  Config c = small_config();
  c.workers = 4;
  c.epochs = 1;
  c.tune_workers = true;
  c.tune_window_ms = 10;
  within_seconds(30, [&] {
    Pipeline p(c, 50, {fill_pattern});
    while (p.next()) {
    }
    // The parked workers return: their parked time stops growing.
    double parked = p.stats().stages.front().parked_s;
    CHECK(eventually([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const double now = p.stats().stages.front().parked_s;
      return std::exchange(parked, now) == now;
    }));
    const std::uint64_t changes = p.stats().tune_changes;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // ten windows: none decides anything
    CHECK(p.stats().tune_changes == changes);
    CHECK(seconds_to_stop(p) < 1.0);
  });
}

TEST_CASE("pipeline: a tuned pipeline stops promptly with workers parked", "[autotune]") {
  Config c = small_config();
  // More workers than cores: the tuner starts at one a core, the rest park.
  c.workers = std::thread::hardware_concurrency() + 2;
  c.epochs = 0;
  c.tune_workers = true;
  c.tune_window_ms = 60000;  // no window ends: the extra workers stay parked, the tuner waits
  within_seconds(30, [&] {
    Pipeline p(c, 100, {fill_pattern});
    REQUIRE(p.next());
    const PipelineStats s = p.stats();
    CHECK(s.workers_active == s.cores);
    CHECK(s.workers_active < c.workers);
    CHECK(seconds_to_stop(p) < 1.0);
  });
}

// ---- the host queue's depth

namespace {
// A window in which the delivery thread waited for the workers as long as
// the consumer waited for it: the wait is the host queue's.
QueueWindow queue_window(double consumer_starved, double buffer_wait, double delivery_busy = 0.1,
                         bool consumer_seen = true) {
  QueueWindow w;
  w.consumer_seen = consumer_seen;
  w.consumer_starved = consumer_starved;
  w.buffer_wait = buffer_wait;
  w.delivery_busy = delivery_busy;
  w.delivery_starved = consumer_starved;
  return w;
}
}  // namespace

TEST_CASE("queue tuner: a consumer waiting while the workers ran out of buffers deepens the queue by the steps it missed",
          "[autotune]") {
  QueueTuner t(TunedQueue::host, 2, 12);
  CHECK(t.depth() == 2);
  std::vector<std::size_t> depths;
  for (int i = 0; i < 5; ++i) {
    TuneDecision d;
    const std::size_t before = t.depth();
    const std::size_t to = t.next(queue_window(0.30, 0.40), &d);
    depths.push_back(to);
    if (to == before) continue;  // at the ceiling: no decision
    CHECK(d.from == before);
    CHECK(d.to == to);
    CHECK(d.reason == "grow: the consumer waited 30% of the window (0.0 of its steps), the workers 40% for a free buffer");
  }
  CHECK(depths == std::vector<std::size_t>{3, 5, 9, 12, 12});  // +1, +2, +4, then the ceiling
  // The consumer's own pace says how many steps it missed: 30% of 0.2 s at
  // 8 ms a step is 7.5, so 8 batches more at once.
  QueueTuner p(TunedQueue::host, 2, 64);
  QueueWindow w = queue_window(0.30, 0.40);
  w.window_s = 0.2;
  w.consumer_step_s = 0.008;
  TuneDecision d;
  CHECK(p.next(w, &d) == 10);
  CHECK(d.reason == "grow: the consumer waited 30% of the window (7.5 of its steps), the workers 40% for a free buffer");
  CHECK(p.next(w, &d) == 26);  // windows in a row: at least double the step before
  // A window without the signature starts the step again at 1.
  QueueTuner u(TunedQueue::host, 2, 64);
  u.next(queue_window(0.3, 0.4), nullptr);
  u.next(queue_window(0.3, 0.4), nullptr);
  CHECK(u.depth() == 5);
  u.next(queue_window(0.0, 0.4), nullptr);
  CHECK(u.depth() == 5);
  u.next(queue_window(0.3, 0.4), nullptr);
  CHECK(u.depth() == 6);
}

TEST_CASE("queue tuner: slow workers, a slow transfer, a consumer that keeps up, or one away leave the depth",
          "[autotune]") {
  QueueTuner t(TunedQueue::host, 2, 8);
  TuneDecision d;
  d.reason = "untouched";
  // Workers too slow overall: the consumer waits, but they never run out of buffers.
  CHECK(t.next(queue_window(0.8, 0.0), &d) == 2);
  CHECK(t.next(queue_window(0.8, QueueTuner::kSlack / 2), &d) == 2);
  // A slow transfer: the consumer waits, the buffers queue up before the
  // delivery thread, which is busy: more of them would not help.
  CHECK(t.next(queue_window(0.5, 0.5, 0.95), &d) == 2);
  // A consumer that keeps up: the workers wait on it, it never waits.
  CHECK(t.next(queue_window(0.0, 0.9), &d) == 2);
  CHECK(t.next(queue_window(QueueTuner::kStarved / 2, 0.9), &d) == 2);
  // A consumer away takes nothing: its window decides nothing.
  CHECK(t.next(queue_window(0.5, 0.5, 0.1, false), &d) == 2);
  CHECK(d.reason == "untouched");
  // Never shallower, never past the ceiling.
  for (int i = 0; i < 10; ++i) t.next(queue_window(0.5, 0.5), nullptr);
  CHECK(t.depth() == 8);
  CHECK_THROWS_AS(QueueTuner(TunedQueue::host, 0, 4), std::invalid_argument);
  CHECK_THROWS_AS(QueueTuner(TunedQueue::device, 5, 4), std::invalid_argument);
}

namespace {
// A run over `n` samples whose filler sleeps 200 us a sample and 60 ms more
// for every 256th sample (a stalled read), with a consumer that steps 4 ms a
// batch of 8: every batch's digest, the stats at the end, and the batch
// buffers the pool had allocated then.
struct StalledRun {
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> digests;
  PipelineStats stats;
  std::size_t buffers = 0;
};
// Runs `stages` over n samples, the consumer calling step(k) after the k-th
// batch (from 1), with the pool's allocations counted.
template <class Step>
StalledRun counted_run(const Config& c, std::size_t n, StageFunctions stages, Step step) {
  auto buffers = std::make_shared<std::atomic<std::size_t>>(0);
  const auto plain = stages.allocator.allocate;
  stages.allocator.allocate = [plain, buffers](std::size_t bytes) {
    ++*buffers;
    return plain(bytes);
  };
  StalledRun r;
  Pipeline p(c, n, std::move(stages));
  std::size_t k = 0;
  while (auto b = p.next()) {
    r.digests[{(*b)->epoch, (*b)->index}] = batch_digest(**b);
    step(++k);
  }
  r.stats = p.stats();
  r.buffers = *buffers;
  return r;
}

StalledRun stalled_run(const Config& c, std::size_t n) {
  StageFunctions stages{[](Sample& s) { sleepy_fill(s, std::chrono::microseconds(s.index % 256 == 0 ? 60200 : 200)); }};
  return counted_run(c, n, std::move(stages), [](std::size_t) { std::this_thread::sleep_for(std::chrono::milliseconds(4)); });
}
}  // namespace

TEST_CASE("pipeline: tune_host_queue deepens the queue behind stalled reads, allocates as it goes, keeps the bytes",
          "[autotune]") {
  // A 60 ms stall is 15 of the consumer's steps: the default depth's
  // buffers (about 8 batches ahead of it) leave it waiting at every stall;
  // the workers (4 x 5,000 samples/s against the consumer's 2,000) run out
  // of buffers in between.
  Config c = small_config();
  c.batch_size = 8;
  c.epochs = 1;
  c.workers = 4;
  c.tune_window_ms = 50;
  Config tuned = c;
  tuned.tune_host_queue = true;
  tuned.host_queue_depth = 16;  // the ceiling
  const std::size_t n = 4096;
  within_seconds(120, [&] {
    const StalledRun fixed = stalled_run(c, n);
    const StalledRun got = stalled_run(tuned, n);
    const PipelineStats& s = got.stats;
    INFO(s.table());
    INFO(fixed.stats.table());
    CHECK(got.digests == fixed.digests);
    // The pool holds the buffers of the depth reached, not the ceiling's:
    // 4 workers + the depth + 2 + the device queue's 2.
    CHECK(fixed.buffers == 4 + 2 + 4);
    const PipelineStats::QueueTuning& q = s.host_queue_tuning;
    CHECK(got.buffers == 4 + q.depth + 4);
    CHECK(q.ceiling == 16);
    CHECK(q.depth >= 8);  // 15 steps, less the 8 or so the default's buffers carry
    CHECK(q.changes >= 1);
    REQUIRE(!q.decisions.empty());
    CHECK(q.decisions.front().from == 2);
    CHECK(q.decisions.back().to == q.depth);
    CHECK(q.decisions.front().reason.rfind("grow: the consumer waited ", 0) == 0);
    CHECK(s.table().find("host queue tuned: depth " + std::to_string(q.depth) + " of at most 16") != std::string::npos);
    CHECK(s.device_queue_tuning.depth == 0);  // not tuned: none reported
    CHECK(fixed.stats.host_queue_tuning.depth == 0);
  });
}

// ---- the device queue's depth

TEST_CASE("queue tuner: a wait behind the transfer deepens the device queue, one behind the workers the host queue",
          "[autotune]") {
  // The consumer waited 30% of the window while the batches sat in the host
  // queue (the delivery thread never waited for the workers) and the
  // transfer had waited 40% for room in the device queue: the device
  // queue's wait, which the host queue's tuner leaves alone.
  QueueWindow burst;
  burst.consumer_seen = true;
  burst.consumer_starved = 0.30;
  burst.buffer_wait = 0.50;  // everything upstream filled up too
  burst.delivery_busy = 0.30;
  burst.delivery_blocked = 0.40;
  burst.window_s = 0.2;
  burst.consumer_step_s = 0.008;
  QueueTuner device(TunedQueue::device, 2, 64), host(TunedQueue::host, 2, 64);
  TuneDecision d;
  CHECK(device.next(burst, &d) == 10);  // 7.5 steps missed: 8 more
  CHECK(d.from == 2);
  CHECK(d.to == 10);
  CHECK(d.reason == "grow: the consumer waited 30% of the window (7.5 of its steps), the transfer 40% for room");
  CHECK(host.next(burst, nullptr) == 2);
  // The delivery thread waited for the workers (half the consumer's wait or
  // more): the host queue's, not the device queue's.
  QueueWindow stalled = burst;
  stalled.delivery_starved = QueueTuner::kBehindWorkers * stalled.consumer_starved;
  QueueTuner device2(TunedQueue::device, 2, 64);
  CHECK(device2.next(stalled, nullptr) == 2);
  CHECK(host.next(stalled, nullptr) == 10);
  // A transfer that never waited for room, or one too slow overall, or a
  // consumer that keeps up: no queue helps.
  QueueWindow never_ahead = burst;
  never_ahead.delivery_blocked = QueueTuner::kSlack / 2;
  CHECK(device2.next(never_ahead, nullptr) == 2);
  QueueWindow slow = burst;
  slow.delivery_busy = QueueTuner::kDeliveryBusy;
  CHECK(device2.next(slow, nullptr) == 2);
  QueueWindow keeps_up = burst;
  keeps_up.consumer_starved = QueueTuner::kStarved / 2;
  CHECK(device2.next(keeps_up, nullptr) == 2);
  QueueWindow away = burst;
  away.consumer_seen = false;
  CHECK(device2.next(away, nullptr) == 2);
}

namespace {
// A run over `n` samples, filled fast, whose transfer takes 1 ms a batch of
// 8 and whose consumer's steps come in bursts: every 16th takes 40 ms, the
// others nothing (an evaluation, a checkpoint, a log flush every so many
// steps). The transfer keeps up on average (16 ms of it to 40 ms of steps),
// but with 2 batches queued after a long step the next 13 wait for it.
StalledRun bursty_run(const Config& c, std::size_t n) {
  StageFunctions stages{[](Sample& s) { sleepy_fill(s, std::chrono::microseconds(20)); }};
  stages.transfer = [](Batch&) { std::this_thread::sleep_for(std::chrono::milliseconds(1)); };
  return counted_run(c, n, std::move(stages), [](std::size_t k) {
    if (k % 16 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(40));
  });
}
}  // namespace

TEST_CASE("pipeline: tune_device_queue deepens the queue behind a bursty consumer, allocates as it goes, keeps the bytes",
          "[autotune]") {
  Config c = small_config();
  c.batch_size = 8;
  c.epochs = 1;
  c.workers = 2;
  c.tune_window_ms = 50;
  Config tuned = c;
  tuned.tune_device_queue = true;
  tuned.device_queue_depth = 16;  // the ceiling
  const std::size_t n = 3072;
  within_seconds(120, [&] {
    const StalledRun fixed = bursty_run(c, n);
    const StalledRun got = bursty_run(tuned, n);
    const PipelineStats& s = got.stats;
    INFO(s.table());
    INFO(fixed.stats.table());
    CHECK(got.digests == fixed.digests);
    const PipelineStats::QueueTuning& q = s.device_queue_tuning;
    // The pool: 2 workers + the host queue's 2 + the depth reached + 2.
    CHECK(fixed.buffers == 2 + 2 + 2 + 2);
    CHECK(got.buffers == 2 + 2 + q.depth + 2);
    CHECK(q.ceiling == 16);
    CHECK(q.depth >= 5);  // the first step alone adds the 4 or 5 steps a window's wait missed
    REQUIRE(!q.decisions.empty());
    CHECK(q.decisions.front().from == 2);
    CHECK(q.decisions.back().to == q.depth);
    CHECK(q.decisions.front().reason.find("the transfer") != std::string::npos);
    CHECK(s.table().find("device queue tuned: depth " + std::to_string(q.depth) + " of at most 16") != std::string::npos);
    // The queue opened as many slots as the depth: never more batches waited.
    for (const NamedQueueStats& queue : s.queues) {
      if (queue.name != "device queue") continue;
      CHECK(queue.stats.capacity == q.depth);
      CHECK(queue.stats.high_water <= q.depth);
    }
    CHECK(s.host_queue_tuning.depth == 0);
    CHECK(fixed.stats.device_queue_tuning.depth == 0);
  });
}

TEST_CASE("config: tune_device_queue starts at 2 (or the ceiling), the pool and the device slots at that depth's",
          "[autotune]") {
  Config c = small_config();  // 3 workers, queues of 2
  c.tune_device_queue = true;
  c.device_queue_depth = 10;
  CHECK(c.device_queue_start() == 2);
  CHECK(c.device_buffer_count() == 12);  // the ceiling's, which the memory budget counts
  CHECK(c.device_buffer_start() == 4);
  CHECK(c.host_buffer_count() == 3 + 2 + 12);
  CHECK(c.host_buffer_start() == 3 + 2 + 4);
  c.tune_host_queue = true;  // both: each leaves out its depths above the start
  c.host_queue_depth = 6;
  CHECK(c.host_buffer_start() == 3 + 2 + 4);
  c.tune_host_queue = false;
  c.host_buffers = 7;  // fixed: the device queue grows within it
  CHECK(c.host_buffer_start() == 7);
  c.host_buffers = 0;
  c.device_queue_depth = 1;
  CHECK(c.device_queue_start() == 1);
  CHECK(c.device_buffer_start() == c.device_buffer_count());
  c.tune_device_queue = false;
  c.device_queue_depth = 10;
  CHECK(c.device_queue_start() == 10);
  CHECK(c.device_buffer_start() == c.device_buffer_count());
  c.tune_device_queue = true;
  c.device_buffers = 20;
  CHECK_THROWS_WITH(c.validate(), Catch::Matchers::Contains("device_buffers") &&
                                      Catch::Matchers::Contains("tune_device_queue"));
}

TEST_CASE("config: tune_host_queue starts at 2 (or the ceiling), its pool at that depth's buffers", "[autotune]") {
  Config c = small_config();  // 3 workers, queues of 2
  c.tune_host_queue = true;
  c.host_queue_depth = 10;
  CHECK(c.host_queue_start() == 2);
  CHECK(c.host_buffer_count() == 3 + 10 + 4);  // the ceiling's, which the memory budget counts
  CHECK(c.host_buffer_start() == 3 + 2 + 4);
  c.host_queue_depth = 1;
  CHECK(c.host_queue_start() == 1);
  CHECK(c.host_buffer_start() == c.host_buffer_count());
  c.tune_host_queue = false;
  c.host_queue_depth = 10;
  CHECK(c.host_queue_start() == 10);
  CHECK(c.host_buffer_start() == c.host_buffer_count());
  c.tune_host_queue = true;
  c.host_buffers = 20;
  CHECK_THROWS_WITH(c.validate(), Catch::Matchers::Contains("host_buffers") &&
                                      Catch::Matchers::Contains("tune_host_queue"));
}

TEST_CASE("config: tune_window_ms out of range names the field", "[autotune]") {
  Config c = small_config();
  c.tune_window_ms = 5;
  CHECK_THROWS_WITH(c.validate(), "config: tune_window_ms must be 10 .. 60000 (got 5)");
}
