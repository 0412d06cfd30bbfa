// HttpClient over libcurl's easy interface: one handle per client, so its
// connection (and TLS session) is reused from one request to the next.
#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "data/remote/http_client.h"

#if LIBCURL_VERSION_NUM < 0x075500
#error "libcurl 7.85 or later is needed (CURLOPT_PROTOCOLS_STR, CURLOPT_AWS_SIGV4)"
#endif

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

// Where one request's body goes: a string (get, get_range) or a file
// (get_to_file), after the `at` bytes an earlier try of the same request
// kept. A response of 300 or more has its body (S3's error document) kept
// in `error_text` instead, to name its code.
struct Body {
  CURL* easy = nullptr;
  std::string* text = nullptr;
  std::FILE* file = nullptr;
  std::uint64_t at = 0, limit = 0;
  // get_range: bytes [offset, last] asked for; a whole body (200) is refused.
  bool ranged = false;
  std::uint64_t offset = 0, last = 0;
  bool checked = false;  // the status of this response was looked at
  bool over = false;     // the body ran past `limit`
  bool ignored_range = false;  // a range asked for, the whole object sent
  bool error_response = false;  // status 300 or more: the body is the error's
  std::string error_text;
  int write_error = 0;

  // The Range header this try sends, or "" for none.
  std::string range() const {
    if (!ranged && at == 0) return "";
    return "Range: bytes=" + std::to_string(offset + at) + "-" + (ranged ? std::to_string(last) : "");
  }

  // The first bytes of a response: an error's body is kept apart; a resumed
  // request the server answered whole (200, not 206) starts over; a range
  // answered whole fails.
  bool accept_status() {
    long status = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 300) {
      error_response = true;
      return true;
    }
    if (status == 206 || range().empty()) return true;
    if (ranged) {
      ignored_range = true;
      return false;
    }
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
    if (!b.checked && !(b.checked = true, b.accept_status())) return 0;
    if (b.error_response) {
      b.error_text.append(data, std::min<std::size_t>(n, 4096 - std::min<std::size_t>(4096, b.error_text.size())));
      return n;
    }
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

// S3's error code from its XML error document ("NoSuchKey"), or "".
std::string s3_error_code(const std::string& body) {
  const auto open = body.find("<Code>");
  const auto close = body.find("</Code>", open);
  if (open == std::string::npos || close == std::string::npos || close - open > 6 + 64) return "";
  std::string code = body.substr(open + 6, close - open - 6);
  const bool plain = std::all_of(code.begin(), code.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); });
  return plain ? code : "";
}

// x-amz-date's form: 20130524T000000Z.
std::string amz_date(std::chrono::system_clock::time_point t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%dT%H%M%SZ", &utc);
  return text;
}

struct SlistFree {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};
using Slist = std::unique_ptr<curl_slist, SlistFree>;

void append(Slist& list, const std::string& line) {
  curl_slist* grown = curl_slist_append(list.get(), line.c_str());
  if (!grown) throw std::bad_alloc();
  list.release();
  list.reset(grown);
}

}  // namespace

struct HttpClient::Impl {
  HttpOptions options;
  CURL* easy = nullptr;
  char error[CURL_ERROR_SIZE] = {};
  std::uint64_t retries = 0;
  std::mt19937_64 random{std::random_device{}()};
  Slist headers, connect_to;  // set on the handle: live until the next request
  const std::atomic<bool>* call_stopping = nullptr;  // this request's own stop flag, or null

  bool stop_requested() const {
    return (options.stopping && options.stopping->load()) || (call_stopping && call_stopping->load());
  }
  // CURLOPT_XFERINFOFUNCTION: non-zero aborts the transfer.
  static int on_progress(void* self, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    return static_cast<const Impl*>(self)->stop_requested() ? 1 : 0;
  }

  void configure(const RemoteUrl& url, Body& body);
  void run(const RemoteUrl& url, Body& body, std::uint64_t exact);
};

void HttpClient::Impl::configure(const RemoteUrl& url, Body& body) {
  curl_easy_reset(easy);  // keeps the connection cache
  const std::string full = url.full();
  const bool signed_request = !url.aws.key_id.empty();
  curl_easy_setopt(easy, CURLOPT_URL, full.c_str());
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  // S3 answers a bucket in another region with a 301 and no Location, and a
  // signature holds for one host: signed and s3 requests follow no redirect.
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, signed_request || url.scheme == "s3" ? 0L : 1L);
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
  if (options.stopping || call_stopping) {  // libcurl calls this about once a second, and on every chunk
    curl_easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, &Impl::on_progress);
    curl_easy_setopt(easy, CURLOPT_XFERINFODATA, this);
  }
  body.checked = body.error_response = false;
  body.error_text.clear();
  headers.reset();
  if (const std::string range = body.range(); !range.empty()) append(headers, range);
  if (signed_request) {
    // libcurl 7.88 signs every header set here and host; it takes the payload
    // hash and the date from these headers, and adds neither itself.
    static constexpr const char* kEmptyBodySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    append(headers, std::string("x-amz-content-sha256: ") + kEmptyBodySha256);
    append(headers, "x-amz-date: " + amz_date(options.clock ? options.clock() : std::chrono::system_clock::now()));
    if (!url.aws.token.empty()) append(headers, "x-amz-security-token: " + url.aws.token);
    curl_easy_setopt(easy, CURLOPT_AWS_SIGV4, ("aws:amz:" + url.region + ":s3").c_str());
    curl_easy_setopt(easy, CURLOPT_USERNAME, url.aws.key_id.c_str());
    curl_easy_setopt(easy, CURLOPT_PASSWORD, url.aws.secret.c_str());
  }
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers.get());
  if (!connect_to && !options.connect_to.empty()) {
    for (const std::string& line : options.connect_to) append(connect_to, line);
  }
  curl_easy_setopt(easy, CURLOPT_CONNECT_TO, connect_to.get());
}

// "HTTP 403" and what the response says of it.
std::string status_text(const RemoteUrl& url, long status, const Body& body) {
  std::string why = "HTTP " + std::to_string(status);
  const std::string code = s3_error_code(body.error_text);
  if (!code.empty()) why += " (" + code + ")";
  if (status == 416) why += " (it holds fewer bytes than asked for)";
  if (code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed" || (url.scheme == "s3" && status == 301)) {
    why += "; the bucket is in another region than " + url.region + ": set AWS_REGION";
  }
  if (url.scheme == "s3" && url.aws.key_id.empty() && (status == 401 || status == 403)) {
    why += "; the request went unsigned: AWS_ACCESS_KEY_ID is not set";
  }
  return why;
}

// Tries the request until it succeeds, fails for good, or runs out of tries;
// `exact`: the size the whole body must have (0: any up to body.limit).
void HttpClient::Impl::run(const RemoteUrl& url, Body& body, std::uint64_t exact) {
  const std::string shown = url.shown();
  for (int attempt = 1;; ++attempt) {
    configure(url, body);
    error[0] = '\0';
    const CURLcode rc = curl_easy_perform(easy);
    if (rc == CURLE_ABORTED_BY_CALLBACK) throw HttpError(shown + ": cancelled");
    if (body.over) throw HttpError(shown + ": the body is over the " + std::to_string(body.limit) + " bytes expected", 0, true);
    if (body.write_error) throw HttpError(shown + ": cannot write what it sends: " + std::strerror(body.write_error));
    if (body.ignored_range) throw HttpError(shown + ": the server ignores Range requests (it sent the whole object)", 0, true);
    long status = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    if (rc == CURLE_OK && status < 300) {
      if (exact == 0 || body.at == exact) return;
      throw HttpError(shown + ": the body is " + std::to_string(body.at) + " bytes, not the " + std::to_string(exact) +
                      (body.ranged ? " asked for" : " the manifest lists"), 0, true);
    }
    // Every byte came before the connection broke: asking again for the
    // rest would ask for bytes past the end (a 416).
    if (rc != CURLE_OK && exact != 0 && body.at == exact && body.checked && !body.error_response) return;
    Outcome outcome = Outcome::fail;
    std::string why;
    const bool http_error = rc == CURLE_OK;
    if (http_error) {
      outcome = status < 400 || status == 416 ? Outcome::fail : after_status(status);
      why = status_text(url, status, body);
    } else {
      outcome = after_transport(transport_error(rc));
      why = error[0] ? error : curl_easy_strerror(rc);
    }
    if (outcome == Outcome::fail || attempt >= options.retry.attempts) {
      throw HttpError(shown + ": " + why + (attempt > 1 ? " (after " + std::to_string(attempt) + " tries)" : ""),
                      http_error ? status : 0);
    }
    ++retries;
    const auto until = std::chrono::steady_clock::now() + options.retry.delay(attempt, random());
    while (std::chrono::steady_clock::now() < until) {
      if (stop_requested()) throw HttpError(shown + ": cancelled");
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(std::chrono::milliseconds(50),
                                                                                 until - std::chrono::steady_clock::now()));
    }
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

std::string HttpClient::get_range(const RemoteUrl& url, std::uint64_t offset, std::uint64_t length,
                                  const std::atomic<bool>* stopping) {
  if (length == 0) throw HttpError(url.shown() + ": a range of 0 bytes");
  std::string text;
  Body body{.easy = impl_->easy, .text = &text, .limit = length, .ranged = true, .offset = offset, .last = offset + length - 1};
  impl_->call_stopping = stopping;
  try {
    impl_->run(url, body, length);
  } catch (...) {
    impl_->call_stopping = nullptr;
    throw;
  }
  impl_->call_stopping = nullptr;
  return text;
}

std::uint64_t HttpClient::retries() const { return impl_->retries; }

}  // namespace conveyor
