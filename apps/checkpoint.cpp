#include "apps/checkpoint.h"

#include <filesystem>
#include <sstream>
#include <stdexcept>

#include <torch/serialize.h>

#include "apps/cli.h"
#include "pipeline/fnv1a.h"

namespace conveyor::apps {

namespace {
// strtod, not operator>>: a diverged run's checkpoint holds "nan" or "inf",
// and resuming it (at a lower --lr) is exactly what its user wants.
bool parse_double(const std::string& text, double& out) {
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size();
}

std::vector<EpochRow> parse_history(const std::string& csv) {
  std::vector<EpochRow> rows;
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::istringstream s(line);
    for (std::string cell; std::getline(s, cell, ',');) f.push_back(cell);
    EpochRow r;
    double epoch = 0;
    if (f.size() != 7 || !parse_double(f[0], epoch) || !parse_double(f[1], r.train_loss) ||
        !parse_double(f[2], r.train_acc) || !parse_double(f[3], r.val_loss) || !parse_double(f[4], r.val_acc) ||
        !parse_double(f[5], r.images_per_s) || !parse_double(f[6], r.consumer_idle)) {
      throw UsageError("--resume: checkpoint field 'history' is malformed");
    }
    r.epoch = std::uint64_t(epoch);
    rows.push_back(r);
  }
  return rows;
}
}  // namespace

std::string run_identity(const Options& o, const TrainOptions& t, int crop, const Dataset& all, const std::string& digest,
                         std::size_t train_size) {
  std::ostringstream s;
  s << "model=" << t.model << " crop=" << crop << " dataset=" << digest << " classes=" << all.num_classes()
    << " train_size=" << train_size
    << " augment=" << name_of(kAugments, o.augment) << " val_fraction=" << t.val_fraction << " seed=" << o.seed << " batch=" << o.batch
    << " rank=" << o.rank << " world_size=" << o.world_size;
  // Only when given, so a checkpoint of a run without --transforms still resumes.
  if (!o.transforms.empty()) s << " transforms=" << o.transforms;
  return s.str();
}

std::string Sums::serialize() const {
  std::ostringstream s;
  s.precision(17);
  s << loss << ' ' << correct << ' ' << count << ' ' << batches;
  return s.str();
}

Sums Sums::parse(const std::string& text) {
  Sums x;
  std::istringstream s(text);
  std::string loss;
  if (!(s >> loss >> x.correct >> x.count) || !parse_double(loss, x.loss)) {
    throw UsageError("--resume: checkpoint field 'sums' is malformed");
  }
  if (!(s >> x.batches)) x.batches = 0;  // a checkpoint from before the batch digest
  return x;
}

std::string dataset_digest(const Dataset& d) {
  return "r" + hex16(d.name_digest());  // "r": not an old path_digest
}

std::string path_digest(const Dataset& d) {
  Fnv1a h;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const std::string_view path = d.path_view(i);
    h.add(path.data(), path.size());
    h.add_value(d.label(i));
  }
  return hex16(h.value);
}

std::string differences(const std::string& there, const std::string& here) {
  std::istringstream a(there), b(here);
  std::string x, y, out;
  while (a >> x && b >> y) {
    if (x == y) continue;
    const auto eq = y.find('=');
    out += (out.empty() ? "" : "; ") + x + " there, " + y.substr(eq + 1) + " here";
  }
  return out.empty() ? "its settings differ" : out;
}

std::string history_csv(const std::vector<EpochRow>& rows) {
  std::ostringstream s;
  s.precision(9);
  s << "epoch,train_loss,train_acc,val_loss,val_acc,images_per_s,consumer_idle\n";
  for (const auto& r : rows) {
    s << r.epoch << ',' << r.train_loss << ',' << r.train_acc << ',' << r.val_loss << ',' << r.val_acc << ','
      << r.images_per_s << ',' << r.consumer_idle << '\n';
  }
  return s.str();
}

void plot_history(const std::string& file, const std::vector<EpochRow>& rows) {
  const std::string csv = file + ".csv";
  write_file("--plot", csv, history_csv(rows));
  // Two panels over the same epochs (1-based, as printed), with equal margins so the x axes line up.
  const std::string body =
      "set multiplot layout 2,1 title 'conveyor train'\nset lmargin 10\nset rmargin 30\nset key outside right\n"
      "set xlabel 'epoch'\nset xrange [0.8:*]\nset xtics 1\nset ylabel 'loss'\nset yrange [0:*]\nset ytics nomirror\n"
      "set y2label 'accuracy'\nset y2range [0:1]\nset y2tics\n"
      "plot " + gnuplot_quote(csv) + " using 1:2 with linespoints title 'train loss', '' using 1:4 with linespoints title 'val loss', "
      "'' using 1:5 axes x1y2 with linespoints title 'val accuracy'\n"
      "unset y2label\nunset y2tics\nset ylabel 'images/s'\n"
      "plot " + gnuplot_quote(csv) + " using 1:6 with linespoints title 'images/s'\nunset multiplot\n";
  (void)gnuplot(file, body, csv);
}

namespace {
void write_string(torch::serialize::OutputArchive& a, const std::string& key, const std::string& value) {
  a.write(key, c10::IValue(value));
}

std::string read_string(torch::serialize::InputArchive& a, const std::string& key, const std::string& file) {
  c10::IValue v;
  if (!a.try_read(key, v) || !v.isString()) throw UsageError("--resume: " + file + ": not a conveyor checkpoint (no '" + key + "')");
  return v.toStringRef();
}
}  // namespace

void save_checkpoint(const std::string& file, Net& model, torch::optim::SGD& optimizer, const std::string& identity,
                     const CheckpointState& state) {
  torch::serialize::OutputArchive archive, m, opt;
  model.save(m);
  optimizer.save(opt);
  archive.write("model", m);
  archive.write("optimizer", opt);
  write_string(archive, "format", "conveyor-train 1");
  write_string(archive, "identity", identity);
  write_string(archive, "pipeline_state", state.pipeline.serialize());
  write_string(archive, "sums", state.sums.serialize());
  write_string(archive, "history", history_csv(state.history));
  // Serialized in memory, then written by us: LibTorch's own file writer
  // throws from a destructor when the disk fills, which ends the process in
  // std::terminate; this way a full disk is a one-line error, and the
  // previous checkpoint stays as it was.
  std::ostringstream bytes;
  archive.save_to(bytes);
  write_file("--checkpoint", file, bytes.str());  // whole or not at all
}

CheckpointState load_checkpoint(const std::string& file, Net& model, torch::optim::SGD& optimizer,
                                const std::string& identity, const std::string& also, const torch::Device& where) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(file, where);  // tensors (momentum buffers too) onto this run's device
  } catch (const std::exception&) {
    throw UsageError("--resume: " + file + ": not a readable checkpoint");
  }
  if (read_string(archive, "format", file) != "conveyor-train 1") throw UsageError("--resume: " + file + ": unknown format");
  const std::string saved = read_string(archive, "identity", file);
  if (saved != identity && (also.empty() || saved != also)) {
    // An older checkpoint (its dataset digest has no "r") is named against
    // the identity of its own form, so that only real differences show.
    const bool older = !also.empty() && saved.find(" dataset=r") == std::string::npos;
    const std::string diff = differences(saved, older ? also : identity);
    throw UsageError("--resume: " + file + " is for another run: " + diff);
  }
  torch::serialize::InputArchive m, opt;
  archive.read("model", m);
  archive.read("optimizer", opt);
  model.load(m);
  optimizer.load(opt);
  // The archive has no checksum of its own: a flipped float that became NaN or
  // inf would otherwise train on silently. (A flip to another finite value is
  // not caught here; the loss check in the training step sees its effect.)
  for (const auto& p : model.named_parameters()) {
    if (!torch::isfinite(p.value()).all().item<bool>()) {
      throw UsageError("--resume: " + file + ": parameter " + p.key() + " holds NaN or infinity (a corrupt checkpoint)");
    }
  }
  for (const auto& [key, st] : optimizer.state()) {
    const torch::Tensor& momentum = static_cast<const torch::optim::SGDParamState&>(*st).momentum_buffer();
    if (momentum.defined() && !torch::isfinite(momentum).all().item<bool>()) {
      throw UsageError("--resume: " + file + ": a momentum buffer holds NaN or infinity (a corrupt checkpoint)");
    }
  }
  CheckpointState state;
  try {
    state.pipeline = PipelineState::parse(read_string(archive, "pipeline_state", file));
  } catch (const std::invalid_argument& e) {
    throw UsageError("--resume: " + file + ": " + e.what());
  }
  state.sums = Sums::parse(read_string(archive, "sums", file));
  state.history = parse_history(read_string(archive, "history", file));
  return state;
}

}  // namespace conveyor::apps
