// Device: the one interface the transfer stage and the resident dataset use to
// reach "the device", with two backends chosen once at start (open_device):
//
//   cuda  a CUDA GPU: pinned host memory from cudaHostAlloc, device memory,
//         non-blocking streams, events (device/cuda_device.cu);
//   host  no GPU: "device" memory is host memory and each stream is a thread
//         that runs its operations in order (device/host_device.cpp), with the
//         same ordering semantics, an optional simulated link (link_gbps) and,
//         for tests, random delays before every operation.
//
// The hardware alone: memory, streams, events, copies, record/wait/synchronize.
// Kernels are not its methods: each is a header of device/kernels/ with a host
// twin and a CUDA twin that run on a Stream of this interface, so a new one is
// new files there, never a change here. It knows nothing of images or their
// decoders: the GPU decode path builds on it from gpu_decode/.
//
// The semantics are CUDA's, so the ordering logic above this interface exists
// once (device/device_pipeline.cpp) and the host backend's tests exercise it:
// operations on one Stream run in order and asynchronously to the caller;
// record(e, s) marks e complete when s reaches that point; wait(s, e) makes s
// wait, without blocking the caller, for the latest record of e issued before
// the call (an event never recorded counts as complete); synchronize(e) blocks
// the calling thread until then.
//
// Ownership: objects a Device creates (Buffer, Stream, Event) must die before it;
// they are RAII handles, freed in their destructors. Thread safety: a Device is
// thread-safe; one Stream is used by one thread at a time. Methods marked
// "start-up" allocate or synchronize and must stay out of the steady state.
// Errors throw DeviceError; for CUDA its what() names the call, file:line and
// cudaGetErrorString.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "pipeline/batch.h"

namespace conveyor {

class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class BackendChoice { automatic, cuda, host };
enum class Backend { cuda, host };
// "auto", "cuda", "host"; empty for anything else.
std::optional<BackendChoice> parse_backend(std::string_view s);

// What the host backend does with a batch that reaches the transfer stage.
enum class HostTransfer {
  copy,      // copy it into the slot's "device" buffer, as the CUDA backend does
  handover,  // hand the host buffer itself to the consumer: no copy (consumer on the CPU)
};

struct DeviceConfig {
  // Which backend. auto probes for a CUDA device once and falls back to host.
  // Default: automatic.
  BackendChoice backend = BackendChoice::automatic;

  // CUDA device ordinal, numbered as CUDA_VISIBLE_DEVICES shows them. Any but
  // 0 names a GPU on purpose: auto then opens it or fails (no CUDA device, or
  // a host-only option below), never falling back to host. Default: 0.
  int cuda_device = 0;

  // Host backend: copy or hand over. Default: copy. handover is a host-only
  // option: under auto it chooses the host backend by itself.
  HostTransfer host_transfer = HostTransfer::copy;

  // Hand over instead of copying *if* the host backend is the one opened (asked
  // for, or auto's fallback), without choosing it: for a consumer that reads
  // batches on the CPU whatever the backend, such as the Python Loader. Ignored
  // on cuda. Default: false.
  bool handover_if_host = false;

  // Host backend: simulated host-to-device link in GB/s (1e9 bytes/s); every
  // copy takes at least bytes / bandwidth. Default: 0, no simulated link;
  // otherwise kMinLinkGbps .. kMaxLinkGbps. A copy sleeps while its stream
  // runs, so a slower link would make one batch (and a stop that waits for it)
  // last minutes: 10 MB/s is already a thousand times below PCIe.
  static constexpr double kMinLinkGbps = 0.01, kMaxLinkGbps = 1e6;
  double link_gbps = 0;

  // Write 0xA5 over every buffer the consumer releases (device and host), so a
  // stage that reads released memory sees garbage. A debugging aid; costs one
  // memset per buffer. Default: false.
  bool poison_released = false;

  // Host backend, for tests: each stream operation first sleeps a random
  // 0..max_delay_us microseconds drawn from delay_seed. Default: 0 (none).
  // At most kMaxDelayUs (one second), so a stop never waits longer.
  static constexpr std::uint32_t kMaxDelayUs = 1000000;
  std::uint32_t max_delay_us = 0;
  std::uint64_t delay_seed = 1;
};

// A block of device memory (host memory on the host backend). Freed on destruction.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() const = 0;
  virtual std::size_t bytes() const = 0;
};

// An ordered queue of device work. Destroying an owning Stream waits for its work.
class Stream {
 public:
  virtual ~Stream() = default;
  // cudaStream_t on CUDA; the HostStream* on the host backend (nullptr: the
  // caller's thread). Code above device/ that runs work of its own on a stream
  // (gpu_decode/'s decoders) reaches it through this: device/cuda_handles.h on
  // CUDA, device/host_stream.h on the host backend.
  virtual void* native() const = 0;
};

class Event {
 public:
  virtual ~Event() = default;
};

enum class EventKind {
  sync,    // cudaEventDisableTiming | cudaEventBlockingSync: ordering only
  timing,  // cudaEventBlockingSync with timing, for benchmarks
};

class Device {
 public:
  virtual ~Device() = default;

  virtual Backend backend() const = 0;
  // One line: which backend, which device, and why it was chosen.
  virtual std::string describe() const = 0;
  // True when the host backend hands host buffers over instead of copying.
  virtual bool hands_over() const { return false; }
  virtual bool poisons_released() const { return false; }
  // The CUDA device ordinal; -1 on the host backend.
  virtual int ordinal() const = 0;

  // Every call of a Device runs on that device from any thread and leaves the
  // thread's current device as it found it (on CUDA, a scoped guard: the
  // device's primary context made current through the driver, the thread's
  // context, null included, put back; cudaGetDevice/cudaSetDevice only before
  // CUDA 12, docs/cuda.md). bind_thread() makes this device current for good
  // (cudaSetDevice, not undone): only for a thread the caller owns outright,
  // such as the delivery thread, where it spares each later call the switch.
  // Cheap; never allocates.
  virtual void bind_thread() = 0;

  // ---- start-up only: these allocate and may synchronize the whole device
  // Host memory the device copies from fastest (pinned on CUDA). Throws on failure.
  virtual void* allocate_host(std::size_t bytes) = 0;
  virtual void free_host(void* p) noexcept = 0;
  virtual std::unique_ptr<Buffer> allocate(std::size_t bytes) = 0;
  // As allocate_host and allocate, for a start-up that must stay interruptible
  // (a pipeline's pools, hundreds of MB): `interrupted` (when set) is polled
  // before the allocation and, where the backend first touches the memory
  // itself (host), between chunks of that touch; true frees what was taken
  // and throws Interrupted (pipeline/batch.h). By default: one poll, then the
  // plain call.
  virtual void* allocate_host_interruptibly(std::size_t bytes, const Interrupt& interrupted);
  virtual std::unique_ptr<Buffer> allocate_interruptibly(std::size_t bytes, const Interrupt& interrupted);
  virtual std::unique_ptr<Stream> create_stream() = 0;  // non-blocking
  virtual std::unique_ptr<Event> create_event(EventKind kind = EventKind::sync) = 0;
  // Wraps a stream the caller owns (see Stream::native); not destroyed with the
  // handle. Streams of this device only. Throws DeviceError for CUDA's
  // per-thread default stream (cudaStreamPerThread, 0x2): it names another
  // stream on each thread, and a release may run on any thread; and, with
  // CUDA 12.8 or later (cudaStreamGetDevice), for a stream of another device,
  // naming both devices (before 12.8 such a stream fails at its first record).
  virtual std::unique_ptr<Stream> wrap_stream(void* native) = 0;

  // ---- steady state: enqueue on `stream` and return; never allocate
  virtual void copy_to_device(void* dst, const void* src, std::size_t bytes, Stream& stream) = 0;
  virtual void copy_to_host(void* dst, const void* src, std::size_t bytes, Stream& stream) = 0;
  // A memset on the stream: bytes of dst set to value.
  virtual void set_bytes(void* dst, unsigned char value, std::size_t bytes, Stream& stream) = 0;

  virtual void record(Event& event, Stream& stream) = 0;
  virtual void wait(Stream& stream, Event& event) = 0;  // the stream waits; the caller does not
  virtual void synchronize(Event& event) = 0;           // the caller blocks (no spinning)
  virtual void synchronize(Stream& stream) = 0;
  // Milliseconds between two completed timing events.
  virtual double elapsed_ms(Event& start, Event& end) = 0;
};

// What open_device found when it probed for CUDA.
struct CudaProbe {
  bool built_with_cuda = false;
  int devices = 0;
  int error = 0;           // cudaGetDeviceCount's return code
  std::string error_name;  // e.g. "cudaErrorInsufficientDriver"
  std::string explain() const;  // "no CUDA device: cudaGetDeviceCount returned 35 (cudaErrorInsufficientDriver)"
};
// Probes once (cudaGetDeviceCount, count initialised to 0); no other CUDA call.
CudaProbe probe_cuda();

// Chooses and opens the backend. auto: cuda when the probe finds a device,
// else host, making no further CUDA call. cuda with no device, or a
// cuda_device out of range: DeviceError, one line naming the reason. Host-only
// options with the cuda backend, a field out of its range (link_gbps,
// max_delay_us) or an enum holding no enumerator: ConfigError-like
// std::invalid_argument naming the field.
std::shared_ptr<Device> open_device(const DeviceConfig& config);

}  // namespace conveyor
