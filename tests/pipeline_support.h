// What the core pipeline's tests share: a small config, the reference check of
// a batch, digests of a whole run, and the stop and stall probes.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include "catch_compat.h"
#include "pipeline/pipeline.h"
#include "support.h"

namespace conveyor::test {

inline Config small_config() {
  Config c;
  c.batch_size = 7;
  c.sample_bytes = 24;
  c.workers = 3;
  c.seed = 3;
  c.epochs = 2;
  return c;
}

// Checks every sample of a batch against the reference bytes, indices and labels.
// Returns the number of mismatching samples (0 when the batch is right).
inline std::size_t bad_samples(const Config& c, const Batch& b, const std::vector<std::uint64_t>& order) {
  std::size_t bad = 0;
  std::vector<std::byte> want(c.sample_bytes);
  for (std::size_t j = 0; j < b.size(); ++j) {
    expected_bytes(c.seed, b.epoch, b.indices[j], want);
    const auto got = b.sample(j);
    bad += !std::equal(got.begin(), got.end(), want.begin()) || b.indices[j] != order[b.index * c.batch_size + j] ||
           b.labels[j] != std::int64_t(b.indices[j] * 3);
  }
  return bad;
}

// The consumer holds a batch and takes no more. Once the device queue is full
// and the pool has no free buffer, both stay so, and every thread ends up
// blocked: the delivery thread pushing into the device queue, the workers
// pushing into the host queue or waiting for a buffer. (Whether the host queue
// fills too depends on how many batches the delivery thread holds back to
// restore order.) Counts come from the snapshot's push and pop totals.
inline bool consumer_away_filled_everything(const PipelineStats& s) {
  const auto items = [](const NamedQueueStats& q) { return q.stats.pushes - q.stats.pops; };
  return items(s.queues[1]) == s.queues[1].stats.capacity && items(s.queues[2]) == 0;
}

inline double seconds_to_stop(Pipeline& p) {
  const auto t0 = std::chrono::steady_clock::now();
  p.stop();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Digests of every batch of the run, by (epoch, batch index).
inline std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> run_digests(const Config& c, std::size_t n) {
  Pipeline p(c, n, {fill_pattern});
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> out;
  while (auto b = p.next()) out[{(*b)->epoch, (*b)->index}] = batch_digest(**b);
  return out;
}

}  // namespace conveyor::test
