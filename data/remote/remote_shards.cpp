#include "data/remote/remote_shards.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "data/atomic_file.h"
#include "data/dataset.h"
#include "data/file_system.h"
#include "data/remote/shard_cache.h"
#include "data/remote/shard_download.h"
#include "data/remote/streaming_shards.h"
#include "data/remote/url_list.h"
#include "data/shards/shard_dataset.h"
#include "data/shards/manifest.h"
#include "data/shards/shard_index.h"
#include "data/shards/text.h"
#include "pipeline/fnv1a.h"

namespace conveyor {

namespace fs = std::filesystem;

namespace {

bool is_shard_name(std::string_view name);

fs::path cache_root(const RemoteOptions& options) {
  if (!options.cache_dir.empty()) return options.cache_dir;
  const auto root = user_cache_dir();
  if (!root) throw DatasetError("no cache folder for remote shards: set XDG_CACHE_HOME or HOME, or give --cache-dir");
  return *root / "remote";
}

void make_folder(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw DatasetError(dir.string() + ": cannot make the cache folder: " + ec.message());
}

// `text` replaces `file` whole (a file the cache keeps), or a DatasetError naming it.
void keep(const fs::path& file, const std::string& text) {
  const int err = write_file_atomically(file, {reinterpret_cast<const unsigned char*>(text.data()), text.size()});
  if (err != 0) throw DatasetError(file.string() + ": cannot write: " + std::strerror(err));
}

// `file` holds `text` (the prefix a cache folder is for, or its manifest):
// written when absent; another text there is another location's folder.
void claim(const fs::path& file, const std::string& text) {
  if (const std::optional<std::string> there = shard_text::slurp(file)) {
    if (*there == text) return;
    throw DatasetError(file.string() + ": this cache folder holds another location's shards (remove the folder)");
  }
  keep(file, text);
}

// A manifest read over HTTP names files made in the cache: each must be a
// plain .tar name with its size and checksum.
void check_entries(const std::vector<ManifestEntry>& entries, const std::string& where) {
  if (entries.empty()) throw DatasetError(where + ": lists no shards");
  for (const ManifestEntry& e : entries) {
    if (!e.size || !e.checksum) {
      throw DatasetError(where + ": a version 1 manifest, which records no shard sizes or checksums to check downloads "
                                 "against; pack the folder again with this conveyor");
    }
    if (!is_shard_name(e.file)) {
      throw DatasetError(where + ": lists '" + e.file + "', not a shard's file name (NAME.tar)");
    }
  }
}

// Every shard fetched by up to options.parallel threads, each with its own
// client; the first error stops the others and is rethrown here. The folder
// is leased meanwhile, so no download evicts another of the same job.
void fetch_all(const fs::path& dir, const std::vector<Wanted>& wanted, const RemoteOptions& options) {
  const CacheLease lease(dir);
  std::optional<CacheLimit> limit;
  if (options.cache_bytes) {
    limit = CacheLimit{cache_root(options), *options.cache_bytes};
    std::uint64_t total = 0;
    for (const Wanted& w : wanted) total += w.size.value_or(0);
    if (total > limit->bytes) {
      throw DatasetError(dir.string() + ": the shards to download first hold " + std::to_string(total) +
                         " bytes, over the cache's limit of " + std::to_string(limit->bytes) +
                         " (raise --cache-gb, or stream the shards, which reads those that do not fit by range)");
    }
  }
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;
  std::exception_ptr first;
  const auto work = [&] {
    try {
      HttpClient http(options.http);
      for (std::size_t i; !failed.load() && (i = next.fetch_add(1)) < wanted.size();) {
        fetch_one(http, dir, wanted[i], &failed, limit ? &*limit : nullptr);
      }
    } catch (...) {
      const std::lock_guard<std::mutex> hold(mutex);
      if (!first) first = std::current_exception();
      failed = true;
    }
  };
  {
    std::vector<std::jthread> threads;  // joined when this scope ends, a failed spawn included
    const std::size_t n = std::clamp<std::size_t>(options.parallel, 1, wanted.size());
    for (std::size_t k = 0; k < n; ++k) threads.emplace_back(work);
  }
  if (first) std::rethrow_exception(first);
}

// Every shard of `wanted` downloaded into `dir`, and the folder read as a
// local one, leased from before the first download while the Dataset lives.
Dataset fetch_leased(const fs::path& dir, const std::vector<Wanted>& wanted, const RemoteOptions& options) {
  auto files = std::make_shared<LeasedFolder>(dir);
  fetch_all(dir, wanted, options);
  return dataset_from_shards(dir).with_files(std::move(files));
}

// The options a StreamingShards takes: the cache's root resolved.
RemoteOptions resolved(const RemoteOptions& options) {
  RemoteOptions o = options;
  o.cache_dir = cache_root(options);
  return o;
}

RemoteUrl parse(std::string_view location) {
  try {
    return parse_remote_url(location);
  } catch (const std::invalid_argument& e) {
    throw DatasetError(e.what());
  }
}

// A shard's file name, the URL's last segment: a plain NAME.tar (it becomes a
// file in the cache folder).
bool is_shard_name(std::string_view name) {
  std::string ext = fs::path(name).extension().string();
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return !name.empty() && name.find('/') == std::string_view::npos && !name.starts_with('.') && ext == ".tar";
}

}  // namespace

std::uint64_t cache_gb_bytes(double gb) {
  if (!(gb > 0) || !std::isfinite(gb)) throw std::invalid_argument("a cache limit in GB must be a number above 0");
  if (gb > 16e9) throw std::invalid_argument("a cache limit in GB must be at most 16e9 (16 EB)");
  const double bytes = std::round(gb * 1e9);  // at most 1.6e19: within uint64_t
  if (bytes < 1) throw std::invalid_argument("a cache limit in GB must be at least 1e-9 (a byte)");
  return std::uint64_t(bytes);
}

bool is_listed_location(std::string_view location) {
  if (!is_remote_location(location)) return false;
  const std::string_view last = location.substr(location.find_last_of('/') + 1);
  return location.find('{') != std::string_view::npos || (!last.empty() && is_shard_name(last));
}

namespace {

// A prefix's manifest, fetched, checked, and its cache folder claimed.
struct Prefix {
  RemoteUrl url;
  std::vector<ManifestEntry> entries;
  fs::path dir;  // CACHE/KEY/VERSION
};

Prefix open_prefix(std::string_view location, const RemoteOptions& options, HttpClient& http) {
  Prefix p{parse(location), {}, {}};
  const RemoteUrl manifest_url = child(p.url, kManifestName);
  std::string text;
  try {
    text = http.get(manifest_url, kMaxManifestBytes);
  } catch (const HttpError& e) {
    throw DatasetError(e.what());
  }
  p.entries = parse_manifest(text, manifest_url.shown());
  check_entries(p.entries, manifest_url.shown());
  const fs::path base = cache_root(options) / cache_key(p.url);
  make_folder(base);
  claim(base / ".conveyor-url", p.url.shown() + "\n");
  p.dir = base / hex16(fnv1a(text));
  make_folder(p.dir);
  claim(p.dir / kManifestName, text);
  return p;
}

// The manifest's shards for which `keep(file name)` holds, as fetch_all takes them.
template <typename Keep>
std::vector<Wanted> shards_of(const Prefix& p, Keep keep) {
  std::vector<Wanted> out;
  for (const ManifestEntry& e : p.entries) {
    if (keep(e.file)) out.push_back({child(p.url, e.file), e.file, e.size, e.checksum});
  }
  return out;
}

// A client, or the one line saying this build has none, naming `location`.
HttpClient client(std::string_view location, const RemoteOptions& options) {
  try {
    return HttpClient(options.http);
  } catch (const HttpError& e) {
    RemoteUrl url;
    try {
      url = parse_remote_url(location);
    } catch (const std::invalid_argument&) {
      throw DatasetError(e.what());
    }
    throw DatasetError(url.shown() + ": " + e.what());
  }
}

// The folder's index as `conveyor pack` wrote it beside the shards, held to
// the manifest (the same shards, sizes and sample counts); kept in the cache
// folder once checked. Null when the server has none (404).
std::optional<ShardIndex> served_index(const Prefix& p, HttpClient& http) {
  const fs::path kept = p.dir / ".conveyor-served-index";
  const RemoteUrl url = child(p.url, ".conveyor-index");
  std::string text;
  if (std::optional<std::string> there = shard_text::slurp(kept)) {
    text = std::move(*there);
  } else {
    try {
      text = http.get(url, kMaxManifestBytes * 64);
    } catch (const HttpError& e) {
      if (e.status() == 404) return std::nullopt;
      throw DatasetError(e.what());
    }
  }
  ShardIndex index = ShardIndex::parse(text, url.shown());
  std::vector<std::uint64_t> counts(index.shards.size());
  for (const auto& sample : index.samples) ++counts.at(sample.shard);
  bool same = index.shards.size() == p.entries.size();
  for (std::size_t s = 0; same && s < index.shards.size(); ++s) {
    same = index.shards[s].file == p.entries[s].file && index.shards[s].size == p.entries[s].size &&
           counts[s] == p.entries[s].count;
  }
  if (!same) {
    throw DatasetError(url.shown() + ": does not describe the shards its manifest lists (copied from another "
                                     "packing?); copy the folder from one `conveyor pack` again");
  }
  keep(kept, text);
  return index;
}

}  // namespace

namespace {

// The shards a pattern lists, and the cache folder they go to (made).
struct Listed {
  fs::path dir;  // CACHE/KEY/shards
  std::vector<Wanted> wanted;
};

Listed listed_shards(std::string_view pattern, const RemoteOptions& options) {
  const RemoteUrl whole = parse(pattern);  // checks the scheme and host, and hides the credentials from here on
  std::vector<std::string> urls;
  try {
    urls = expand_url_list(pattern);
  } catch (const std::invalid_argument& e) {
    throw DatasetError(whole.shown() + ": " + e.what());
  }
  if (!http_available()) (void)client(pattern, options);  // throws the line saying this build has no libcurl
  Listed out;
  std::map<std::string, std::string> seen;  // file name -> the URL that gave it
  for (const std::string& u : urls) {
    RemoteUrl url = parse(u);
    const std::string shown = url.shown();
    const std::string name = shown.substr(shown.find_last_of('/') + 1);
    if (!is_shard_name(name)) throw DatasetError(shown + ": not a shard's URL (it should end in NAME.tar)");
    if (const auto [at, fresh] = seen.emplace(name, shown); !fresh) {
      throw DatasetError(whole.shown() + ": " + at->second + " and " + shown +
                         " have one file name; the shards of one list need names of their own");
    }
    out.wanted.push_back({std::move(url), name, std::nullopt, std::nullopt});
  }
  const fs::path base = cache_root(options) / cache_key(whole);
  make_folder(base);
  claim(base / ".conveyor-url", whole.shown() + "\n");
  out.dir = base / "shards";
  make_folder(out.dir);
  return out;
}

// Every shard a pattern lists, downloaded, as a Dataset that leases their
// folder from before the first download.
Dataset open_listed_shards(std::string_view pattern, const RemoteOptions& options) {
  const Listed l = listed_shards(pattern, options);
  auto files = std::make_shared<LeasedFolder>(l.dir);
  fetch_all(l.dir, l.wanted, options);
  return dataset_from_shards(l.dir).with_files(std::move(files));
}

}  // namespace

Dataset open_remote_shards(std::string_view location, const RemoteOptions& options) {
  if (is_listed_location(location)) return open_listed_shards(location, options);
  HttpClient http = client(location, options);
  const Prefix p = open_prefix(location, options, http);
  const std::vector<Wanted> all = shards_of(p, [](const std::string&) { return true; });
  const std::optional<ShardIndex> index = options.stream ? served_index(p, http) : std::nullopt;
  if (!index) return fetch_leased(p.dir, all, options);  // every shard, then the folder as a local one
  return dataset_from_index(p.dir, *index).with_files(std::make_shared<StreamingShards>(p.dir, all, resolved(options)));
}

fs::path fetch_shards(std::string_view location, const RemoteOptions& options) {
  if (is_listed_location(location)) return fetch_listed_shards(location, options);
  HttpClient http = client(location, options);
  const Prefix p = open_prefix(location, options, http);
  fetch_all(p.dir, shards_of(p, [](const std::string&) { return true; }), options);
  return p.dir;
}

Dataset fetch_rank_shards(std::string_view location, const RemoteOptions& options, std::size_t rank,
                          std::size_t world_size, ShardPolicy policy) {
  if (is_listed_location(location)) {
    return open_listed_shards(location, options).rank_subset(rank, world_size, policy);
  }
  HttpClient http = client(location, options);
  const Prefix p = open_prefix(location, options, http);
  const std::optional<ShardIndex> index = served_index(p, http);
  if (!index) {  // no index on the server: every shard, then the folder as a local one
    return fetch_leased(p.dir, shards_of(p, [](const std::string&) { return true; }), options)
        .rank_subset(rank, world_size, policy);
  }
  Dataset mine = dataset_from_index(p.dir, *index).rank_subset(rank, world_size, policy);
  std::set<std::string> needed;
  for (std::size_t i = 0; i < mine.size(); ++i) needed.insert(mine.path(i).filename().string());
  const std::vector<Wanted> some = shards_of(p, [&](const std::string& file) { return needed.count(file) > 0; });
  if (options.stream) return std::move(mine).with_files(std::make_shared<StreamingShards>(p.dir, some, resolved(options)));
  auto files = std::make_shared<LeasedFolder>(p.dir);
  if (!some.empty()) fetch_all(p.dir, some, options);
  return std::move(mine).with_files(std::move(files));
}

fs::path fetch_listed_shards(std::string_view pattern, const RemoteOptions& options) {
  const Listed l = listed_shards(pattern, options);
  fetch_all(l.dir, l.wanted, options);
  return l.dir;
}

}  // namespace conveyor
