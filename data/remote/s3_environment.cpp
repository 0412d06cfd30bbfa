#include "data/remote/s3_environment.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

namespace conveyor {

namespace {

std::string variable(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

bool region_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-'; }

// The endpoint for a message: whatever precedes an '@' in its authority
// (user:password, refused below) shown as "***".
std::string shown_endpoint(const std::string& e) {
  const std::size_t scheme = e.find("://");
  const std::size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  const std::size_t end = std::min(e.find('/', start), e.size());
  const std::size_t at = e.substr(0, end).rfind('@');
  if (at == std::string::npos || at < start) return e;
  std::string shown = e.substr(0, start);
  shown.append("***").append(e, at, std::string::npos);
  return shown;
}

}  // namespace

S3Environment checked_s3_environment(S3Environment env, std::string_view endpoint_name) {
  const AwsCredentials& c = env.credentials;
  if (!c.key_id.empty() && c.secret.empty()) {
    throw std::invalid_argument("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
  }
  if (c.key_id.empty() && !c.secret.empty()) {
    throw std::invalid_argument("AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not");
  }
  if (env.region.empty() || !std::all_of(env.region.begin(), env.region.end(), region_char)) {
    throw std::invalid_argument("AWS_REGION=" + env.region + ": not a region (letters, digits and '-', as us-east-1)");
  }
  std::string& e = env.endpoint;
  while (!e.empty() && e.back() == '/') e.pop_back();
  if (!e.empty()) {
    const auto bad = [&](const std::string& why) {
      return std::invalid_argument(std::string(endpoint_name) + "=" + shown_endpoint(e) + ": " + why);
    };
    std::string head = e.substr(0, 8);
    for (char& ch : head) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    const std::size_t skip = head.starts_with("https://") ? 8 : head.starts_with("http://") ? 7 : 0;
    if (skip == 0) throw bad("not an http:// or https:// URL");
    const std::string_view host = std::string_view(e).substr(skip, e.find('/', skip) - skip);
    if (host.empty() || host.front() == ':') throw bad("no host");
    if (host.find('@') != std::string_view::npos) throw bad("credentials in the URL (set AWS_ACCESS_KEY_ID instead)");
    if (e.find_first_of("?# \t\r\n") != std::string::npos) throw bad("a query, fragment or blank");
  }
  return env;
}

S3Environment s3_environment() {
  S3Environment env;
  env.credentials = {variable("AWS_ACCESS_KEY_ID"), variable("AWS_SECRET_ACCESS_KEY"), variable("AWS_SESSION_TOKEN")};
  std::string region = variable("AWS_REGION");
  if (region.empty()) region = variable("AWS_DEFAULT_REGION");
  if (!region.empty()) env.region = region;
  const char* endpoint_name = "AWS_ENDPOINT_URL_S3";
  env.endpoint = variable(endpoint_name);
  if (env.endpoint.empty()) env.endpoint = variable(endpoint_name = "AWS_ENDPOINT_URL");
  return checked_s3_environment(std::move(env), endpoint_name);
}

}  // namespace conveyor
