// The busy kernel: keeps the device busy for a given time on a stream, a
// stand-in for a training step of known length (benchmarks, tests).
//
// Enqueued on a Stream of `device` like any of its operations: asynchronous to
// the caller, in order with the stream's other work. On CUDA one thread spins
// on the GPU's global timer (busy.cu); on the host backend the stream's thread
// sleeps (busy_host.cpp): a GPU kernel occupies the GPU, not a CPU core, so
// the cores stay with the workers. A time that is not positive (NaN included)
// enqueues nothing. Thread safety: as the stream's, one thread at a time.
// Throws DeviceError (CUDA: the launch's, with file:line) or the host stream's
// earlier error.
#pragma once

#include "device/device.h"

namespace conveyor::kernels {

void busy(Device& device, double microseconds, Stream& stream);

}  // namespace conveyor::kernels
