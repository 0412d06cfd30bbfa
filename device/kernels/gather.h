// The gather kernel: dst row n = src row indices[n], each row_bytes long; the
// resident dataset's batch assembly (device/resident.cpp).
//
// Enqueued on a Stream of `device` like any of its operations: asynchronous to
// the caller, in order with the stream's other work. On the host backend it
// runs on the stream's thread (gather_host.cpp); on CUDA it is a kernel
// launched on the stream (gather.cu), copying 16, 4 or 1 bytes a thread as the
// rows' alignment allows. Thread safety: as the stream's, one thread at a
// time. Never allocates device memory; the host backend allocates the queued
// operation. Throws DeviceError (CUDA: the launch's, with file:line) or the
// host stream's earlier error.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/device.h"

namespace conveyor {

// src, dst and indices are memory of the device the job runs on.
struct GatherJob {
  const std::byte* src = nullptr;
  std::byte* dst = nullptr;
  const std::uint64_t* indices = nullptr;
  std::size_t rows = 0, row_bytes = 0;
};

namespace kernels {

void gather(Device& device, const GatherJob& job, Stream& stream);

}  // namespace kernels
}  // namespace conveyor
