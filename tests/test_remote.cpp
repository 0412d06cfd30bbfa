// The pure parts of reading shards over HTTP and S3: URL parsing, s3://
// addressing and the AWS variables, what a message may show, the cache's
// folder names, URL lists, and the retry policy; and a signed request
// captured at a loopback socket, against the signature AWS publishes for it;
// and HttpClient against a scripted loopback server's faults: a stall, a
// reset mid-body, a server down and back, ranges refused, a stop; and the
// cache's limit: what it counts, what it evicts first, what it never evicts.
// The fetching itself is tests/http_test.sh's and tests/s3_test.sh's, against
// real servers.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "catch_compat.h"
#include "data/remote/http_client.h"
#include "data/remote/retry.h"
#include "data/remote/remote_shards.h"
#include "data/remote/s3_environment.h"
#include "data/remote/shard_cache.h"
#include "data/remote/shard_download.h"
#include "data/remote/url.h"
#include "data/remote/url_list.h"
#include "temp_dir.h"

using namespace conveyor;
using std::chrono::milliseconds;

TEST_CASE("remote url: http and https locations parse, credentials stay out of what is shown", "[remote]") {
  REQUIRE(is_remote_location("https://host/p/"));
  REQUIRE(is_remote_location("HTTP://host/p/"));
  REQUIRE_FALSE(is_remote_location("/data/shards"));
  REQUIRE_FALSE(is_remote_location("http:/host"));
  REQUIRE(is_remote_location("S3://bucket/p/"));
  const RemoteUrl u = parse_remote_url("HTTPS://user:p@ss@host:8443/data/train/");
  REQUIRE(u.scheme == "https");
  REQUIRE(u.userinfo == "user:p@ss");
  REQUIRE(u.rest == "host:8443/data/train/");
  REQUIRE(u.full() == "https://user:p@ss@host:8443/data/train/");
  REQUIRE(u.shown() == "https://***@host:8443/data/train/");
  REQUIRE(parse_remote_url("http://host/a@b/").userinfo.empty());  // an '@' in the path is not a user
  REQUIRE(parse_remote_url("http://host").shown() == "http://host");
}

TEST_CASE("remote url: what is not a folder URL is refused, naming it without its credentials", "[remote]") {
  REQUIRE_THROWS_WITH(parse_remote_url("ftp://host/p/"), "ftp://host/p/: not an http://, https:// or s3:// URL");
  REQUIRE_THROWS_WITH(parse_remote_url("http:///p/"), "http:///p/: no host");
  REQUIRE_THROWS_WITH(parse_remote_url("http://u:secret@/p/"), "http://***@/p/: no host");
  REQUIRE_THROWS_WITH(parse_remote_url("http://host/p/?sig=1"), Catch::Contains("a query or fragment"));
  REQUIRE_THROWS_WITH(parse_remote_url("http://host/a/../b/"), Catch::Contains("climbs"));
  REQUIRE_THROWS_WITH(parse_remote_url("http://host/a b/"), Catch::Contains("a blank or control character"));
  REQUIRE_THROWS_WITH(parse_remote_url("http://u:secret@host/a\nb/"), Catch::Contains("***@") && !Catch::Contains("secret"));
}

TEST_CASE("remote url: a child is the prefix, one '/', and the name percent-encoded", "[remote]") {
  REQUIRE(child(parse_remote_url("http://h/p/"), "shard-000000.tar").full() == "http://h/p/shard-000000.tar");
  REQUIRE(child(parse_remote_url("http://h/p"), "a b%.tar").full() == "http://h/p/a%20b%25.tar");
  REQUIRE(child(parse_remote_url("http://h"), ".conveyor-manifest").full() == "http://h/.conveyor-manifest");
  REQUIRE(child(parse_remote_url("http://u:k@h/p/"), "x.tar").shown() == "http://***@h/p/x.tar");
}

TEST_CASE("remote url: cache keys tell locations apart, hold no credentials, and are file names", "[remote]") {
  const std::string a = cache_key(parse_remote_url("http://host/data/train/"));
  REQUIRE(a.starts_with("host_data_train_-"));
  REQUIRE(a == cache_key(parse_remote_url("http://user:secret@host/data/train/")));
  std::set<std::string> keys;
  for (const char* url : {"http://host/data/train/", "https://host/data/train/", "http://host/data/train", "http://host/data/val/",
                          "http://host/data_train/", "http://host:80/data/train/", "http://other/data/train/"}) {
    const std::string key = cache_key(parse_remote_url(url));
    REQUIRE(key.find('/') == std::string::npos);
    REQUIRE(key.find("secret") == std::string::npos);
    REQUIRE(keys.insert(key).second);
  }
  const std::string long_one = cache_key(parse_remote_url("http://host/" + std::string(500, 'x') + "/"));
  REQUIRE(long_one.size() == 80 + 1 + 16);
}

TEST_CASE("retry policy: waits grow by doubling to the cap, each in [d/2, d]", "[remote]") {
  const RetryPolicy p{.attempts = 6, .first_delay = milliseconds(100), .max_delay = milliseconds(1000)};
  const std::int64_t want[] = {100, 200, 400, 800, 1000, 1000, 1000};
  for (int retry = 1; retry <= 7; ++retry) {
    const std::int64_t d = want[retry - 1];
    REQUIRE(p.delay(retry, 0).count() == d / 2);  // the low end
    REQUIRE(p.delay(retry, std::uint64_t(d - d / 2)).count() == d);  // the high end
    for (std::uint64_t r : {1ull, 7ull, 12345ull, ~0ull}) {
      const auto w = p.delay(retry, r).count();
      REQUIRE(w >= d / 2);
      REQUIRE(w <= d);
    }
  }
  REQUIRE(p.delay(1000, ~0ull).count() <= 1000);  // no overflow at high retry counts
  REQUIRE(RetryPolicy{.first_delay = milliseconds(0)}.delay(3, 99).count() == 0);
}

TEST_CASE("retry policy: 408, 429 and 5xx are retried, other statuses and unresolved names are not", "[remote]") {
  for (long s : {408L, 429L, 500L, 502L, 503L, 504L, 599L}) REQUIRE(after_status(s) == Outcome::retry);
  for (long s : {400L, 401L, 403L, 404L, 410L, 416L, 600L}) REQUIRE(after_status(s) == Outcome::fail);
  for (auto e : {TransportError::timeout, TransportError::refused, TransportError::reset}) REQUIRE(after_transport(e) == Outcome::retry);
  for (auto e : {TransportError::resolve, TransportError::other}) REQUIRE(after_transport(e) == Outcome::fail);
}

TEST_CASE("url list: brace groups expand as braceexpand does, left groups varying slowest", "[remote]") {
  using V = std::vector<std::string>;
  CHECK(expand_url_list("https://h/a.tar") == V{"https://h/a.tar"});
  CHECK(expand_url_list("h/train-{000000..000002}.tar") == V{"h/train-000000.tar", "h/train-000001.tar", "h/train-000002.tar"});
  CHECK(expand_url_list("{8..11}") == V{"8", "9", "10", "11"});
  CHECK(expand_url_list("{08..10}") == V{"08", "09", "10"});
  CHECK(expand_url_list("{3..1}") == V{"3", "2", "1"});
  CHECK(expand_url_list("{1..7..3}") == V{"1", "4", "7"});
  CHECK(expand_url_list("{-1..1}") == V{"-1", "0", "1"});
  CHECK(expand_url_list("{a..c}") == V{"a", "b", "c"});
  CHECK(expand_url_list("s/{a,b}-{1..3..2}.tar") == V{"s/a-1.tar", "s/a-3.tar", "s/b-1.tar", "s/b-3.tar"});
  CHECK(expand_url_list("{x{1..2},y}") == V{"x1", "x2", "y"});
  CHECK(expand_url_list("{,b}c") == V{"c", "bc"});
  CHECK(expand_url_list("{0..999999}").size() == 1'000'000);
}

TEST_CASE("url list: a pattern that does not expand is refused with the reason, never the pattern", "[remote]") {
  CHECK_THROWS_WITH(expand_url_list("https://u:secret@h/{1..2.tar"), "a '{' that is never closed");
  CHECK_THROWS_WITH(expand_url_list("h/1..2}.tar"), "a '}' with no '{' before it");
  CHECK_THROWS_WITH(expand_url_list("h/{1}.tar"), "the group {1} has neither ',' nor '..'");
  CHECK_THROWS_WITH(expand_url_list("h/{1..b}.tar"), "the range {1..b} is neither of integers nor of letters");
  CHECK_THROWS_WITH(expand_url_list("h/{1..5..0}.tar"), "the step of {1..5..0} is 0");
  CHECK_THROWS_WITH(expand_url_list("{0..9}{0..9}", 50), "more than 50 URLs");
  CHECK_THROWS_WITH(expand_url_list("{0..1000}", 1000), "more than 1000 URLs");
}

TEST_CASE("url list: a listed location is told from a prefix with a manifest", "[remote]") {
  CHECK(is_listed_location("https://h/train-{0..3}.tar"));
  CHECK(is_listed_location("http://h/d/shard-000000.tar"));
  CHECK(is_listed_location("https://h/d/S.TAR"));
  CHECK_FALSE(is_listed_location("https://h/d/"));
  CHECK_FALSE(is_listed_location("https://h/d"));
  CHECK_FALSE(is_listed_location("/local/train-{0..3}.tar"));
}

namespace {

S3Environment keys(std::string endpoint = "", std::string region = "eu-west-3") {
  return checked_s3_environment({.credentials = {"AKIDEXAMPLE", "secret/key+1", "token"}, .region = std::move(region),
                                 .endpoint = std::move(endpoint)});
}

}  // namespace

TEST_CASE("s3 url: AWS's virtual-hosted addresses, an endpoint's path-style ones, keys only in the request", "[remote][s3]") {
  const RemoteUrl aws = parse_remote_url("s3://my-bucket/data/train/", keys());
  CHECK(aws.full() == "https://my-bucket.s3.eu-west-3.amazonaws.com/data/train/");
  CHECK(aws.shown() == "s3://my-bucket/data/train/");
  CHECK(child(aws, "shard-000000.tar").full() == "https://my-bucket.s3.eu-west-3.amazonaws.com/data/train/shard-000000.tar");
  CHECK(child(aws, "shard-000000.tar").aws.key_id == "AKIDEXAMPLE");
  CHECK(aws.region == "eu-west-3");
  // A dotted bucket goes path-style: *.s3... certificates cover one label.
  CHECK(parse_remote_url("s3://my.bucket/p/", keys()).full() == "https://s3.eu-west-3.amazonaws.com/my.bucket/p/");
  CHECK(parse_remote_url("s3://bucket", keys()).full() == "https://bucket.s3.eu-west-3.amazonaws.com/");
  CHECK(child(parse_remote_url("s3://bucket", keys()), "x.tar").shown() == "s3://bucket/x.tar");
  // An S3-compatible store: path-style under its endpoint, the key encoded as S3 signs it.
  const RemoteUrl minio = parse_remote_url("s3://bucket/a b+c/", keys("http://127.0.0.1:9000/"));
  CHECK(minio.full() == "http://127.0.0.1:9000/bucket/a%20b%2Bc/");
  CHECK(minio.shown() == "s3://bucket/a%20b%2Bc/");
  CHECK(parse_remote_url("s3://bucket/p/", keys("https://gw.example/s3")).full() == "https://gw.example/s3/bucket/p/");
  // Nothing shown or named on disk holds a key.
  for (const RemoteUrl& u : {aws, minio}) {
    for (const std::string& text : {u.shown(), cache_key(u)}) {
      CHECK(text.find("secret") == std::string::npos);
      CHECK(text.find("AKID") == std::string::npos);
      CHECK(text.find("token") == std::string::npos);
    }
  }
  // One bucket on two endpoints: two cache folders; one location with other keys: one.
  CHECK(cache_key(minio) != cache_key(parse_remote_url("s3://bucket/a b+c/", keys("http://127.0.0.1:9001"))));
  S3Environment other = keys("http://127.0.0.1:9000");
  other.credentials = {"AKIDOTHER", "other", ""};
  CHECK(cache_key(minio) == cache_key(parse_remote_url("s3://bucket/a b+c/", other)));
}

TEST_CASE("s3 url: a bucket S3 does not allow, a climbing key, a query: one line naming the URL", "[remote][s3]") {
  CHECK_THROWS_WITH(parse_remote_url("s3:///p/", keys()), "s3:///p/: no bucket");
  CHECK_THROWS_WITH(parse_remote_url("s3://My_Bucket/p/", keys()), Catch::Contains("s3://My_Bucket/p/: not a bucket name"));
  CHECK_THROWS_WITH(parse_remote_url("s3://ab/p/", keys()), Catch::Contains("not a bucket name"));
  CHECK_THROWS_WITH(parse_remote_url("s3://bucket/a/../b/", keys()), Catch::Contains("climbs"));
  CHECK_THROWS_WITH(parse_remote_url("s3://bucket/p/?versionId=1", keys()), Catch::Contains("a query or fragment"));
  CHECK_THROWS_WITH(parse_remote_url("s3://bucket/a\nb/", keys()), "s3://bucket/a: a control character in the URL");
}

TEST_CASE("s3 environment: AWS's variables in AWS's order of precedence, each bad one named", "[remote][s3]") {
  struct Saved {
    const char* name;
    std::string value;
    bool set;
  };
  std::vector<Saved> saved;
  for (const char* name : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
                           "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"}) {
    const char* v = std::getenv(name);
    saved.push_back({name, v ? v : "", v != nullptr});
    ::unsetenv(name);
  }
  S3Environment none = s3_environment();
  CHECK(none.credentials.key_id.empty());
  CHECK(none.region == "us-east-1");
  CHECK(none.endpoint.empty());
  ::setenv("AWS_DEFAULT_REGION", "ap-south-1", 1);
  CHECK(s3_environment().region == "ap-south-1");
  ::setenv("AWS_REGION", "eu-north-1", 1);
  CHECK(s3_environment().region == "eu-north-1");
  ::setenv("AWS_ENDPOINT_URL", "http://general:1/", 1);
  CHECK(s3_environment().endpoint == "http://general:1");
  ::setenv("AWS_ENDPOINT_URL_S3", "http://s3only:2", 1);
  CHECK(s3_environment().endpoint == "http://s3only:2");
  CHECK(parse_remote_url("s3://bucket/p/").full() == "http://s3only:2/bucket/p/");  // the one-argument form reads them
  ::setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
  CHECK_THROWS_WITH(s3_environment(), "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
  ::setenv("AWS_SECRET_ACCESS_KEY", "sekrit", 1);
  ::setenv("AWS_SESSION_TOKEN", "tok", 1);
  const S3Environment all = s3_environment();
  CHECK((all.credentials.key_id == "AKID" && all.credentials.secret == "sekrit" && all.credentials.token == "tok"));
  ::setenv("AWS_ENDPOINT_URL_S3", "minio:9000", 1);
  CHECK_THROWS_WITH(s3_environment(), "AWS_ENDPOINT_URL_S3=minio:9000: not an http:// or https:// URL");
  ::setenv("AWS_ENDPOINT_URL_S3", "http://u:sekrit@h", 1);
  CHECK_THROWS_WITH(s3_environment(), "AWS_ENDPOINT_URL_S3=http://***@h: credentials in the URL (set AWS_ACCESS_KEY_ID instead)");
  ::setenv("AWS_ENDPOINT_URL_S3", "u:sekrit@minio:9000", 1);
  CHECK_THROWS_WITH(s3_environment(), "AWS_ENDPOINT_URL_S3=***@minio:9000: not an http:// or https:// URL");
  ::unsetenv("AWS_ENDPOINT_URL_S3");
  ::setenv("AWS_REGION", "eu west", 1);
  CHECK_THROWS_WITH(s3_environment(), Catch::Contains("AWS_REGION=eu west: not a region"));
  CHECK_THROWS_WITH(parse_remote_url("s3://bucket/p/"), Catch::Contains("AWS_REGION"));
  CHECK_NOTHROW(parse_remote_url("http://host/p/"));  // an http URL reads no AWS variable
  for (const Saved& s : saved) {
    if (s.set) {
      ::setenv(s.name, s.value.c_str(), 1);
    } else {
      ::unsetenv(s.name);
    }
  }
}

namespace {

// A loopback HTTP server that answers its connections by script, one step a
// connection (each answer closes it): the faults a network gives, on demand.
class ScriptedServer {
 public:
  struct Step {
    enum Kind {
      answer,   // `status` (0: 200, or 206 from a "Range: bytes=N-" request's N) with `body`
      cut,      // promises all of `body`, sends half, then resets the connection
      stall,    // reads the request and never answers (until the client gives up)
      hang_up,  // closes at once, before reading anything (a server going down)
      whole_then_reset,  // promises a byte more than `body`, sends `body`, then resets the connection
    } kind = answer;
    std::string body;
    int status = 0;
  };

  explicit ScriptedServer(std::vector<Step> steps) : steps_(std::move(steps)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(listener_, 4) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      throw std::runtime_error("scripted server: no loopback socket");
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::jthread([this] { serve(); });
  }
  ~ScriptedServer() {
    ::shutdown(listener_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    ::close(listener_);
  }
  int port() const { return port_; }
  std::string url(const std::string& path = "/x.tar") const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  // The requests' heads, once every step has run.
  std::vector<std::string> requests() {
    if (thread_.joinable()) thread_.join();
    return heads_;
  }

 private:
  static std::string read_head(int c) {
    std::string head;
    char buffer[4096];
    while (head.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::recv(c, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      head.append(buffer, std::size_t(n));
    }
    return head;
  }
  static void send_all(int c, const std::string& bytes) { (void)::send(c, bytes.data(), bytes.size(), MSG_NOSIGNAL); }

  void serve() {
    for (const Step& step : steps_) {
      const int c = ::accept(listener_, nullptr, nullptr);
      if (c < 0) return;
      if (step.kind == Step::hang_up) {
        ::close(c);
        continue;
      }
      const std::string head = read_head(c);
      heads_.push_back(head);
      if (step.kind == Step::stall) {
        char byte;
        while (::recv(c, &byte, 1, 0) > 0) {
        }  // until the client gives up and closes
      } else if (step.kind == Step::cut || step.kind == Step::whole_then_reset) {
        const bool whole = step.kind == Step::whole_then_reset;
        send_all(c, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(step.body.size() + whole) + "\r\n\r\n" +
                        step.body.substr(0, whole ? step.body.size() : step.body.size() / 2));
        const linger reset{1, 0};  // close with RST: a connection reset mid-body
        ::setsockopt(c, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
      } else {
        std::size_t from = 0;
        if (const auto at = head.find("Range: bytes="); at != std::string::npos) from = std::stoul(head.substr(at + 13));
        const int status = step.status ? step.status : from ? 206 : 200;
        const std::string body = status < 300 ? step.body.substr(std::min(from, step.body.size())) : step.body;
        send_all(c, "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Length: " + std::to_string(body.size()) +
                        "\r\nConnection: close\r\n\r\n" + body);
      }
      ::close(c);
    }
  }

  std::vector<Step> steps_;
  std::vector<std::string> heads_;
  int listener_ = -1, port_ = 0;
  std::jthread thread_;
};

std::string header(const std::string& head, const std::string& name) {
  const auto at = head.find("\r\n" + name + ": ");
  if (at == std::string::npos) return "";
  const auto start = at + 4 + name.size();
  return head.substr(start, head.find("\r\n", start) - start);
}

}  // namespace

// AWS's worked example of a signed GET Object with a Range header (Amazon S3
// API Reference, "Signature Calculations for the Authorization Header:
// Transferring Payload in a Single Chunk", Example: GET Object): its keys,
// time, host and range, and the Authorization it publishes. The request
// libcurl signs for HttpClient::get_range must carry exactly that header.
TEST_CASE("s3 signature: a signed range GET carries the Authorization AWS publishes for it", "[remote][s3]") {
  if (!http_available()) {
    WARN("built without libcurl: no request to sign");
    return;
  }
  ScriptedServer server(std::vector<ScriptedServer::Step>{{.kind = ScriptedServer::Step::answer, .body = "0123456789", .status = 206}});
  RemoteUrl url = parse_remote_url("http://examplebucket.s3.amazonaws.com/test.txt");
  url.aws = {"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
  url.region = "us-east-1";
  HttpOptions options;
  options.connect_to = {"examplebucket.s3.amazonaws.com:80:127.0.0.1:" + std::to_string(server.port())};
  options.clock = [] { return std::chrono::system_clock::from_time_t(1369353600); };  // 2013-05-24T00:00:00Z
  HttpClient http(options);
  CHECK(http.get_range(url, 0, 10) == "0123456789");
  const std::vector<std::string> heads = server.requests();
  REQUIRE(heads.size() == 1);
  const std::string& head = heads[0];
  CHECK(head.starts_with("GET /test.txt HTTP/1.1\r\n"));
  CHECK(header(head, "Host") == "examplebucket.s3.amazonaws.com");
  CHECK(header(head, "Range") == "bytes=0-9");
  CHECK(header(head, "x-amz-date") == "20130524T000000Z");
  CHECK(header(head, "x-amz-content-sha256") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(header(head, "Authorization") ==
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  CHECK(head.find("wJalrXUtnFEMI") == std::string::npos);  // the secret never goes on the wire
}

namespace {

using Step = ScriptedServer::Step;

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

HttpOptions quick(int attempts, std::chrono::seconds stall = std::chrono::seconds(30)) {
  HttpOptions o;
  o.retry = {.attempts = attempts, .first_delay = milliseconds(10), .max_delay = milliseconds(20)};
  o.stall_timeout = stall;
  return o;
}

}  // namespace

TEST_CASE("http faults: a server that accepts and never answers times out, is retried, then fails in one line", "[remote][faults]") {
  if (!http_available()) return;
  ScriptedServer server({{.kind = Step::stall}, {.kind = Step::stall}});
  HttpClient http(quick(2, std::chrono::seconds(1)));
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(http.get(parse_remote_url(server.url()), 1 << 20),
                    Catch::StartsWith(server.url() + ": ") && Catch::Contains("(after 2 tries)"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(15));
  CHECK(server.requests().size() == 2);
}

TEST_CASE("http faults: a connection reset mid-body resumes from the byte it reached", "[remote][faults]") {
  if (!http_available()) return;
  std::string body(100'000, '\0');
  for (std::size_t i = 0; i < body.size(); ++i) body[i] = char(i * 7 + i / 251);
  ScriptedServer server({{.kind = Step::cut, .body = body}, {.kind = Step::answer, .body = body}});
  HttpClient http(quick(3));
  conveyor::test::TempDir dir;
  const auto file = dir.path() / "x.tar";
  http.get_to_file(parse_remote_url(server.url()), file, body.size());
  CHECK(read_text(file) == body);
  const std::vector<std::string> heads = server.requests();
  REQUIRE(heads.size() == 2);
  CHECK(heads[1].find("Range: bytes=") != std::string::npos);
  CHECK(heads[1].find("Range: bytes=0-") == std::string::npos);  // not from the start
  CHECK(http.retries() == 1);
}

TEST_CASE("http faults: a connection reset after the last byte keeps the body, asking for nothing past its end", "[remote][faults]") {
  if (!http_available()) return;
  const std::string body(50'000, 'b');
  ScriptedServer server({{.kind = Step::whole_then_reset, .body = body},
                         {.kind = Step::answer, .body = "<Error><Code>InvalidRange</Code></Error>", .status = 416}});
  HttpClient http(quick(3));
  conveyor::test::TempDir dir;
  const auto file = dir.path() / "x.tar";
  http.get_to_file(parse_remote_url(server.url()), file, body.size());
  CHECK(read_text(file) == body);
  CHECK(http.retries() == 0);
}

TEST_CASE("http faults: a server that goes down and comes back is retried, then carried on", "[remote][faults]") {
  if (!http_available()) return;
  ScriptedServer server({{.kind = Step::hang_up}, {.kind = Step::answer, .status = 503}, {.kind = Step::answer, .body = "manifest"}});
  HttpClient http(quick(4));
  CHECK(http.get(parse_remote_url(server.url("/.conveyor-manifest")), 1 << 20) == "manifest");
  CHECK(http.retries() == 2);
}

TEST_CASE("http faults: a range the server ignores, and one past the end, fail in one line", "[remote][faults]") {
  if (!http_available()) return;
  ScriptedServer server({{.kind = Step::answer, .body = "0123456789", .status = 200},
                         {.kind = Step::answer, .body = "<Error><Code>InvalidRange</Code></Error>", .status = 416}});
  HttpClient http(quick(1));
  CHECK_THROWS_WITH(http.get_range(parse_remote_url(server.url()), 2, 3), server.url() + ": the server ignores Range requests (it sent the whole object)");
  CHECK_THROWS_WITH(http.get_range(parse_remote_url(server.url()), 20, 3),
                    server.url() + ": HTTP 416 (InvalidRange) (it holds fewer bytes than asked for)");
}

TEST_CASE("http faults: a request gives up within about a second of being told to stop", "[remote][faults]") {
  if (!http_available()) return;
  ScriptedServer server(std::vector<Step>{{.kind = Step::stall}});
  std::atomic<bool> stopping{false};
  HttpOptions o = quick(3);
  o.stopping = &stopping;
  HttpClient http(o);
  std::jthread stopper([&] {
    std::this_thread::sleep_for(milliseconds(200));
    stopping = true;
  });
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(http.get(parse_remote_url(server.url()), 1 << 20), server.url() + ": cancelled");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

namespace {

// A file of `bytes` bytes, its mtime `age_s` seconds before now.
void cache_file(const std::filesystem::path& file, std::size_t bytes, int age_s = 0) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << std::string(bytes, 'x');
  const timespec now{::time(nullptr) - age_s, 0};
  const timespec times[2] = {now, now};
  ::utimensat(AT_FDCWD, file.c_str(), times, 0);
}

}  // namespace

TEST_CASE("shard cache: a download in flight counts at its announced size, one that died as it is", "[remote][cache]") {
  conveyor::test::TempDir dir;
  const auto root = dir.path();
  cache_file(root / "k" / "v" / "a.tar", 1000);
  cache_file(root / "k" / "v" / "b.tar.part", 10);
  std::ofstream(root / "k" / "v" / "b.tar.lock") << "5000";
  CHECK(cache_usage(root) == 1000 + 10 + 4);  // nobody holds the lock: a dead download's part
  {
    const FileLock held(root / "k" / "v" / "b.tar.lock", nullptr);  // another open file: as another process's download
    CHECK(cache_usage(root) == 1000 + 5000 + 4);
  }
  CHECK(cache_usage(root) == 1000 + 10 + 4);
}

TEST_CASE("shard cache: room is made from the least recently used shards of folders no job leases", "[remote][cache]") {
  conveyor::test::TempDir dir;
  const auto root = dir.path();
  cache_file(root / "a" / "v" / "oldest.tar", 100, 300);  // leased below: never removed
  cache_file(root / "b" / "v" / "old.tar", 100, 200);
  cache_file(root / "b" / "v" / "new.tar", 100, 100);
  cache_file(root / "b" / "v" / ".conveyor-index", 1);  // not a shard: kept
  cache_file(root / "mine" / "data.tar", 100, 400);      // not the cache's (no .conveyor-url): never removed
  cache_file(root / "a" / ".conveyor-url", 0);
  cache_file(root / "b" / ".conveyor-url", 0);
  const CacheLease lease(root / "a" / "v");
  const CacheLimit limit{root, 451};
  CHECK(make_room(limit, 50));  // 401 + 50 fit: nothing goes
  CHECK(std::filesystem::exists(root / "b" / "v" / "old.tar"));
  CHECK(make_room(limit, 100));  // 501: the older of b's shards goes
  CHECK_FALSE(std::filesystem::exists(root / "b" / "v" / "old.tar"));
  CHECK(std::filesystem::exists(root / "b" / "v" / "new.tar"));
  CHECK_FALSE(make_room(limit, 300));  // 601, and only 100 may go: nothing goes
  CHECK(std::filesystem::exists(root / "b" / "v" / "new.tar"));
  CHECK(make_room(limit, 200));  // 501: the newer goes too
  CHECK_FALSE(std::filesystem::exists(root / "b" / "v" / "new.tar"));
  CHECK_FALSE(make_room(limit, 452));  // over the limit by itself
  CHECK(std::filesystem::exists(root / "a" / "v" / "oldest.tar"));
  CHECK(std::filesystem::exists(root / "mine" / "data.tar"));
  CHECK(std::filesystem::exists(root / "b" / "v" / ".conveyor-index"));
  CHECK(cache_usage(root) <= limit.bytes);
}

TEST_CASE("shard cache: a child of fork() does not keep a lock its parent held", "[remote][cache]") {
  conveyor::test::TempDir dir;
  const auto file = dir.path() / "x.tar.lock";
  int wake[2];
  REQUIRE(::pipe(wake) == 0);
  pid_t child = -1;
  {
    const FileLock held(file, nullptr);
    child = ::fork();
    if (child == 0) {  // lives on past the parent's lock, its copies of the parent's descriptors closed at the fork
      char c;
      (void)::read(wake[0], &c, 1);
      ::_exit(0);
    }
  }  // the parent's lock released
  REQUIRE(child > 0);
  std::atomic<bool> stopping{false};
  std::jthread stopper([&] {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    stopping = true;
  });
  CHECK_NOTHROW(FileLock(file, &stopping));  // "cancelled" after 2 s if the child held it
  (void)::write(wake[1], "x", 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(wake[0]);
  ::close(wake[1]);
}

TEST_CASE("shard cache: a part a dead download left goes before any shard", "[remote][cache]") {
  conveyor::test::TempDir dir;
  const auto root = dir.path();
  cache_file(root / "k" / ".conveyor-url", 0);
  cache_file(root / "k" / "v" / "s.tar", 100, 100);
  cache_file(root / "k" / "v" / "y.tar.part", 50);  // no download holds y.tar.lock
  CHECK(make_room({root, 120}, 0));
  CHECK_FALSE(std::filesystem::exists(root / "k" / "v" / "y.tar.part"));
  CHECK(std::filesystem::exists(root / "k" / "v" / "s.tar"));
}

TEST_CASE("shard cache: touching a folder's shards makes them the most recently used", "[remote][cache]") {
  conveyor::test::TempDir dir;
  const auto root = dir.path();
  cache_file(root / "a" / "v" / "x.tar", 100, 200);
  cache_file(root / "b" / "v" / "y.tar", 100, 100);
  cache_file(root / "a" / ".conveyor-url", 0);
  cache_file(root / "b" / ".conveyor-url", 0);
  touch_shards(root / "a" / "v");
  CHECK(make_room({root, 150}, 0));
  CHECK(std::filesystem::exists(root / "a" / "v" / "x.tar"));
  CHECK_FALSE(std::filesystem::exists(root / "b" / "v" / "y.tar"));
}

TEST_CASE("shard cache: a shard with no room is not downloaded, and leaves no part behind", "[remote][cache]") {
  if (!http_available()) return;
  conveyor::test::TempDir dir;
  const auto root = dir.path();
  const auto folder = root / "k" / "v";
  cache_file(folder / "mine.tar", 300);
  const CacheLease lease(folder);
  const CacheLimit limit{root, 500};
  HttpClient http(quick(1));
  const Wanted w{parse_remote_url("http://127.0.0.1:9/k/next.tar"), "next.tar", 300, 1};
  try {
    fetch_one(http, folder, w, nullptr, &limit);
    FAIL("fetched with no room");
  } catch (const DownloadError& e) {
    CHECK(e.kind() == DownloadError::Kind::no_room);
    CHECK_THAT(std::string(e.what()), Catch::StartsWith("http://127.0.0.1:9/k/next.tar: no room for it in the cache ("));
  }
  CHECK_FALSE(std::filesystem::exists(folder / "next.tar.part"));
  CHECK(std::filesystem::exists(folder / "mine.tar"));  // leased: kept
}

TEST_CASE("shard download: what a later try may mend is told from what it will not", "[remote][faults]") {
  if (!http_available()) return;
  const std::string body(1000, 'z');
  ScriptedServer server({{.kind = Step::answer, .status = 503},
                         {.kind = Step::answer, .status = 404},
                         {.kind = Step::answer, .body = body}});
  HttpClient http(quick(1));
  conveyor::test::TempDir dir;
  const auto kind = [&](std::optional<std::uint64_t> checksum) {
    try {
      fetch_one(http, dir.path(), {parse_remote_url(server.url()), "x.tar", body.size(), checksum});
    } catch (const DownloadError& e) {
      CHECK_FALSE(std::filesystem::exists(dir.path() / "x.tar.part"));
      return e.kind();
    }
    FAIL("no error");
    return DownloadError::Kind::again;
  };
  CHECK(kind(std::nullopt) == DownloadError::Kind::again);    // 503: the server may come back
  CHECK(kind(std::nullopt) == DownloadError::Kind::lasting);  // 404
  CHECK(kind(std::uint64_t{1}) == DownloadError::Kind::lasting);  // another body than the manifest's
}

TEST_CASE("shard download: a wait on another download's lock ends soon after a stop", "[remote][faults]") {
  if (!http_available()) return;
  conveyor::test::TempDir dir;
  const FileLock other(dir.path() / "x.tar.lock", nullptr);  // as another process downloading it
  std::atomic<bool> stopping{false};
  HttpClient http(quick(1));
  std::jthread stopper([&] {
    std::this_thread::sleep_for(milliseconds(200));
    stopping = true;
  });
  const auto start = std::chrono::steady_clock::now();
  try {
    fetch_one(http, dir.path(), {parse_remote_url("http://127.0.0.1:9/x.tar"), "x.tar", 10, 1}, &stopping);
    FAIL("no error");
  } catch (const DownloadError& e) {
    CHECK(e.kind() == DownloadError::Kind::again);
    CHECK_THAT(std::string(e.what()), Catch::EndsWith("x.tar.lock: cancelled"));
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
}
