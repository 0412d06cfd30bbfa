// conveyor-bench-core: the core's two benchmarks (docs/benchmarks.md).
//
//   overlap   stages with known, sleep-based costs; compares the epoch's wall
//             time with the pipeline bound sum + (n - 1) * slowest and with the
//             serial sum n * sum.
//   overhead  a no-op filler and consumer: what the pipeline itself costs per
//             batch and per sample. --wait-yields 0,16 alternates the values
//             run by run and gives each one's median and the ratio to the first.
//
// Each runs --runs times and prints every run and the median.
#include <algorithm>
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/median.h"
#include "apps/synthetic.h"

using namespace conveyor;

namespace {

using apps::median;

int overlap(const Config& base, std::size_t batches, const apps::SyntheticCosts& costs, int runs) {
  Config c = base;
  c.epochs = 1;
  c.shuffle = false;
  const double worker_ms = costs.sample_ms * double(c.batch_size) / double(c.workers);
  const double slowest = std::max({worker_ms, costs.transfer_ms, costs.step_ms});
  const double sum = worker_ms + costs.transfer_ms + costs.step_ms;
  const double bound_s = (sum + double(batches - 1) * slowest) / 1000.0;
  const double serial_s = double(batches) * (costs.sample_ms * double(c.batch_size) + costs.transfer_ms + costs.step_ms) / 1000.0;
  std::printf("overlap: %zu batches of %zu, %zu workers, %.2f ms/sample (%.2f ms/batch), transfer %.2f ms, step %.2f ms\n",
              batches, c.batch_size, c.workers, costs.sample_ms, worker_ms, costs.transfer_ms, costs.step_ms);
  std::printf("bound (sum + (n-1) * slowest) %.3f s; serial (n * sum, one thread) %.3f s\n", bound_s, serial_s);
  std::vector<double> walls;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    Pipeline p(c, batches * c.batch_size, apps::synthetic_stages(costs));
    std::size_t got = 0;
    while (auto b = p.next()) {
      apps::sleep_ms(costs.step_ms);
      ++got;
    }
    const double wall = apps::seconds_since(t0);
    if (got != batches) {
      std::fprintf(stderr, "overlap: expected %zu batches, got %zu\n", batches, got);
      return 1;
    }
    walls.push_back(wall);
    std::printf("run %d: %.3f s = %.3f x bound, serial / measured = %.2f; %s\n", r + 1, wall, wall / bound_s,
                serial_s / wall, p.stats().bottleneck_summary().c_str());
  }
  const double m = median(walls);
  std::printf("median of %d: %.3f s = %.3f x bound (%.1f%% over), serial / measured = %.2f\n", runs, m, m / bound_s,
              100.0 * (m / bound_s - 1.0), serial_s / m);
  return 0;
}

int overhead(const Config& base, std::size_t batches, int runs, const std::vector<std::size_t>& yields,
             bool show_stats) {
  Config c = base;
  c.epochs = 1;
  c.sample_bytes = 0;
  std::printf("overhead: no-op filler and consumer, %zu batches of %zu, %zu workers, host queue %zu, device queue %zu\n",
              batches, c.batch_size, c.workers, c.host_queue_depth, c.device_queue_depth);
  // One column per wait_yields value; the values take turns within each run so
  // that a noisy moment on a shared machine falls on all of them alike.
  std::vector<std::vector<double>> per_batch_us(yields.size()), samples_per_s(yields.size());
  for (int r = 0; r < runs; ++r) {
    for (std::size_t v = 0; v < yields.size(); ++v) {
      c.wait_yields = yields[v];
      const auto t0 = std::chrono::steady_clock::now();
      Pipeline p(c, batches * c.batch_size, StageFunctions{[](Sample&) {}});
      std::size_t got = 0, samples = 0;
      while (auto b = p.next()) {
        ++got;
        samples += (*b)->size();
      }
      const double wall = apps::seconds_since(t0);
      if (got != batches) {
        std::fprintf(stderr, "overhead: expected %zu batches, got %zu\n", batches, got);
        return 1;
      }
      per_batch_us[v].push_back(wall * 1e6 / double(got));
      samples_per_s[v].push_back(double(samples) / wall);
      std::printf("run %d, wait_yields %zu: %.3f s, %.0f batches/s, %.0f samples/s, %.2f us/batch\n", r + 1, yields[v],
                  wall, double(got) / wall, double(samples) / wall, wall * 1e6 / double(got));
      if (show_stats && r + 1 == runs) std::printf("%s\n", p.stats().table().c_str());
    }
  }
  for (std::size_t v = 0; v < yields.size(); ++v) {
    const double us = median(per_batch_us[v]);
    std::printf("median of %d, wait_yields %zu: %.0f batches/s, %.0f samples/s, %.2f us/batch", runs, yields[v],
                1e6 / us, median(samples_per_s[v]), us);
    if (v > 0) std::printf(" (%.2fx the first's time)", us / median(per_batch_us[0]));
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"conveyor-bench-core: the pipeline core's overlap and overhead benchmarks"};
  app.require_subcommand(1);
  int runs = 5;
  app.add_option("--runs", runs, "repetitions; the median is reported")->capture_default_str()->check(CLI::PositiveNumber);

  Config oc;
  oc.workers = 4;
  oc.batch_size = 8;
  std::size_t o_batches = 200;
  apps::SyntheticCosts costs{2.0, 3.0, 5.0};
  auto* ov = app.add_subcommand("overlap", "sleep-based stage costs against the pipeline bound");
  ov->add_option("--workers", oc.workers)->capture_default_str();
  ov->add_option("--batch", oc.batch_size)->capture_default_str();
  ov->add_option("--batches", o_batches)->capture_default_str();
  ov->add_option("--sample-ms", costs.sample_ms)->capture_default_str();
  ov->add_option("--transfer-ms", costs.transfer_ms)->capture_default_str();
  ov->add_option("--step-ms", costs.step_ms)->capture_default_str();

  Config hc;
  hc.workers = 2;
  hc.batch_size = 64;
  std::size_t h_batches = 50000;
  auto* oh = app.add_subcommand("overhead", "no-op stages: the pipeline's own cost");
  oh->add_option("--workers", hc.workers)->capture_default_str();
  oh->add_option("--batch", hc.batch_size)->capture_default_str();
  oh->add_option("--batches", h_batches)->capture_default_str();
  oh->add_option("--host-queue", hc.host_queue_depth)->capture_default_str();
  oh->add_option("--device-queue", hc.device_queue_depth)->capture_default_str();
  std::vector<std::size_t> yields{hc.wait_yields};
  oh->add_option("--wait-yields", yields, "Config::wait_yields; a comma list alternates the values run by run")
      ->delimiter(',')
      ->capture_default_str();
  bool show_stats = false;
  oh->add_flag("--stats", show_stats, "print the last run's stage and queue table");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "conveyor-bench-core: %s\n", e.what());
    return 2;
  }
  try {
    if (ov->parsed()) return overlap(oc, o_batches, costs, runs);
    return overhead(hc, h_batches, runs, yields, show_stats);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conveyor-bench-core: %s\n", e.what());
    return 1;
  }
}
