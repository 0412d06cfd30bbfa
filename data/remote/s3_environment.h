// S3Environment: where s3:// locations are served and with which keys, read
// from the variables every AWS tool reads, so that a job configured for the
// AWS CLI or boto3 needs nothing more:
//   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN  the keys
//     (none: requests go unsigned, for a public bucket);
//   AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1           the region;
//   AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL                    an
//     S3-compatible store (MinIO, Ceph, R2, ...), addressed path-style
//     (ENDPOINT/BUCKET/KEY), as those stores expect; none: AWS itself,
//     https://BUCKET.s3.REGION.amazonaws.com/KEY.
// The keys go with each request (data/remote/http_client.h signs it) and
// nowhere else: no message, file, trace, state or checkpoint holds them.
//
//   const S3Environment env = s3_environment();
//   const RemoteUrl prefix = parse_remote_url("s3://bucket/train/", env);
//
// Thread safety: s3_environment() reads the process environment (getenv);
// call it where nothing sets variables at the same time.
#pragma once

#include <string>
#include <string_view>

namespace conveyor {

struct AwsCredentials {
  std::string key_id;  // AWS_ACCESS_KEY_ID; "" for unsigned requests
  std::string secret;  // AWS_SECRET_ACCESS_KEY
  std::string token;   // AWS_SESSION_TOKEN: temporary credentials' token, or ""
};

struct S3Environment {
  AwsCredentials credentials;
  std::string region = "us-east-1";
  // "http(s)://host[:port][/path]" with no trailing '/'; "" for AWS.
  std::string endpoint;
};

// The variables above, checked. Throws std::invalid_argument, one line naming
// the variable: an endpoint that is not an http:// or https:// URL with a
// host, or holds a query or blank; a key id without a secret or a secret
// without a key id; a region that is not letters, digits and '-'. Never
// quotes a key.
S3Environment s3_environment();

// The same checks on values given by a program or a test; messages name the
// endpoint as `endpoint_name`. Trailing '/'s leave the endpoint.
S3Environment checked_s3_environment(S3Environment env, std::string_view endpoint_name = "AWS_ENDPOINT_URL");

}  // namespace conveyor
