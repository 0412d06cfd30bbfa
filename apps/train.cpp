// conveyor-train (`conveyor train`): trains LeNet-5 or a small ResNet with
// LibTorch on Conveyor's batches, as a C++ training program would.
//
//   conveyor train                                    LeNet-5, embedded dataset, 5 epochs
//   conveyor train --model resnet --crop 64 --epochs 10 --checkpoint run.pt --plot run.png
//   conveyor train --resume run.pt                    continue where run.pt left off
//   conveyor train --folder train/ --val-fraction 0.1 --lr 0.05 --workers 8
//
// The data path: workers decode and augment into pinned (CUDA) or plain host
// batch buffers; the transfer thread normalizes to float NCHW on the device
// (on the CPU for the host backend); to_tensors() wraps the result without a
// copy, and the batch goes back to the pipeline when autograd lets go of it.
// A validation split, held out by class before training, is scored after each
// epoch with Resize + CenterCrop. A checkpoint holds the model, the optimizer
// (momentum) and the pipeline's position, so --resume continues mid-epoch with
// the same batches, in the same order, as an uninterrupted run.
//
// SIGINT/SIGTERM: the step in progress finishes, the checkpoint is saved (with
// --checkpoint) and the program exits with status 130/143; a second one kills it.
// Exit status: 0; 1 when training fails; 2 for bad input (one line on stderr).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <numbers>
#include <optional>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <torch/cuda.h>
#include <torch/nn/functional.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>
#include <torch/utils.h>

#include "apps/cli.h"
#include "apps/toml_config.h"
#include "libtorch/models.h"
#include "libtorch/tensors.h"
#include "pipeline/fnv1a.h"
#include "stages/image_source.h"

using namespace conveyor;
using namespace conveyor::apps;

namespace {

struct TrainOptions {
  std::string model = "lenet";
  double lr = 0.05, momentum = 0.9, weight_decay = 5e-4;
  std::string schedule = "cosine";
  double val_fraction = 0.1;
  std::string checkpoint, resume, plot;
  std::size_t checkpoint_every = 0;  // batches; 0: at the end of each epoch only
  std::size_t stop_after = 0;        // batches this run, then checkpoint and exit
};

// What a checkpoint must agree on to be resumed: everything the batches and the model depend on.
// FNV-1a over every sample's path and label: the same dataset, not just the same size.
std::string dataset_digest(const Dataset& d) {
  Fnv1a h;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const std::string_view path = d.path_view(i);
    h.add(path.data(), path.size());
    h.add_value(d.label(i));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h.value);
  return hex;
}

std::string run_identity(const Options& o, const TrainOptions& t, int crop, const Dataset& all, std::size_t train_size) {
  std::ostringstream s;
  s << "model=" << t.model << " crop=" << crop << " dataset=" << dataset_digest(all) << " classes=" << all.num_classes()
    << " train_size=" << train_size
    << " augment=" << o.augment << " val_fraction=" << t.val_fraction << " seed=" << o.seed << " batch=" << o.batch
    << " rank=" << o.rank << " world_size=" << o.world_size;
  return s.str();
}

// The settings two run identities disagree on: "batch=64 there, 32 here; ...".
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

// Per class, a seeded shuffle of its samples; the first round(fraction * n) of
// each go to validation (at least one when fraction > 0 and the class has two,
// and never the class's last one: every class is trained on).
void split(const Dataset& all, double fraction, std::uint64_t seed, Dataset& train, Dataset& val) {
  std::vector<std::vector<std::size_t>> by_class(std::size_t(std::max<std::int64_t>(all.num_classes(), 0)));
  for (std::size_t i = 0; i < all.size(); ++i) by_class[std::size_t(all.label(i))].push_back(i);
  std::vector<std::filesystem::path> tp, vp;
  std::vector<std::int64_t> tl, vl;
  for (std::size_t c = 0; c < by_class.size(); ++c) {
    auto& ids = by_class[c];
    Rng rng(seed, 0x5eed'5a11ULL, c);  // Fisher-Yates from the class's own stream
    for (std::size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.next_u64() % i]);
    std::size_t n_val = std::size_t(std::llround(fraction * double(ids.size())));
    if (fraction > 0 && n_val == 0 && ids.size() >= 2) n_val = 1;
    if (!ids.empty()) n_val = std::min(n_val, ids.size() - 1);  // every class keeps a training sample
    std::sort(ids.begin(), ids.begin() + std::ptrdiff_t(n_val));
    std::sort(ids.begin() + std::ptrdiff_t(n_val), ids.end());
    for (std::size_t k = 0; k < ids.size(); ++k) {
      const bool held_out = k < n_val;
      (held_out ? vp : tp).push_back(all.path(ids[k]));
      (held_out ? vl : tl).push_back(all.label(ids[k]));
    }
  }
  train = Dataset(std::move(tp), std::move(tl), all.classes());
  val = Dataset(std::move(vp), std::move(vl), all.classes());
}

// strtod, not operator>>: a diverged run's checkpoint holds "nan" or "inf",
// and resuming it (at a lower --lr) is exactly what its user wants.
bool parse_double(const std::string& text, double& out) {
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size();
}

struct EpochRow {
  std::uint64_t epoch = 0;  // 1-based, as printed
  double train_loss = 0, train_acc = 0, val_loss = 0, val_acc = 0, images_per_s = 0, consumer_idle = 0;
};

// Running sums over an epoch's training batches (kept in the checkpoint, so a
// resumed epoch reports the same figures as an uninterrupted one).
struct Sums {
  double loss = 0;
  std::uint64_t correct = 0, count = 0;
  std::string serialize() const {
    std::ostringstream s;
    s.precision(17);
    s << loss << ' ' << correct << ' ' << count;
    return s.str();
  }
  static Sums parse(const std::string& text) {
    Sums x;
    std::istringstream s(text);
    std::string loss;
    if (!(s >> loss >> x.correct >> x.count) || !parse_double(loss, x.loss)) {
      throw UsageError("--resume: checkpoint field 'sums' is malformed");
    }
    return x;
  }
};

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

void write_string(torch::serialize::OutputArchive& a, const std::string& key, const std::string& value) {
  a.write(key, c10::IValue(value));
}

std::string read_string(torch::serialize::InputArchive& a, const std::string& key, const std::string& file) {
  c10::IValue v;
  if (!a.try_read(key, v) || !v.isString()) throw UsageError("--resume: " + file + ": not a conveyor checkpoint (no '" + key + "')");
  return v.toStringRef();
}

// Model, optimizer, pipeline position, the epoch's running sums and the
// history, written to FILE.tmp and renamed over FILE, so a crash mid-write
// leaves the previous checkpoint intact.
void save_checkpoint(const std::string& file, Net& model, torch::optim::SGD& optimizer, const std::string& identity,
                     const PipelineState& state, const Sums& sums, const std::vector<EpochRow>& history) {
  torch::serialize::OutputArchive archive, m, opt;
  model.save(m);
  optimizer.save(opt);
  archive.write("model", m);
  archive.write("optimizer", opt);
  write_string(archive, "format", "conveyor-train 1");
  write_string(archive, "identity", identity);
  write_string(archive, "pipeline_state", state.serialize());
  write_string(archive, "sums", sums.serialize());
  write_string(archive, "history", history_csv(history));
  const std::string tmp = file + ".tmp";
  archive.save_to(tmp);
  std::filesystem::rename(tmp, file);
}

void plot(const std::string& file, const std::vector<EpochRow>& rows) {
  const std::string csv = file + ".csv";
  write_text_file("--plot", csv, history_csv(rows));
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

int report_interrupt(int sig, std::size_t batches, std::uint64_t epoch, const std::string& checkpoint) {
  std::printf("interrupted by %s after %zu batch(es) of this run, in epoch %llu%s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
              batches, (unsigned long long)epoch,
              checkpoint.empty() ? " (no --checkpoint: nothing saved)" : ("; saved; resume with --resume " + checkpoint).c_str());
  std::fflush(stdout);
  return 128 + sig;
}

struct ValResult {
  double loss = 0, accuracy = 0;
  std::size_t images = 0, skipped = 0;
};

// The validation split's pipeline, built once for the run, so its pool is
// allocated (pinned, on CUDA) once rather than at every pass: one epoch of it
// per pass. Between passes its workers prefetch the next pass, as far as the
// pool allows. Resize + CenterCrop, no shuffle; every rank scores the whole split.
struct Validation {
  ImageSource images;     // before the pipeline, whose filler refers to it
  DevicePipeline pipeline;
  std::uint64_t passes = 0;  // epochs of `pipeline` read so far

  Validation(const Dataset& val, const Options& o, int crop, std::size_t passes_this_run,
             const std::shared_ptr<Device>& device, const TransferConfig& tc)
      : images(val, image_config(o, "center", crop), o.workers),
        pipeline(config(o, images, passes_this_run), val.size(), images.filler(), tc, device) {}

  static Config config(const Options& o, const ImageSource& images, std::size_t passes) {
    Config cfg = pipeline_config(o);
    cfg.sample_bytes = images.sample_bytes();
    cfg.shuffle = false;
    cfg.epochs = passes;
    cfg.rank = 0;
    cfg.world_size = 1;
    return cfg;
  }
};

// One pass over the validation split, with no gradients; none without a split
// (`val` null).
ValResult validate(Net& model, Validation* val, const torch::Device& where) {
  ValResult r;
  if (!val) return r;
  torch::NoGradGuard no_grad;
  model.eval();
  double loss = 0;
  std::uint64_t correct = 0;
  for (auto& b : val->pipeline.epoch(val->passes++)) {
    r.skipped += b.host().skipped.size();
    if (b.size() == 0) continue;
    TensorBatch t = to_tensors(std::move(b));
    const torch::Tensor labels = t.labels.to(where);
    const torch::Tensor out = model.forward(t.images);
    loss += torch::nll_loss(out, labels, {}, at::Reduction::Sum).item<double>();
    correct += out.argmax(1).eq(labels).sum().item<std::int64_t>();
    r.images += std::size_t(labels.size(0));
  }
  model.train();
  if (r.images) {
    r.loss = loss / double(r.images);
    r.accuracy = double(correct) / double(r.images);
  }
  return r;
}

// With more than one rank, each writes and reads its own checkpoint: FILE.rankR.
std::string per_rank(const std::string& file, const Options& o) {
  return file.empty() || o.world_size == 1 ? file : file + ".rank" + std::to_string(o.rank);
}

int train(Options& o, TrainOptions t) {
  if (o.rank >= o.world_size) throw UsageError("--rank " + std::to_string(o.rank) + " must be below --world-size " + std::to_string(o.world_size));
  t.checkpoint = per_rank(t.checkpoint, o);
  t.resume = per_rank(t.resume, o);
  if (!t.resume.empty() && !std::filesystem::is_regular_file(t.resume)) throw UsageError("--resume " + t.resume + ": no such file");
  check_writable("--checkpoint", t.checkpoint + ".tmp");  // written there, then renamed over it
  check_writable("--plot", t.plot);
  bool embedded = false;
  const Dataset all = open_dataset(o, embedded, false);
  if (all.size() == 0) throw UsageError("dataset: no samples");
  if (all.num_classes() < 2) throw UsageError("dataset: " + std::to_string(all.num_classes()) + " class(es); training needs at least 2");
  const int crop = o.crop ? o.crop : int(default_input(t.model));
  std::shared_ptr<Net> model;
  torch::manual_seed(o.seed);  // the initial weights, like the batches, follow --seed
  try {
    model = make_model({t.model, 3, all.num_classes(), crop});
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  Dataset train_set({}, {}), val_set({}, {});
  split(all, t.val_fraction, o.seed, train_set, val_set);
  if (train_set.size() == 0) throw UsageError("--val-fraction " + std::to_string(t.val_fraction) + " leaves no training samples");

  // The device: CUDA when both LibTorch and Conveyor have one; otherwise the
  // host backend handing its buffers over, so the tensors are the batches.
  std::shared_ptr<Device> device;
  if (o.device != "host" && torch::cuda::is_available()) {
    device = open_device_for(o);
  } else {
    if (o.device == "cuda") throw UsageError("--device cuda: this LibTorch was built without CUDA");
    DeviceConfig dc;
    dc.backend = BackendChoice::host;
    dc.host_transfer = HostTransfer::handover;
    device = open_device(dc);
    if (!torch::cuda::is_available()) std::printf("note: this LibTorch has no CUDA: training on the CPU, on the host backend\n");
  }
  const torch::Device where = torch_device(*device);
  model->to(where);
  torch::optim::SGD optimizer(model->parameters(),
                              torch::optim::SGDOptions(t.lr).momentum(t.momentum).weight_decay(t.weight_decay));

  const std::string identity = run_identity(o, t, crop, all, train_set.size());
  std::optional<PipelineState> resume_state;
  Sums sums;
  std::vector<EpochRow> history;
  if (!t.resume.empty()) {
    torch::serialize::InputArchive archive;
    try {
      archive.load_from(t.resume, where);  // tensors (momentum buffers too) onto this run's device
    } catch (const std::exception&) {
      throw UsageError("--resume: " + t.resume + ": not a readable checkpoint");
    }
    if (read_string(archive, "format", t.resume) != "conveyor-train 1") throw UsageError("--resume: " + t.resume + ": unknown format");
    const std::string saved = read_string(archive, "identity", t.resume);
    if (saved != identity) throw UsageError("--resume: " + t.resume + " is for another run: " + differences(saved, identity));
    torch::serialize::InputArchive m, opt;
    archive.read("model", m);
    archive.read("optimizer", opt);
    model->load(m);
    optimizer.load(opt);
    try {
      resume_state = PipelineState::parse(read_string(archive, "pipeline_state", t.resume));
    } catch (const std::invalid_argument& e) {
      throw UsageError("--resume: " + t.resume + ": " + e.what());
    }
    sums = Sums::parse(read_string(archive, "sums", t.resume));
    history = parse_history(read_string(archive, "history", t.resume));
    std::printf("resumed from %s: epoch %llu, %zu batch(es) of it done\n", t.resume.c_str(),
                (unsigned long long)resume_state->epoch, resume_state->delivered.size());
  }
  const std::uint64_t first_epoch = resume_state ? resume_state->epoch : 0;
  if (first_epoch >= o.epochs) {
    std::printf("nothing to do: the checkpoint is at epoch %llu of --epochs %zu\n", (unsigned long long)first_epoch, o.epochs);
    return 0;
  }

  ImageSource images(train_set, image_config(o, o.augment, crop), o.workers);
  Config cfg = pipeline_config(o);
  cfg.sample_bytes = images.sample_bytes();
  TransferConfig tc;
  tc.normalize = TransferConfig::Normalization{std::size_t(crop), std::size_t(crop), 3, Normalize{}, DType::float32};
  tc.consumer_stream = torch_consumer_stream(*device);
  try {
    cfg.validate();
  } catch (const ConfigError& e) {
    throw UsageError(e.what());
  }
  DevicePipeline pipeline(cfg, train_set.size(), images.filler(), tc, device, resume_state);
  std::optional<Validation> validation;  // one pass after each epoch of this run
  if (val_set.size()) validation.emplace(val_set, o, crop, o.epochs - first_epoch, device, tc);
  std::int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  std::printf("dataset: %s; %zu training and %zu validation images, %lld classes (chance %.1f%%); rank %zu of %zu\n"
              "model %s (%lld parameters), %dx%d inputs\n%s\n",
              embedded ? "the embedded default dataset" : all.source().c_str(), train_set.size(), val_set.size(),
              (long long)all.num_classes(), 100.0 / double(all.num_classes()), o.rank, o.world_size, t.model.c_str(),
              (long long)parameters, crop, crop, device->describe().c_str());

  const bool tty = ::isatty(STDERR_FILENO);
  std::size_t batches_this_run = 0;
  for (std::uint64_t e = first_epoch; e < o.epochs; ++e) {
    // The epoch's figures cover its training loop only: validation, the
    // checkpoint and the plot run with the consumer marked away.
    const PipelineStats before = pipeline.stats();
    if (t.schedule == "cosine") {
      const double lr = t.lr * 0.5 * (1 + std::cos(std::numbers::pi * double(e) / double(o.epochs)));
      for (auto& g : optimizer.param_groups()) static_cast<torch::optim::SGDOptions&>(g.options()).lr(lr);
    }
    const auto t0 = Clock::now();
    std::uint64_t images_now = 0, skipped = 0;
    auto range = pipeline.epoch(e);
    const std::size_t total = pipeline.batches_per_epoch();
    std::size_t done = total - range.size();
    for (auto& batch : range) {
      skipped += batch.host().skipped.size();
      ++done;
      if (batch.size() > 0) {
        TensorBatch tb = to_tensors(std::move(batch));
        const torch::Tensor labels = tb.labels.to(where);
        optimizer.zero_grad();
        const torch::Tensor out = model->forward(tb.images);
        const torch::Tensor loss = torch::nll_loss(out, labels);
        loss.backward();
        optimizer.step();
        const auto n = labels.size(0);
        sums.loss += loss.item<double>() * double(n);
        sums.correct += std::uint64_t(out.argmax(1).eq(labels).sum().item<std::int64_t>());
        sums.count += std::uint64_t(n);
        images_now += std::uint64_t(n);
      }  // tb dies here: the batch goes back to the pipeline
      ++batches_this_run;
      if (tty && (done % 4 == 0 || done == total)) {
        std::fprintf(stderr, "\r  epoch %llu %zu/%zu batches, loss %.3f", (unsigned long long)e, done, total,
                     sums.count ? sums.loss / double(sums.count) : 0.0);
      }
      // Mid-epoch saves only: the epoch's last batch is saved below, with its
      // validation row, so a checkpoint never holds a finished epoch without it.
      const bool mid_epoch = done < total;
      const int interrupted = interrupt_signal();
      const bool stopping = mid_epoch && ((t.stop_after && batches_this_run == t.stop_after) || interrupted);
      if (!t.checkpoint.empty() && mid_epoch &&
          (stopping || (t.checkpoint_every && batches_this_run % t.checkpoint_every == 0))) {
        save_checkpoint(t.checkpoint, *model, optimizer, identity, pipeline.state(), sums, history);
      }
      if (stopping) {
        if (tty) std::fprintf(stderr, "\r%*s\r", 60, "");
        if (interrupted) return report_interrupt(interrupted, batches_this_run, e, t.checkpoint);
        std::printf("stopped after %zu batch(es) (--stop-after) in epoch %llu%s\n", batches_this_run,
                    (unsigned long long)e,
                    t.checkpoint.empty() ? "" : ("; resume with --resume " + t.checkpoint).c_str());
        return 0;
      }
    }
    if (tty) std::fprintf(stderr, "\r%*s\r", 60, "");
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    pipeline.consumer_away();
    const PipelineStats epoch_stats = pipeline.stats().since(before);
    const ValResult v = validate(*model, validation ? &*validation : nullptr, where);
    EpochRow row;
    row.epoch = e + 1;
    row.train_loss = sums.count ? sums.loss / double(sums.count) : 0;
    row.train_acc = sums.count ? double(sums.correct) / double(sums.count) : 0;
    row.val_loss = v.images ? v.loss : std::nan("");  // no split: gaps in the CSV and the plot, not zeros
    row.val_acc = v.images ? v.accuracy : std::nan("");
    row.images_per_s = seconds > 0 ? double(images_now) / seconds : 0;
    row.consumer_idle = consumer_idle(epoch_stats);
    history.push_back(row);
    char val[96] = "no validation split";
    if (v.images) {
      std::snprintf(val, sizeof val, "val loss %.4f acc %.1f%% (%zu images%s)", row.val_loss, 100 * row.val_acc, v.images,
                    v.skipped ? (", " + std::to_string(v.skipped) + " skipped").c_str() : "");
    }
    std::printf("epoch %llu/%zu: train loss %.4f acc %.1f%% | %s | %llu images, "
                "%.1f s, %.0f images/s, consumer idle %.0f%%%s\n",
                (unsigned long long)e + 1, o.epochs, row.train_loss, 100 * row.train_acc, val,
                (unsigned long long)images_now, seconds, row.images_per_s, 100 * row.consumer_idle,
                skipped ? (", " + std::to_string(skipped) + " skipped").c_str() : "");
    std::printf("%s", epoch_stats.table().c_str());
    std::fflush(stdout);
    sums = Sums{};
    if (!t.checkpoint.empty()) save_checkpoint(t.checkpoint, *model, optimizer, identity, pipeline.state(), sums, history);
    if (!t.plot.empty()) plot(t.plot, history);
    if (const int sig = interrupt_signal(); sig && e + 1 < o.epochs) return report_interrupt(sig, batches_this_run, e, t.checkpoint);
    if (t.stop_after && batches_this_run >= t.stop_after && e + 1 < o.epochs) {
      std::printf("stopped after %zu batch(es) (--stop-after) at the end of epoch %llu%s\n", batches_this_run,
                  (unsigned long long)e, t.checkpoint.empty() ? "" : ("; resume with --resume " + t.checkpoint).c_str());
      return 0;
    }
  }
  const EpochRow& last = history.back();
  if (val_set.size()) {
    std::printf("final: val accuracy %.4f, val loss %.6f (chance %.4f)\n", last.val_acc, last.val_loss,
                1.0 / double(all.num_classes()));
  } else {
    std::printf("final: train loss %.6f, train accuracy %.4f (no validation split)\n", last.train_loss, last.train_acc);
  }
  for (const auto& s : pipeline.skipped()) std::printf("skipped: sample %llu: %s\n", (unsigned long long)s.index, s.reason.c_str());
  if (!t.checkpoint.empty()) std::printf("checkpoint: %s\n", t.checkpoint.c_str());
  return 0;
}

// The progress line on a terminal's stderr, wiped so an error line starts clean.
void clear_progress() {
  if (::isatty(STDERR_FILENO)) std::fprintf(stderr, "\r%*s\r", 60, "");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"conveyor train: train LeNet-5 or a small ResNet with LibTorch on Conveyor's batches"};
  app.option_defaults()->always_capture_default();  // --help shows each flag's default
  add_config_option(app, "", "train");
  app.footer(
      "Examples:\n"
      "  conveyor train                                   LeNet-5 on the embedded dataset, 5 epochs\n"
      "  conveyor train --model resnet --epochs 10 --checkpoint run.pt --plot run.png\n"
      "  conveyor train --resume run.pt --checkpoint run.pt\n"
      "  conveyor train --folder train/ --workers 8 --lr 0.05");
  Options o;
  o.epochs = 5;
  o.augment = "crop";
  TrainOptions t;
  add_pipeline_flags(app, o);
  app.get_option("--crop")->description("input size (default 32 for lenet, 64 for resnet)");
  app.get_option("--augment")->description(
      "crop: Resize + RandomCrop (padding 4) + flip (default) | rrc: RandomResizedCrop + flip | center: Resize + CenterCrop");
  app.add_option("--model", t.model, "lenet (32 x 32 inputs) or resnet (64..128 px; default --crop 64)")
      ->check(CLI::IsMember({"lenet", "resnet"}));
  app.add_option("--lr", t.lr, "SGD learning rate (the schedule's peak)")->check(CLI::Range(0.0, 100.0));
  app.add_option("--momentum", t.momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0));
  app.add_option("--weight-decay", t.weight_decay, "SGD weight decay")->check(CLI::Range(0.0, 1.0));
  app.add_option("--schedule", t.schedule, "learning rate per epoch: cosine (to 0 at --epochs) or constant")
      ->check(CLI::IsMember({"cosine", "constant"}));
  app.add_option("--val-fraction", t.val_fraction, "share of each class held out for validation")
      ->check(CLI::Range(0.0, 0.9));
  app.add_option("--checkpoint", t.checkpoint, "save model, optimizer and pipeline state to FILE after every epoch "
                 "(FILE.rankR with --world-size > 1)");
  app.add_option("--checkpoint-every", t.checkpoint_every, "also save every N batches (with --checkpoint)")->check(CLI::Range(1, 1 << 30));
  app.add_option("--resume", t.resume, "continue from a checkpoint (same dataset and settings)");
  app.add_option("--stop-after", t.stop_after, "stop after N batches of this run, saving the checkpoint (an interruption)")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--plot", t.plot, "draw loss, validation accuracy and images/s per epoch to FILE.png or FILE.svg");

  try {
    shard_from_environment(o);
    app.parse(argc, argv);
    catch_interrupts();
    return finish_stdout("conveyor train", train(o, t));
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ConfigError& e) {
    clear_progress();
    std::fprintf(stderr, "conveyor train: %s\n", config_error_line(app, "", e).c_str());
    return 2;
  } catch (const CLI::ParseError& e) {
    clear_progress();
    std::fprintf(stderr, "conveyor train: %s\n", e.what());
    return 2;
  } catch (const UsageError& e) {
    clear_progress();
    std::fprintf(stderr, "conveyor train: %s\n", e.what());
    return 2;
  } catch (const c10::Error& e) {
    clear_progress();
    // LibTorch's what() carries a backtrace: keep the message's first line.
    const std::string what = e.what_without_backtrace();
    std::fprintf(stderr, "conveyor train: LibTorch: %s\n", what.substr(0, what.find('\n')).c_str());
    return 1;
  } catch (const std::exception& e) {
    clear_progress();
    std::fprintf(stderr, "conveyor train: %s\n", e.what());
    return 1;
  }
}
