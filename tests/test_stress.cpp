// 1000 start/stop cycles at random points: construct, consume a random number
// of batches (sometimes none, sometimes past an injected error), destroy. Run
// under TSan and ASan by the test command. Every cycle must finish; nothing may
// leak, hang or race.
#include <atomic>
#include <chrono>

#include "catch_compat.h"

#include "pipeline/pipeline.h"
#include "support.h"

using namespace conveyor;

TEST_CASE("stress: 1000 start/stop cycles at random points", "[stress]") {
  Rng rng(2026, 0, 0);
  std::size_t delivered = 0, errors = 0;
  double slowest_stop_s = 0;
  for (int cycle = 0; cycle < 1000; ++cycle) {
    Config c;
    c.workers = 1 + rng.below(4);
    c.batch_size = 1 + rng.below(9);
    c.sample_bytes = 16 * rng.below(3);
    c.host_queue_depth = 1 + rng.below(3);
    c.device_queue_depth = 1 + rng.below(2);
    c.host_buffers = rng.below(2) ? 0 : 1 + rng.below(4);
    c.ordered = rng.below(4) != 0;
    c.seed = std::uint64_t(cycle);
    c.epochs = rng.below(3);  // 0: endless
    const std::size_t n = rng.below(60);
    const std::uint64_t fail_at = rng.below(3) == 0 ? rng.below(60) : ~std::uint64_t{0};
    const std::size_t consume = rng.below(12);
    CAPTURE(cycle, c.workers, c.batch_size, c.host_buffers, n, consume);

    auto p = std::make_unique<Pipeline>(c, n, StageFunctions{[fail_at](Sample& s) {
                                         conveyor::test::fill_pattern(s);
                                         if (s.index == fail_at) throw std::runtime_error("injected");
                                       }});
    try {
      for (std::size_t i = 0; i < consume; ++i) {
        auto b = p->next();
        if (!b) break;
        ++delivered;
      }
    } catch (const PipelineError& e) {
      REQUIRE(e.sample() == fail_at);
      ++errors;
    }
    const auto t0 = std::chrono::steady_clock::now();
    p.reset();  // stop and join from wherever the threads are
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    slowest_stop_s = std::max(slowest_stop_s, s);
  }
  INFO("slowest stop " << slowest_stop_s << " s");
  REQUIRE(slowest_stop_s < 1.0);
  REQUIRE(delivered > 0);
  REQUIRE(errors > 0);
}
