// HttpClient: GET requests over one reused connection (one libcurl easy
// handle; the connection stays open between requests to one host), each
// retried by a RetryPolicy. A body that breaks off mid-way resumes with a
// Range request from the byte reached; a server that does not connect within
// connect_timeout, or sends less than a byte a second for stall_timeout, is a
// timeout, so no request waits for ever. Credentials in a URL go with the
// request only: every message names the URL as RemoteUrl::shown() does.
// A URL that carries AWS keys (RemoteUrl::aws: an s3:// location) is signed
// with AWS Signature V4 by libcurl (CURLOPT_AWS_SIGV4), with the
// x-amz-content-sha256 and x-amz-date headers S3 requires (and
// x-amz-security-token for temporary keys) among the signed ones; S3's error
// code (SignatureDoesNotMatch, NoSuchKey, ...) joins the status in messages.
//
//   HttpClient http;
//   const std::string manifest = http.get(url, 64 << 20);
//   http.get_to_file(child(url, "shard-000000.tar"), "cache/shard-000000.tar.part", size);
//
// Built without libcurl (CONVEYOR_CURL=OFF), the constructor throws HttpError
// saying so; http_available() tells beforehand.
// Thread safety: one thread at a time on a client; distinct clients are
// independent (one per downloading thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/remote/retry.h"
#include "data/remote/url.h"

namespace conveyor {

// One line: the URL (credentials hidden) and what went wrong.
class HttpError : public std::runtime_error {
 public:
  explicit HttpError(const std::string& what, long status = 0, bool wrong_body = false)
      : std::runtime_error(what), status_(status), wrong_body_(wrong_body) {}
  // The HTTP status that ended the request (404, 503, ...); 0 for a
  // transport error or anything else.
  long status() const noexcept { return status_; }
  // The server answered with a body other than the one asked for: longer or
  // shorter than the size expected, or whole where a range was asked.
  bool wrong_body() const noexcept { return wrong_body_; }

 private:
  long status_;
  bool wrong_body_;
};

struct HttpOptions {
  RetryPolicy retry;
  // The longest wait for a connection. Default: 10 s.
  std::chrono::milliseconds connect_timeout{10'000};
  // The longest a transfer may go at under 1 byte/s (a server that accepts and
  // never answers). Default: 30 s.
  std::chrono::seconds stall_timeout{30};
  // Requests for one host and port sent to another, as curl's --connect-to
  // "HOST:PORT:TO_HOST:TO_PORT" (the URL, its Host header and its signature
  // unchanged): a name pinned to one node, or a test's loopback server
  // standing in for a named host. Default: none.
  std::vector<std::string> connect_to;
  // The time a signed request states (x-amz-date). Default (empty): the
  // system clock; a test gives a fixed time to reproduce a published signature.
  std::function<std::chrono::system_clock::time_point()> clock;
  // Once *stopping is set, a request gives up with HttpError "cancelled":
  // a transfer within about a second, a wait between retries at once.
  // Default: null, never.
  const std::atomic<bool>* stopping = nullptr;
};

// Whether this build has libcurl. Throws nothing.
bool http_available();

class HttpClient {
 public:
  // Throws HttpError when the build has no libcurl or libcurl cannot start.
  explicit HttpClient(HttpOptions options = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // The body of a GET, at most max_bytes long. Blocks; allocates. Throws
  // HttpError: a status of 400 or more, a transport error (after the retries
  // the policy allows), a body over max_bytes.
  std::string get(const RemoteUrl& url, std::uint64_t max_bytes);
  // GETs a body of exactly `size` bytes into `file` (created or truncated);
  // with no size, a body of the length the server announces (a transfer
  // that ends short of it resumes as any cut body does). Blocks. Throws
  // HttpError as get() does, and when the body, whole, is not `size` bytes,
  // or `file` cannot be written.
  void get_to_file(const RemoteUrl& url, const std::filesystem::path& file, std::optional<std::uint64_t> size);
  // Bytes [offset, offset + length) of the object, length > 0, with one
  // request (a Range header, signed with the rest). Blocks. Throws HttpError
  // as get() does, and when the server ignores the range (a 200) or the
  // object ends before offset + length.
  // `stopping` (null: none) cancels this request as HttpOptions::stopping does.
  std::string get_range(const RemoteUrl& url, std::uint64_t offset, std::uint64_t length,
                        const std::atomic<bool>* stopping = nullptr);
  // Requests retried since this client was made. Throws nothing.
  std::uint64_t retries() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace conveyor
