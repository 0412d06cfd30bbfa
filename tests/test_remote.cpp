// The pure parts of reading shards over HTTP: URL parsing, what a message may
// show, the cache's folder names, URL lists, and the retry policy. The fetching itself is
// tests/http_test.sh's, against a real server.
#include <chrono>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "data/remote/retry.h"
#include "data/remote/remote_shards.h"
#include "data/remote/url.h"
#include "data/remote/url_list.h"

using namespace conveyor;
using std::chrono::milliseconds;

TEST_CASE("remote url: http and https locations parse; credentials stay out of what is shown", "[remote]") {
  REQUIRE(is_remote_location("https://host/p/"));
  REQUIRE(is_remote_location("HTTP://host/p/"));
  REQUIRE_FALSE(is_remote_location("/data/shards"));
  REQUIRE_FALSE(is_remote_location("http:/host"));
  REQUIRE_FALSE(is_remote_location("s3://bucket/p/"));
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
  REQUIRE_THROWS_WITH(parse_remote_url("ftp://host/p/"), "ftp://host/p/: not an http:// or https:// URL");
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
