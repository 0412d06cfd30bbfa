#include "device/memory_budget.h"

#include <cstdio>

namespace conveyor {

std::size_t MemoryEstimate::total() const {
  return saturating_add(saturating_add(host_buffers, slots), saturating_add(device, dataset));
}

MemoryEstimate estimate_memory(const Config& config, std::size_t dataset_size, const TransferConfig& transfer,
                               const Device& device, std::size_t source_bytes) {
  const std::size_t buffers = config.host_buffer_count();
  MemoryEstimate e;
  e.host_buffers = saturating_mul(
      buffers, saturating_add(saturating_mul(config.batch_size, config.sample_bytes), label_tail_bytes(config.batch_size)));
  e.slots = saturating_mul(buffers, saturating_mul(config.batch_size, Config::kSlotBytes));
  e.device = device_pool_bytes(config, transfer, device);
  e.dataset = saturating_add(config.bookkeeping_bytes(dataset_size), source_bytes);
  return e;
}

double default_memory_limit_mb() { return double(default_pool_budget_bytes()) / double(1 << 20); }

std::string memory_refusal(const MemoryEstimate& estimate, const Config& config, const Device& device, double limit_mb,
                           const MemorySettingNames& names) {
  const double mib = double(1 << 20);
  const double need = double(estimate.total()) / mib;
  const bool given = limit_mb > 0;
  const double limit = given ? limit_mb : default_memory_limit_mb();
  if (need <= limit) return "";
  const auto amount = [](double x) {
    if (x >= 100) return std::to_string((unsigned long long)(x + 0.5));
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", x);
    return std::string(text);
  };
  // Handed over (a CPU consumer), the device slots are the host buffers themselves.
  std::string s = "the batch pools need ";
  s += amount(need);
  s += " MiB (host ";
  s += std::to_string(config.host_buffer_count());
  s += " buffers";
  if (!device.hands_over()) {
    s += " + device ";
    s += std::to_string(config.device_buffer_count());
    s += " slots";
  }
  s += " of ";
  s += names.batch;
  s += " ";
  s += std::to_string(config.batch_size);
  s += " x ";
  s += std::to_string(config.sample_bytes);
  s += " bytes a sample";
  s += names.sample_hint;
  s += ", ";
  s += names.workers;
  s += " ";
  s += std::to_string(config.workers);
  s += ", ";
  s += names.host_queue;
  s += " ";
  s += std::to_string(config.host_queue_depth);
  if (config.tune_host_queue) s += " (auto: the deepest it may go)";
  s += ", ";
  s += names.device_queue;
  s += " ";
  s += std::to_string(config.device_queue_depth);
  if (config.tune_device_queue) s += " (auto: the deepest it may go)";
  s += "; ";
  s += amount(double(saturating_add(estimate.slots, estimate.dataset)) / mib);
  s += " MiB of it per-sample bookkeeping), over ";
  s += names.limit;
  s += " ";
  s += amount(limit);
  if (!given) s += " (default: a quarter of physical memory)";
  return s;
}

}  // namespace conveyor
