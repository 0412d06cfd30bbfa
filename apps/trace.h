// Tracer: a Chrome Trace Event JSON file (opens in Perfetto and
// chrome://tracing) written as the run goes: a span per sample decode on each
// worker thread, per transfer, per consumer step, and a counter per queue depth.
//
// Contract.
// - Events go to the file as they come (through stdio's buffer), so memory
//   stays flat however long the run: `--epochs 100000 --trace t.json` no longer
//   grows by every event.
// - The file is valid JSON once finish() ran, or the Tracer was destroyed
//   (an error unwinding the run, SIGINT/SIGTERM ending it early).
// - A failed write (a full disk, /dev/full) sticks: later events are dropped,
//   and finish() throws std::runtime_error "--trace: cannot write FILE: reason".
// Thread safety: span(), counter() and thread() may be called from any thread.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>

#include "pipeline/stats.h"

namespace conveyor::apps {

class Tracer {
 public:
  // Creates (truncates) file and writes the header. Throws UsageError when it cannot be opened.
  explicit Tracer(std::string file);
  // Closes the file as finish() does, without throwing.
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  void thread(int tid, const std::string& name);
  void span(const char* name, int tid, Clock::time_point a, Clock::time_point b, const std::string& args = "");
  void counter(const char* name, Clock::time_point t, double value);
  // Writes the closing bracket and closes the file; throws std::runtime_error
  // naming the file when any write failed. Idempotent.
  void finish();

 private:
  std::string us(Clock::time_point t) const;
  void add(const std::string& event);
  // Closes with the footer; returns the errno of the first failed write, or 0.
  int close_file();

  std::string file_;
  Clock::time_point origin_;
  std::mutex mu_;
  std::FILE* out_ = nullptr;  // guarded by mu_
  bool first_ = true;         // guarded by mu_
  int error_ = 0;             // guarded by mu_: errno of the first failed write
};

}  // namespace conveyor::apps
