#include "data/remote/retry.h"

#include <algorithm>

namespace conveyor {

std::chrono::milliseconds RetryPolicy::delay(int retry, std::uint64_t random) const {
  const auto first = std::max<std::int64_t>(0, first_delay.count()), most = std::max<std::int64_t>(0, max_delay.count());
  std::int64_t d = first;
  for (int i = 1; i < retry && d < most; ++i) d *= 2;
  d = std::min(d, most);
  const std::int64_t half = d / 2;
  return std::chrono::milliseconds(half + std::int64_t(random % std::uint64_t(d - half + 1)));
}

Outcome after_status(long status) {
  return status == 408 || status == 429 || (status >= 500 && status <= 599) ? Outcome::retry : Outcome::fail;
}

Outcome after_transport(TransportError error) {
  return error == TransportError::resolve || error == TransportError::other ? Outcome::fail : Outcome::retry;
}

}  // namespace conveyor
