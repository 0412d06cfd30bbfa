#include "pipeline/state.h"

#include "pipeline/sampler.h"  // ceil_div

#include <map>
#include <sstream>
#include <stdexcept>

namespace conveyor {

namespace {
// "0-41,43,45-46": sorted indices as ranges.
std::string format_ranges(const std::vector<std::uint64_t>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size();) {
    std::size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(v[i]);
    if (j > i) out += '-' + std::to_string(v[j]);
    i = j + 1;
  }
  return out.empty() ? "-" : out;
}

std::uint64_t parse_u64(const std::string& field, const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 20) {
    throw std::invalid_argument("state: field '" + field + "' is not a non-negative integer: '" + text + "'");
  }
  try {
    return std::stoull(text);
  } catch (const std::exception&) {
    throw std::invalid_argument("state: field '" + field + "' is out of range: '" + text + "'");
  }
}

// Batch indices below `batches` (the most an epoch of the state's dataset and
// batch size has), so an edited line cannot ask for more memory than the
// epoch's own plan takes: "0-4294967296" of a 10-batch epoch is refused
// before anything is allocated. An empty text is refused too: "-" is none.
std::vector<std::uint64_t> parse_ranges(const std::string& text, std::uint64_t batches) {
  std::vector<std::uint64_t> out;
  if (text == "-") return out;
  if (text.empty()) throw std::invalid_argument("state: field 'delivered' is empty (none delivered is '-')");
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    const auto dash = part.find('-');
    const std::uint64_t lo = parse_u64("delivered", part.substr(0, dash));
    const std::uint64_t hi = dash == std::string::npos ? lo : parse_u64("delivered", part.substr(dash + 1));
    if (hi < lo || (!out.empty() && lo <= out.back())) {
      throw std::invalid_argument("state: field 'delivered' is not sorted disjoint ranges: '" + text + "'");
    }
    if (hi >= batches) {
      throw std::invalid_argument("state: field 'delivered' names batch " + std::to_string(hi) + ", past the " +
                                  std::to_string(batches) + " an epoch of dataset_size and batch_size has");
    }
    for (std::uint64_t i = lo; i <= hi; ++i) out.push_back(i);
  }
  return out;
}
}  // namespace

std::string PipelineState::serialize() const {
  std::ostringstream o;
  o << "conveyor-state 1 epoch=" << epoch << " delivered=" << format_ranges(delivered) << " seed=" << seed
    << " dataset_size=" << dataset_size << " batch_size=" << batch_size << " shuffle=" << int(shuffle)
    << " drop_last=" << int(drop_last) << " rank=" << rank << " world_size=" << world_size
    << " shard_policy=" << (shard_policy == ShardPolicy::pad ? "pad" : "drop");
  return o.str();
}

PipelineState PipelineState::parse(const std::string& text) {
  std::istringstream in(text);
  std::string magic, version;
  in >> magic >> version;
  if (magic != "conveyor-state" || version != "1") {
    throw std::invalid_argument("state: not a conveyor-state version 1 line");
  }
  PipelineState s;
  std::map<std::string, std::string> kv;
  for (std::string tok; in >> tok;) {
    const auto eq = tok.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("state: token '" + tok + "' is not key=value");
    if (!kv.emplace(tok.substr(0, eq), tok.substr(eq + 1)).second) {
      throw std::invalid_argument("state: field '" + tok.substr(0, eq) + "' appears twice");
    }
  }
  auto take = [&](const char* key) -> std::string {
    auto it = kv.find(key);
    if (it == kv.end()) throw std::invalid_argument(std::string("state: field '") + key + "' is missing");
    std::string v = it->second;
    kv.erase(it);
    return v;
  };
  auto take_bool = [&](const char* key) {
    const std::string v = take(key);
    if (v != "0" && v != "1") throw std::invalid_argument(std::string("state: field '") + key + "' must be 0 or 1");
    return v == "1";
  };
  s.epoch = parse_u64("epoch", take("epoch"));
  const std::string delivered = take("delivered");
  s.seed = parse_u64("seed", take("seed"));
  s.dataset_size = parse_u64("dataset_size", take("dataset_size"));
  s.batch_size = parse_u64("batch_size", take("batch_size"));
  // Every rank's epoch has at most ceil(dataset_size / batch_size) batches.
  const std::uint64_t batches = s.batch_size == 0 ? 0 : ceil_div(s.dataset_size, s.batch_size);
  s.delivered = parse_ranges(delivered, batches);
  s.shuffle = take_bool("shuffle");
  s.drop_last = take_bool("drop_last");
  s.rank = parse_u64("rank", take("rank"));
  s.world_size = parse_u64("world_size", take("world_size"));
  const std::string policy = take("shard_policy");
  if (policy != "pad" && policy != "drop") throw std::invalid_argument("state: field 'shard_policy' must be pad or drop");
  s.shard_policy = policy == "pad" ? ShardPolicy::pad : ShardPolicy::drop;
  if (!kv.empty()) throw std::invalid_argument("state: unknown field '" + kv.begin()->first + "'");
  return s;
}

std::string PipelineState::setting_differences(const PipelineState& here) const {
  PipelineState same = here;  // this state's position, here's settings
  same.epoch = epoch;
  same.delivered = delivered;
  std::istringstream there_text(serialize()), here_text(same.serialize());
  std::string differ;
  for (std::string a, b; there_text >> a && here_text >> b;) {
    if (a != b) differ += (differ.empty() ? "" : ", ") + a + " there, " + b.substr(b.find('=') + 1) + " here";
  }
  return differ;
}

}  // namespace conveyor
