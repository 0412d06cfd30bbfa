#include "data/remote/url.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <stdexcept>

#include "pipeline/fnv1a.h"

namespace conveyor {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool unreserved(unsigned char c) { return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~'; }

void append_encoded(std::string& out, std::string_view name, bool keep_slash) {
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (unreserved(u) || (keep_slash && c == '/')) {
      out += c;
    } else {
      char escaped[4];
      std::snprintf(escaped, sizeof escaped, "%%%02X", unsigned(u));
      out += escaped;
    }
  }
}

// S3's rule for new buckets: 3 to 63 of a-z, 0-9, '.', '-', starting and
// ending with a letter or digit.
bool bucket_name(std::string_view b) {
  const auto ok = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  return b.size() >= 3 && b.size() <= 63 && ok(b.front()) && ok(b.back()) &&
         std::all_of(b.begin(), b.end(), [&](char c) { return ok(c) || c == '.' || c == '-'; });
}

}  // namespace

std::string RemoteUrl::full() const {
  if (scheme != "s3") return scheme + "://" + (userinfo.empty() ? "" : userinfo + "@") + rest;
  if (!endpoint.empty()) return endpoint + "/" + rest;  // path-style, as S3-compatible stores expect
  const std::string bucket = rest.substr(0, rest.find('/'));
  const std::string key = rest.substr(std::min(rest.size(), bucket.size() + 1));
  // Virtual-hosted, AWS's default; a bucket with a '.' would not match the
  // TLS certificate's *.s3... name, so it goes path-style.
  if (bucket.find('.') == std::string::npos) return "https://" + bucket + ".s3." + region + ".amazonaws.com/" + key;
  return "https://s3." + region + ".amazonaws.com/" + rest;
}

std::string RemoteUrl::shown() const { return scheme + "://" + (userinfo.empty() ? "" : "***@") + rest; }

bool is_remote_location(std::string_view location) {
  const std::string head = lower(location.substr(0, 8));
  return head.starts_with("http://") || head.starts_with("https://") || head.starts_with("s3://");
}

namespace {

RemoteUrl parse_s3(std::string_view tail, const S3Environment& s3) {
  RemoteUrl url{.scheme = "s3", .aws = s3.credentials, .region = s3.region, .endpoint = s3.endpoint};
  const std::string_view bucket = tail.substr(0, tail.find('/'));
  url.rest = bucket;
  if (bucket.size() < tail.size()) {
    url.rest += '/';
    append_encoded(url.rest, tail.substr(bucket.size() + 1), true);
  }
  const auto bad = [&](const std::string& why) { return std::invalid_argument(url.shown() + ": " + why); };
  if (bucket.empty()) throw bad("no bucket");
  if (!bucket_name(bucket)) throw bad("not a bucket name (3 to 63 lower-case letters, digits, '.' and '-')");
  std::string path = "/";  // built by appending: GCC 12 at -O3 takes "/" + string for an overlapping copy
  path.append(tail).append("/");
  if (path.find("/../") != std::string::npos || path.find("/./") != std::string::npos) {
    throw bad("a key that climbs with '..' or holds '.' segments");
  }
  return url;
}

}  // namespace

RemoteUrl parse_remote_url(std::string_view location) {
  const std::string head = lower(location.substr(0, 5));
  return head == "s3://" ? parse_remote_url(location, s3_environment()) : parse_remote_url(location, S3Environment{});
}

RemoteUrl parse_remote_url(std::string_view location, const S3Environment& s3) {
  RemoteUrl url;
  const auto colon = location.find("://");
  url.scheme = colon == std::string_view::npos ? "" : lower(location.substr(0, colon));
  std::string_view tail = colon == std::string_view::npos ? location : location.substr(colon + 3);
  if (url.scheme == "s3") {
    // An S3 key may hold blanks (they are encoded); not control characters.
    if (std::any_of(tail.begin(), tail.end(), [](char c) { return std::iscntrl(static_cast<unsigned char>(c)); })) {
      throw std::invalid_argument("s3://" + std::string(tail.substr(0, tail.find_first_of("\r\n"))) +
                                  ": a control character in the URL");
    }
    if (tail.find_first_of("?#") != std::string_view::npos) {
      throw std::invalid_argument("s3://" + std::string(tail) + ": a query or fragment (a shards URL names a folder)");
    }
    return parse_s3(tail, s3);
  }
  // The credentials end at the last '@' before the path (a password may hold '@').
  const auto at = tail.substr(0, tail.find('/')).rfind('@');
  if (at != std::string_view::npos) {
    url.userinfo = tail.substr(0, at);
    tail.remove_prefix(at + 1);
  }
  url.rest = tail;
  const auto bad = [&](const std::string& why) { return std::invalid_argument(url.shown() + ": " + why); };
  if (url.scheme != "http" && url.scheme != "https") throw bad("not an http://, https:// or s3:// URL");
  const std::string_view host = tail.substr(0, tail.find('/'));
  if (host.empty() || host.front() == ':') throw bad("no host");
  const std::string_view all = location;
  if (std::any_of(all.begin(), all.end(), [](char c) { return std::iscntrl(static_cast<unsigned char>(c)) || c == ' '; })) {
    throw bad("a blank or control character in the URL");
  }
  if (tail.find_first_of("?#") != std::string_view::npos) throw bad("a query or fragment (a shards URL names a folder)");
  std::string path = "/";  // built by appending: GCC 12 at -O3 takes "/" + string for an overlapping copy
  path.append(tail.substr(std::min(tail.size(), host.size() + 1))).append("/");
  if (path.find("/../") != std::string::npos) throw bad("a path that climbs with '..'");
  return url;
}

RemoteUrl child(const RemoteUrl& prefix, std::string_view name) {
  RemoteUrl url = prefix;
  if (url.rest.find('/') == std::string::npos || url.rest.back() != '/') url.rest += '/';
  append_encoded(url.rest, name, false);
  return url;
}

std::string cache_key(const RemoteUrl& url) {
  std::string readable;
  for (const char c : url.rest) {
    if (readable.size() == 80) break;
    const auto u = static_cast<unsigned char>(c);
    readable += std::isalnum(u) || c == '.' || c == '-' || c == '_' ? c : '_';
  }
  RemoteUrl plain = url;
  plain.userinfo.clear();
  return readable + "-" + hex16(fnv1a(plain.full()));
}

}  // namespace conveyor
