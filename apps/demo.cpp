// conveyor-demo: the pipeline on synthetic stages of known cost, so you can see
// loading, transfer and the training step overlap. Prints a line per epoch and
// the stage stats, and compares the wall time with running the stages in turn.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "apps/synthetic.h"

using namespace conveyor;

int main(int argc, char** argv) {
  Config c;
  c.workers = 4;
  c.batch_size = 32;
  c.sample_bytes = 3 * 64 * 64;
  c.epochs = 3;
  std::size_t samples = 2048;
  apps::SyntheticCosts costs{1.0, 2.0, 6.0};

  CLI::App app{
      "conveyor-demo: the pipeline on synthetic stages of known cost.\n"
      "Example: conveyor-demo --workers 8 --sample-ms 1 --step-ms 4"};
  app.add_option("--workers", c.workers, "decode/augment worker threads")->capture_default_str();
  app.add_option("--batch", c.batch_size, "samples per batch")->capture_default_str();
  app.add_option("--samples", samples, "dataset size")->capture_default_str();
  app.add_option("--epochs", c.epochs, "epochs to run")->capture_default_str();
  app.add_option("--host-queue", c.host_queue_depth, "batches ready for transfer")->capture_default_str();
  app.add_option("--device-queue", c.device_queue_depth, "batches ready for the consumer")->capture_default_str();
  app.add_option("--seed", c.seed, "seed of the epoch order and the per-sample streams")->capture_default_str();
  app.add_option("--sample-ms", costs.sample_ms, "simulated decode time per sample")->capture_default_str();
  app.add_option("--transfer-ms", costs.transfer_ms, "simulated transfer time per batch")->capture_default_str();
  app.add_option("--step-ms", costs.step_ms, "simulated training step per batch")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "conveyor-demo: %s\n", e.what());
    return 2;
  }

  try {
    std::printf("conveyor-demo: %zu samples, batch %zu, %zu workers, host queue %zu, device queue %zu\n", samples,
                c.batch_size, c.workers, c.host_queue_depth, c.device_queue_depth);
    std::printf("stage costs: %.2f ms/sample (%.2f ms/batch over %zu workers), transfer %.2f ms/batch, step %.2f ms/batch\n",
                costs.sample_ms, costs.sample_ms * double(c.batch_size) / double(c.workers), c.workers,
                costs.transfer_ms, costs.step_ms);
    const auto t0 = std::chrono::steady_clock::now();
    Pipeline p(c, samples, apps::synthetic_stages(costs));
    std::size_t total_batches = 0;
    for (std::uint64_t e = 0; e < c.epochs; ++e) {
      const auto te = std::chrono::steady_clock::now();
      std::size_t batches = 0, n = 0;
      for (auto& b : p.epoch(e)) {
        apps::sleep_ms(costs.step_ms);  // the "training step"
        ++batches;
        n += b->size();
      }
      total_batches += batches;
      const double s = apps::seconds_since(te);
      const auto st = p.stats();
      std::printf("epoch %llu: %zu batches, %zu samples in %.2f s = %.0f samples/s; consumer waited %.0f%% so far\n",
                  (unsigned long long)e, batches, n, s, double(n) / s, 100.0 * st.stages[2].starved_fraction());
    }
    const double wall = apps::seconds_since(t0);
    const double per_batch_workers = costs.sample_ms * double(c.batch_size) / double(c.workers);
    const double serial =
        double(total_batches) * (costs.sample_ms * double(c.batch_size) + costs.transfer_ms + costs.step_ms) / 1000.0;
    const double bound =
        double(total_batches) * std::max({per_batch_workers, costs.transfer_ms, costs.step_ms}) / 1000.0;
    std::printf("\n%s", p.stats().table().c_str());
    std::printf("\nwall %.2f s; one stage at a time, single-threaded, would take %.2f s (%.1fx); the slowest stage "
                "alone bounds it at %.2f s\n",
                wall, serial, serial / wall, bound);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conveyor-demo: %s\n", e.what());
    return 1;
  }
}
