// RemoteUrl: an http://, https:// or s3:// location of shards, parsed just
// enough to use it safely: its credentials (user:password@, or the AWS keys
// an s3:// location takes from the environment) go with each request and
// nowhere else (never into a message, a file name or the cache), and
// cache_key() names it on disk so that different locations never share a
// folder.
//
//   const RemoteUrl prefix = parse_remote_url("https://u:p@host/data/train/");
//   prefix.shown();                     // "https://***@host/data/train/"
//   child(prefix, "shard-000000.tar");  // https://u:p@host/data/train/shard-000000.tar
//
//   const RemoteUrl s3 = parse_remote_url("s3://bucket/train/");  // s3_environment()
//   s3.full();   // https://bucket.s3.us-east-1.amazonaws.com/train/, or AWS_ENDPOINT_URL/bucket/train/
//   s3.shown();  // s3://bucket/train/
//
// Thread safety: values and free functions without shared state.
#pragma once

#include <string>
#include <string_view>

#include "data/remote/s3_environment.h"

namespace conveyor {

struct RemoteUrl {
  std::string scheme;    // "http", "https" or "s3", lower case
  std::string userinfo;  // http(s): "user:password" as given; "" when none
  // http(s): "host[:port]/path" as given, after "scheme://" and "userinfo@";
  // s3: "bucket/key", the key percent-encoded as child() encodes a name.
  std::string rest;
  // Requests are signed with AWS Signature V4 for `region` when aws.key_id
  // is set (s3: from S3Environment; any scheme may carry them).
  AwsCredentials aws;
  std::string region;
  // s3 only: S3Environment::endpoint ("" for AWS itself).
  std::string endpoint;

  // The URL to request, with its credentials (s3: the endpoint's URL of the
  // object). Never print it. Throws nothing but bad_alloc.
  std::string full() const;
  // The URL for messages and files: "***" in place of the credentials; an
  // s3 location as the user wrote it, s3://bucket/key. Throws nothing but bad_alloc.
  std::string shown() const;
};

// Whether `location` starts with http://, https:// or s3:// (any case): a URL,
// not a local path. Throws nothing.
bool is_remote_location(std::string_view location);

// Parses an http(s) or s3 URL. Throws std::invalid_argument naming the URL (its
// credentials hidden): not http, https or s3, no host, a blank or control
// character, a query or fragment (a prefix names a folder), a
// path that climbs with "..", or for s3 a bucket name S3 does not allow (3 to
// 63 lower-case letters, digits, '.' and '-'). An s3 location takes its
// endpoint, region and keys from `s3`.
RemoteUrl parse_remote_url(std::string_view location, const S3Environment& s3);
// The same, s3 locations with s3_environment() (and its std::invalid_argument).
RemoteUrl parse_remote_url(std::string_view location);

// The URL of `name` inside the folder `prefix` names (a '/' is added after
// the prefix when it lacks one); the name is percent-encoded but for letters,
// digits and "-._~". Throws nothing but bad_alloc.
RemoteUrl child(const RemoteUrl& prefix, std::string_view name);

// A folder name for the location: its host and path (s3: bucket and key)
// with every character but letters, digits, '.', '-' and '_' made '_' (at
// most 80 of them, for a person reading the cache), then '-' and the FNV-1a
// (pipeline/fnv1a.h) of the URL requested, without its credentials, in 16 hex
// digits (one bucket name on two endpoints: two folders). The credentials are
// not part of it: one location read with two users' keys holds the same
// bytes. Throws nothing but bad_alloc.
std::string cache_key(const RemoteUrl& url);

}  // namespace conveyor
