#include "apps/trace.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "apps/cli.h"

namespace conveyor::apps {

Tracer::Tracer(std::string file) : file_(std::move(file)), origin_(Clock::now()), atomic_(std::make_unique<AtomicFile>(file_)) {
  out_ = atomic_->stream();
  if (!out_) throw UsageError("--trace " + file_ + ": cannot write there: " + std::strerror(atomic_->error()));
  if (std::fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", out_) < 0) error_ = errno;
}

Tracer::~Tracer() { (void)close_file(); }

void Tracer::thread(int tid, const std::string& name) {
  add("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":\"" +
      name + "\"}}");
}

void Tracer::span(const char* name, int tid, Clock::time_point a, Clock::time_point b, const std::string& args) {
  add(std::string("{\"ph\":\"X\",\"name\":\"") + name + "\",\"pid\":1,\"tid\":" + std::to_string(tid) +
      ",\"ts\":" + us(a) + ",\"dur\":" + std::to_string(std::chrono::duration<double, std::micro>(b - a).count()) +
      (args.empty() ? "" : ",\"args\":{" + args + "}") + "}");
}

void Tracer::counter(const char* name, Clock::time_point t, double value) {
  add(std::string("{\"ph\":\"C\",\"name\":\"") + name + "\",\"pid\":1,\"ts\":" + us(t) +
      ",\"args\":{\"depth\":" + std::to_string(value) + "}}");
}

void Tracer::finish() {
  if (const int err = close_file(); err != 0) {
    throw std::runtime_error("--trace: cannot write " + file_ + ": " + std::strerror(err));
  }
}

std::string Tracer::us(Clock::time_point t) const {
  return std::to_string(std::chrono::duration<double, std::micro>(t - origin_).count());
}

void Tracer::add(const std::string& event) {
  std::lock_guard lk(mu_);
  if (!out_ || error_ != 0) return;  // closed, or a write failed: finish() reports it
  if ((!first_ && std::fputs(",\n", out_) < 0) || std::fputs(event.c_str(), out_) < 0) error_ = errno;
  first_ = false;
}

int Tracer::close_file() {
  std::lock_guard lk(mu_);
  if (!out_) return error_;
  if (std::fputs("\n]}\n", out_) < 0 && error_ == 0) error_ = errno;
  out_ = nullptr;
  if (error_ != 0) {
    atomic_->discard();  // the file as it was before the run
  } else {
    error_ = atomic_->commit();
  }
  return error_;
}

PipelineTrace::PipelineTrace(const std::string& file, std::size_t workers) : tracer_(file), fill_started_(workers) {
  tracer_.thread(1, "consumer");
  tracer_.thread(2, "transfer");
  for (std::size_t w = 0; w < workers; ++w) tracer_.thread(int(10 + w), "worker " + std::to_string(w));
}

PipelineTrace::~PipelineTrace() { stop_sampling(); }

void PipelineTrace::on_entry(const WorkItem& item) noexcept {
  if (item.what == Work::fill && item.worker < fill_started_.size()) fill_started_[item.worker] = Clock::now();
}

void PipelineTrace::on_exit(const WorkItem& item) noexcept {
  if (item.what != Work::fill || item.worker >= fill_started_.size()) return;
  try {
    tracer_.span("decode", int(10 + item.worker), fill_started_[item.worker], Clock::now(),
                 "\"sample\":" + std::to_string(item.index) + ",\"epoch\":" + std::to_string(item.epoch));
  } catch (...) {  // out of memory for the event's text: the trace misses one span, the run goes on
  }
}

void PipelineTrace::on_transferred(const Batch& b, Clock::time_point a, Clock::time_point z) noexcept {
  try {
    tracer_.span("transfer", 2, a, z, "\"batch\":" + std::to_string(b.index) + ",\"epoch\":" + std::to_string(b.epoch));
  } catch (...) {  // as on_exit
  }
}

void PipelineTrace::step(std::uint64_t batch, Clock::time_point a, Clock::time_point b) {
  tracer_.span("step", 1, a, b, "\"batch\":" + std::to_string(batch));
}

void PipelineTrace::start_sampling(const DevicePipeline& pipeline) {
  sampling_ = true;
  // Queue depths: pushes - pops of each queue.
  sampler_ = std::thread([this, &pipeline] {
    // At least one sample however short the run: a run over before this thread first ran
    // (a 30-sample run on a loaded 2-core machine) left the trace without counters.
    do {
      const auto now = Clock::now();
      for (const auto& q : pipeline.stats().queues) {
        tracer_.counter(q.name.c_str(), now, double(q.stats.pushes) - double(q.stats.pops));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    } while (sampling_.load());
  });
}

void PipelineTrace::stop_sampling() {
  sampling_ = false;
  if (sampler_.joinable()) sampler_.join();
}

void PipelineTrace::finish() {
  stop_sampling();
  tracer_.finish();
}

}  // namespace conveyor::apps
