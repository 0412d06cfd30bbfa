// Synthetic stages with known costs, for the demo and the core benchmarks: each
// sample, transfer and training step sleeps for a set time (so a 2-core machine
// can run many "busy" workers) and the filler writes real bytes.
#pragma once

#include <chrono>
#include <cstring>
#include <thread>

#include "pipeline/pipeline.h"

namespace conveyor::apps {

struct SyntheticCosts {
  double sample_ms = 0;    // per sample, on a worker
  double transfer_ms = 0;  // per batch, on the delivery thread
  double step_ms = 0;      // per batch, in the consumer
};

inline void sleep_ms(double ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

// A filler that writes the sample's bytes from its Rng, then waits sample_ms.
inline StageFunctions synthetic_stages(const SyntheticCosts& costs) {
  StageFunctions s;
  s.fill = [ms = costs.sample_ms](Sample& sample) {
    for (std::size_t i = 0; i < sample.data.size(); i += 8) {
      const std::uint64_t v = sample.rng.next_u64();
      std::memcpy(sample.data.data() + i, &v, std::min<std::size_t>(8, sample.data.size() - i));
    }
    sample.label = std::int64_t(sample.index % 10);
    sleep_ms(ms);
  };
  if (costs.transfer_ms > 0) s.transfer = [ms = costs.transfer_ms](Batch&) { sleep_ms(ms); };
  return s;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace conveyor::apps
