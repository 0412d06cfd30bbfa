// HttpClient over libcurl's easy interface: one handle per client, so its
// connection (and TLS session) is reused from one request to the next.
#include <curl/curl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "data/remote/http_client.h"

namespace conveyor {

namespace {

// curl_global_init is not thread-safe before libcurl 7.84 says so at run time:
// one call for the process, before the first handle.
void init_curl_once() {
  static std::once_flag once;
  static CURLcode result = CURLE_OK;
  std::call_once(once, [] { result = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (result != CURLE_OK) throw HttpError(std::string("libcurl does not start: ") + curl_easy_strerror(result));
}

TransportError transport_error(CURLcode rc) {
  switch (rc) {
    case CURLE_OPERATION_TIMEDOUT: return TransportError::timeout;
    case CURLE_COULDNT_CONNECT: return TransportError::refused;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return TransportError::resolve;
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM: return TransportError::reset;
    default: return TransportError::other;
  }
}

// Where one request's body goes: a string (get) or a file (get_to_file),
// after the `at` bytes an earlier try of the same request kept.
struct Body {
  CURL* easy = nullptr;
  std::string* text = nullptr;
  std::FILE* file = nullptr;
  std::uint64_t at = 0, limit = 0;
  bool checked = false;  // the status of this response was looked at
  bool over = false;     // the body ran past `limit`
  int write_error = 0;

  // A resumed request the server answered whole (200, not 206): start over.
  bool restart_if_whole() {
    long status = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    if (at == 0 || status == 206) return true;
    at = 0;
    if (text) text->clear();
    if (file && (std::fflush(file) != 0 || ::ftruncate(::fileno(file), 0) != 0 || std::fseek(file, 0, SEEK_SET) != 0)) {
      write_error = errno;
      return false;
    }
    return true;
  }

  static std::size_t on_data(char* data, std::size_t, std::size_t n, void* self) {
    Body& b = *static_cast<Body*>(self);
    if (!b.checked && !(b.checked = true, b.restart_if_whole())) return 0;
    if (n > b.limit - b.at) {
      b.over = true;
      return 0;
    }
    if (b.text) b.text->append(data, n);
    if (b.file && std::fwrite(data, 1, n, b.file) != n) {
      b.write_error = errno ? errno : EIO;
      return 0;
    }
    b.at += n;
    return n;
  }
};

}  // namespace

struct HttpClient::Impl {
  HttpOptions options;
  CURL* easy = nullptr;
  char error[CURL_ERROR_SIZE] = {};
  std::uint64_t retries = 0;
  std::mt19937_64 random{std::random_device{}()};

  void configure(const RemoteUrl& url, Body& body);
  void run(const RemoteUrl& url, Body& body, std::uint64_t exact);
};

void HttpClient::Impl::configure(const RemoteUrl& url, Body& body) {
  curl_easy_reset(easy);  // keeps the connection cache
  const std::string full = url.full();
  curl_easy_setopt(easy, CURLOPT_URL, full.c_str());
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(easy, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, long(options.connect_timeout.count()));
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, long(options.stall_timeout.count()));
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &Body::on_data);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &body);
  body.checked = false;
  if (body.at > 0) curl_easy_setopt(easy, CURLOPT_RANGE, (std::to_string(body.at) + "-").c_str());
}

// Tries the request until it succeeds, fails for good, or runs out of tries;
// `exact`: the size the whole body must have (0: any up to body.limit).
void HttpClient::Impl::run(const RemoteUrl& url, Body& body, std::uint64_t exact) {
  const std::string shown = url.shown();
  for (int attempt = 1;; ++attempt) {
    configure(url, body);
    error[0] = '\0';
    const CURLcode rc = curl_easy_perform(easy);
    if (body.over) throw HttpError(shown + ": the body is over the " + std::to_string(body.limit) + " bytes expected");
    if (body.write_error) throw HttpError(shown + ": cannot write what it sends: " + std::strerror(body.write_error));
    long status = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    if (rc == CURLE_OK) {
      if (exact == 0 || body.at == exact) return;
      throw HttpError(shown + ": the body is " + std::to_string(body.at) + " bytes, not the " + std::to_string(exact) +
                      " the manifest lists");
    }
    Outcome outcome = Outcome::fail;
    std::string why;
    if (rc == CURLE_HTTP_RETURNED_ERROR) {
      outcome = status == 416 ? Outcome::fail : after_status(status);  // 416: the server holds fewer bytes than asked for
      why = "HTTP " + std::to_string(status) + (status == 416 ? " (it holds fewer bytes than the manifest lists)" : "");
    } else {
      outcome = after_transport(transport_error(rc));
      why = error[0] ? error : curl_easy_strerror(rc);
    }
    if (outcome == Outcome::fail || attempt >= options.retry.attempts) {
      throw HttpError(shown + ": " + why + (attempt > 1 ? " (after " + std::to_string(attempt) + " tries)" : ""),
                      rc == CURLE_HTTP_RETURNED_ERROR ? status : 0);
    }
    ++retries;
    std::this_thread::sleep_for(options.retry.delay(attempt, random()));
  }
}

bool http_available() { return true; }

HttpClient::HttpClient(HttpOptions options) : impl_(std::make_unique<Impl>()) {
  init_curl_once();
  impl_->options = options;
  impl_->easy = curl_easy_init();
  if (!impl_->easy) throw HttpError("libcurl: cannot make a handle");
}

HttpClient::~HttpClient() { curl_easy_cleanup(impl_->easy); }

std::string HttpClient::get(const RemoteUrl& url, std::uint64_t max_bytes) {
  std::string text;
  Body body{.easy = impl_->easy, .text = &text, .limit = max_bytes};
  impl_->run(url, body, 0);
  return text;
}

void HttpClient::get_to_file(const RemoteUrl& url, const std::filesystem::path& file, std::optional<std::uint64_t> size) {
  std::FILE* out = std::fopen(file.c_str(), "wb");
  if (!out) throw HttpError(url.shown() + ": cannot write " + file.string() + ": " + std::strerror(errno));
  Body body{.easy = impl_->easy, .file = out, .limit = size.value_or(std::numeric_limits<std::uint64_t>::max())};
  try {
    impl_->run(url, body, size.value_or(0));
  } catch (...) {
    std::fclose(out);
    throw;
  }
  if (std::fclose(out) != 0) throw HttpError(url.shown() + ": cannot write " + file.string() + ": " + std::strerror(errno));
}

std::uint64_t HttpClient::retries() const { return impl_->retries; }

}  // namespace conveyor
