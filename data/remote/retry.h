// RetryPolicy: when a failed HTTP request is tried again and how long to wait
// first: timeouts, connections refused or reset, bodies cut short, 408, 429
// and 5xx are retried, with exponential backoff and jitter, up to `attempts`
// tries in all; anything else (403, 404, a name that does not resolve) fails
// at once, since trying again would only delay the same answer.
//
//   RetryPolicy p;
//   if (after_status(503) == Outcome::retry) sleep_for(p.delay(1, random()));
//
// Thread safety: values and pure functions.
#pragma once

#include <chrono>
#include <cstdint>

namespace conveyor {

enum class Outcome { retry, fail };

// How a transfer failed below HTTP (libcurl's codes sorted into these).
enum class TransportError {
  timeout,     // no connection, or no byte, within the timeout
  refused,     // nothing listens (a server restarting)
  reset,       // the connection dropped: reset, or closed mid-body
  resolve,     // the host name does not resolve
  other,       // TLS, protocol, a local error
};

struct RetryPolicy {
  // Tries in all, the first included. Default: 6.
  int attempts = 6;
  // The wait before the first retry, doubled before each next one. Default: 250 ms.
  std::chrono::milliseconds first_delay{250};
  // The most one wait may be. Default: 8 s.
  std::chrono::milliseconds max_delay{8000};

  // The wait before retry number `retry` (1 for the first): d = min(max_delay,
  // first_delay * 2^(retry - 1)), then a point in [d/2, d] that `random`
  // picks ("equal jitter": ranks that failed together spread out, and none
  // retries at once). Throws nothing.
  std::chrono::milliseconds delay(int retry, std::uint64_t random) const;
};

// What to do after an HTTP status of 400 or more: 408, 429 and 5xx retry; the
// rest fail. Throws nothing.
Outcome after_status(long status);
// What to do after a transport error: `resolve` and `other` fail, the rest retry. Throws nothing.
Outcome after_transport(TransportError error);

}  // namespace conveyor
