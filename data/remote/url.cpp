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

}  // namespace

std::string RemoteUrl::full() const { return scheme + "://" + (userinfo.empty() ? "" : userinfo + "@") + rest; }

std::string RemoteUrl::shown() const { return scheme + "://" + (userinfo.empty() ? "" : "***@") + rest; }

bool is_remote_location(std::string_view location) {
  const std::string head = lower(location.substr(0, 8));
  return head.starts_with("http://") || head.starts_with("https://");
}

RemoteUrl parse_remote_url(std::string_view location) {
  RemoteUrl url;
  const auto colon = location.find("://");
  url.scheme = colon == std::string_view::npos ? "" : lower(location.substr(0, colon));
  std::string_view tail = colon == std::string_view::npos ? location : location.substr(colon + 3);
  // The credentials end at the last '@' before the path (a password may hold '@').
  const auto at = tail.substr(0, tail.find('/')).rfind('@');
  if (at != std::string_view::npos) {
    url.userinfo = tail.substr(0, at);
    tail.remove_prefix(at + 1);
  }
  url.rest = tail;
  const auto bad = [&](const std::string& why) { return std::invalid_argument(url.shown() + ": " + why); };
  if (url.scheme != "http" && url.scheme != "https") throw bad("not an http:// or https:// URL");
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
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (unreserved(u)) {
      url.rest += c;
    } else {
      char escaped[4];
      std::snprintf(escaped, sizeof escaped, "%%%02X", unsigned(u));
      url.rest += escaped;
    }
  }
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
  const std::string shown = plain.shown();
  return readable + "-" + hex16(fnv1a(shown));
}

}  // namespace conveyor
