// RemoteUrl: an http:// or https:// location of shards, parsed just enough to
// use it safely: its credentials (user:password@) go with each request and
// nowhere else (never into a message, a file name or the cache), and
// cache_key() names it on disk so that different locations never share a
// folder.
//
//   const RemoteUrl prefix = parse_remote_url("https://u:p@host/data/train/");
//   prefix.shown();                     // "https://***@host/data/train/"
//   child(prefix, "shard-000000.tar");  // https://u:p@host/data/train/shard-000000.tar
//
// Thread safety: values and free functions without shared state.
#pragma once

#include <string>
#include <string_view>

namespace conveyor {

struct RemoteUrl {
  std::string scheme;    // "http" or "https", lower case
  std::string userinfo;  // "user:password" as given; "" when none
  std::string rest;      // "host[:port]/path" as given, after "scheme://" and "userinfo@"

  // The URL to request, with its credentials. Never print it. Throws nothing but bad_alloc.
  std::string full() const;
  // The URL for messages and files: "***" in place of the credentials. Throws nothing but bad_alloc.
  std::string shown() const;
};

// Whether `location` starts with http:// or https:// (any case): a URL, not a
// local path. Throws nothing.
bool is_remote_location(std::string_view location);

// Parses an http(s) URL. Throws std::invalid_argument naming the URL (its
// credentials hidden): not http or https, no host, a blank or control
// character, a query or fragment (a prefix names a folder), or a
// path that climbs with "..".
RemoteUrl parse_remote_url(std::string_view location);

// The URL of `name` inside the folder `prefix` names (a '/' is added after
// the prefix when it lacks one); the name is percent-encoded but for letters,
// digits and "-._~". Throws nothing but bad_alloc.
RemoteUrl child(const RemoteUrl& prefix, std::string_view name);

// A folder name for the location: its host and path with every character but
// letters, digits, '.', '-' and '_' made '_' (at most 80 of them, for a
// person reading the cache), then '-' and the FNV-1a (pipeline/fnv1a.h) of
// the URL without its credentials in 16 hex digits. The credentials are not part of it: one location
// read with two users' keys holds the same bytes. Throws nothing but bad_alloc.
std::string cache_key(const RemoteUrl& url);

}  // namespace conveyor
