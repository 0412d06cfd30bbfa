// The host backend's streams, for code above the Device that runs work of its
// own on them: the kernels' host twins (device/kernels/*_host.cpp) and the GPU
// decode path's (gpu_decode/host_jpeg_decoder.cpp) run on a stream as their
// CUDA twins launch a kernel there. The CUDA backend's counterpart is
// device/cuda_handles.h.
//
// `stream` must come from the host backend (its create_stream() or
// wrap_stream()); anything else is undefined. Thread safety: as the stream's,
// one thread at a time.
#pragma once

#include <functional>

#include "device/device.h"

namespace conveyor {

// Runs `op` on `stream` after the work already there (inline, before it
// returns, on a wrapped nullptr stream). An exception from `op` is the
// stream's error, thrown by a later enqueue or drain. Allocates (the queued
// function). Throws the stream's earlier error.
void host_stream_enqueue(Stream& stream, std::function<void()> op);

// Blocks until everything enqueued on `stream` so far has run. Throws the
// stream's error.
void host_stream_drain(Stream& stream);

}  // namespace conveyor
