// MemoryBudget: the host memory a DevicePipeline will take, estimated from its
// settings before anything is allocated, and the one check of that estimate
// against a limit, shared by the command line (--max-memory-mb) and the Python
// module (max_memory_mb=), each with its own names for the settings.
//
// The estimate counts everything that grows with the batch or the dataset:
// the host buffers (pixels and label tails), every buffer's per-slot index,
// label and skip pointer, the device slots (host memory on the host backend),
// the epoch's order, the plan and position, the workers' read-ahead lists, and
// what the caller's source keeps per sample. All of it is resident once the
// first batch is out (the pools are first touched as they are built), so the
// estimate is what the process grows by then; tests/test_memory_budget.cpp and
// python/tests/test_memory_budget.py hold it to within 25% of the measured
// peak RSS. Not counted: what does not grow with either (threads, the decoders'
// per-worker scratch, a few MiB), and the dataset's own tables, which exist
// before the check.
//
// Thread safety: pure functions; they allocate only their result.
#pragma once

#include <cstddef>
#include <string>

#include "device/device.h"
#include "device/device_pipeline.h"
#include "pipeline/config.h"

namespace conveyor {

struct MemoryEstimate {
  std::size_t host_buffers = 0;  // host_buffer_count() x (batch_size x sample_bytes + label tail)
  std::size_t slots = 0;         // host_buffer_count() x batch_size x Config::kSlotBytes
  std::size_t device = 0;        // device_pool_bytes(): the device slots
  std::size_t dataset = 0;       // Config::bookkeeping_bytes() plus the source's bytes
  // The sum, saturating at SIZE_MAX. Throws nothing.
  std::size_t total() const;
};

// The estimate for a DevicePipeline(config, dataset_size, ..., transfer,
// device), whose source keeps source_bytes of its own that grow with the
// dataset (the Python module's copy of the labels: 8 a sample). Saturates
// instead of overflowing, for a config validate() refuses too. Throws nothing.
MemoryEstimate estimate_memory(const Config& config, std::size_t dataset_size, const TransferConfig& transfer,
                               const Device& device, std::size_t source_bytes = 0);

// How a surface names the settings a refusal mentions: "--batch" on the
// command line, "batch_size" in Python. sample_hint follows "bytes a sample"
// (the command's " (--crop)").
struct MemorySettingNames {
  std::string batch, sample_hint, workers, host_queue, device_queue, limit;
};

// The default ceiling, default_pool_budget_bytes(), in MiB.
double default_memory_limit_mb();

// "" when estimate.total() is within limit_mb (the default ceiling when
// limit_mb is 0); otherwise the one-line refusal: "the batch pools need N MiB
// (host H buffers + device D slots of <batch> B x S bytes a sample, ...,
// M MiB of it per-sample bookkeeping), over <limit> L", with " (default: a
// quarter of physical memory)" when no limit was given. MiB read as a person
// reads them: whole from 100 up, else 3 digits (a limit of 1.5 reads 1.5).
std::string memory_refusal(const MemoryEstimate& estimate, const Config& config, const Device& device, double limit_mb,
                           const MemorySettingNames& names);

}  // namespace conveyor
