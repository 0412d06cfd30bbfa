// HttpClient in a build without libcurl (CONVEYOR_CURL=OFF, or AUTO where it
// was not found): every use says so in one line.
#include "data/remote/http_client.h"

namespace conveyor {

struct HttpClient::Impl {};

bool http_available() { return false; }

HttpClient::HttpClient(HttpOptions) {
  throw HttpError("this conveyor was built without libcurl (CONVEYOR_CURL=OFF): it reads no http://, https:// or s3:// "
                  "shards; build with libcurl (Debian: libcurl4-openssl-dev), or copy the shards to a local folder");
}

HttpClient::~HttpClient() = default;

std::string HttpClient::get(const RemoteUrl&, std::uint64_t) { return {}; }

void HttpClient::get_to_file(const RemoteUrl&, const std::filesystem::path&, std::optional<std::uint64_t>) {}

std::string HttpClient::get_range(const RemoteUrl&, std::uint64_t, std::uint64_t, const std::atomic<bool>*) { return {}; }

std::uint64_t HttpClient::retries() const { return 0; }

}  // namespace conveyor
