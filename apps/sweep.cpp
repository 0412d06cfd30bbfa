// `conveyor sweep`: a grid of runs over workers x host queue x device queue x
// batch x link x compute, one child process per point (fork, wait4), so each
// point's peak RSS is its own and a failing point cannot take the sweep down.
#include "apps/sweep.h"

#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/cli.h"
#include "apps/run.h"
#include "data/quote_bytes.h"

namespace conveyor::apps {

namespace {

struct SweepPoint {
  std::size_t workers, host_queue, device_queue, batch;
  double link_gbps, compute_ms;
  double images_per_s = 0, consumer_idle = 0, peak_rss_mib = 0;
  bool ok = false;
  bool interrupted = false;  // cut short by a signal to the sweep: not a row
};

// Runs one point in a child process, so its peak RSS is its own (wait4's rusage)
// and a failing point cannot take the sweep down. The parent has no other
// threads at the fork: each point's pipeline is gone before the next starts.
// --trace FILE for point `number` (1-based): t.json -> t-3.json, so that each
// point's trace is its own rather than every point writing over the last's.
// A device or pipe (/dev/null) is not a file to number: every point writes it.
std::string point_file(const std::string& file, std::size_t number) {
  std::error_code ec;
  const auto st = std::filesystem::status(file, ec);
  if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st)) return file;
  const std::filesystem::path f(file);
  std::filesystem::path out = f.parent_path() / (f.stem().string() + "-" + std::to_string(number));
  out += f.extension();
  return out.string();
}

SweepPoint run_point(Options o, SweepPoint p, std::size_t number) {
  if (!o.trace.empty()) o.trace = point_file(o.trace, number);
  o.workers = p.workers;
  o.host_queue = p.host_queue;
  o.device_queue = p.device_queue;
  o.batch = p.batch;
  o.link_gbps = p.link_gbps;
  o.compute_ms = p.compute_ms;
  int fd[2];
  if (::pipe(fd) != 0) throw std::runtime_error("sweep: pipe failed");
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("sweep: fork failed");
  if (pid == 0) {
    ::close(fd[0]);
    double figures[2] = {0, 0};
    try {
      const RunResult r = run_once(o, Output::quiet);
      if (r.interrupted) ::_exit(128 + r.interrupted);  // a cut-short point has no figures to give
      figures[0] = r.total().images_per_s();
      figures[1] = consumer_idle(r.stats);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "conveyor sweep: point failed: %s\n", printable(e.what()).c_str());
      ::_exit(1);
    }
    const bool wrote = ::write(fd[1], figures, sizeof figures) == ssize_t(sizeof figures);
    ::_exit(wrote ? 0 : 1);
  }
  ::close(fd[1]);
  // Waits for the child's figures, passing on a signal the sweep gets (Ctrl-C
  // reaches the whole process group; SIGTERM from `timeout` only the sweep).
  pollfd ready{fd[0], POLLIN, 0};
  bool forwarded = false;
  for (;;) {
    const int r = ::poll(&ready, 1, 100);
    if (r > 0 || (r < 0 && errno != EINTR)) break;  // figures, end of file, or an error the read below reports
    if (const int sig = interrupt_signal(); sig != 0 && !forwarded) {
      ::kill(pid, sig == SIGPIPE ? SIGTERM : sig);
      forwarded = true;
    }
  }
  double figures[2] = {0, 0};
  const bool got = ::read(fd[0], figures, sizeof figures) == ssize_t(sizeof figures);
  ::close(fd[0]);
  int status = 0;
  rusage usage{};
  while (::wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  p.ok = got && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  p.interrupted = interrupt_signal() != 0 && !p.ok;
  p.images_per_s = figures[0];
  p.consumer_idle = figures[1];
  p.peak_rss_mib = double(usage.ru_maxrss) / 1024.0;
  return p;
}

// --csv FILE (and --plot, drawn from it): the rows; the plot shows images/s
// against workers, one line per host queue depth, the other axes at their
// first value (device queue d0, batch b0).
void write_csv(const Options& o, const std::vector<SweepPoint>& points, const std::vector<std::size_t>& H,
               std::size_t d0, std::size_t b0) {
  if (!o.csv.empty()) {
    std::ostringstream out;
    out << "workers,host_queue,device_queue,batch,link_gbps,compute_ms,images_per_s,consumer_idle_pct,peak_rss_mib,ok\n";
    for (auto& p : points) {
      out << p.workers << ',' << p.host_queue << ',' << p.device_queue << ',' << p.batch << ',' << p.link_gbps << ','
          << p.compute_ms << ',' << p.images_per_s << ',' << 100 * p.consumer_idle << ',' << p.peak_rss_mib << ','
          << (p.ok ? 1 : 0) << '\n';
    }
    write_file("--csv", o.csv, out.str());  // whole before gnuplot reads it
    std::printf("wrote %s\n", o.csv.c_str());
    if (!o.plot.empty()) {
      // images/s against workers, one line per host queue depth (other axes at their first value).
      std::string body =
          "set key outside\nset xlabel 'workers'\nset ylabel 'images/s'\nset xtics 1\nset yrange [0:*]\n"
          "set title 'conveyor sweep: images/s by workers and host queue depth'\nplot ";
      for (std::size_t i = 0; i < H.size(); ++i) {
        body += (i ? ", " : "") + gnuplot_quote(o.csv) + " using ($2==" + std::to_string(H[i]) + " && $3==" + std::to_string(d0) +
                " && $4==" + std::to_string(b0) + " ? $1 : 1/0):7 with points pointsize 1.5 title 'host queue " +
                std::to_string(H[i]) + "'";
      }
      (void)gnuplot(o.plot, body + "\n", o.csv);
    }
  } else if (!o.plot.empty()) {
    throw UsageError("--plot needs --csv FILE (the plot is drawn from it)");
  }
}

}  // namespace

int sweep(const Options& o) {
  auto axis = [](std::vector<std::size_t> v, std::size_t d) { return v.empty() ? std::vector<std::size_t>{d} : v; };
  auto axisd = [](std::vector<double> v, double d) { return v.empty() ? std::vector<double>{d} : v; };
  const auto W = axis(o.sw_workers, o.workers), H = axis(o.sw_host_queue, o.host_queue),
             D = axis(o.sw_device_queue, o.device_queue), B = axis(o.sw_batch, o.batch);
  const auto L = axisd(o.sw_link, o.link_gbps), C = axisd(o.sw_compute, o.compute_ms);
  (void)open_dataset(o, Announce::always);  // make (or check) the dataset once, before the children
  catch_interrupts();  // the rows so far are written on SIGINT, SIGTERM or SIGPIPE; the children inherit it
  std::vector<SweepPoint> grid;
  for (auto w : W)
    for (auto h : H)
      for (auto d : D)
        for (auto b : B)
          for (auto l : L)
            for (auto c : C) grid.push_back(SweepPoint{w, h, d, b, l, c});
  const bool numbered_traces = !o.trace.empty() && point_file(o.trace, 1) != o.trace;
  if (numbered_traces) {  // each point's trace checked as an output, against the others and the inputs
    std::vector<OutputFile> outputs{{"--csv", o.csv}, {"--plot", o.plot, false, true}};
    for (std::size_t k = 1; k <= grid.size(); ++k) outputs.push_back({"--trace", point_file(o.trace, k)});
    check_outputs(o, outputs);
  }
  std::printf("%8s %10s %12s %6s %9s %10s %12s %10s %9s\n", "workers", "host_queue", "device_queue", "batch",
              "link_gbps", "compute_ms", "images_per_s", "idle_pct", "rss_mib");
  std::vector<SweepPoint> points;
  for (const SweepPoint& at : grid) {
    if (interrupt_signal() != 0) break;
    const SweepPoint p = run_point(o, at, points.size() + 1);
    if (p.interrupted) break;
    points.push_back(p);
    if (p.ok) {
      std::printf("%8zu %10zu %12zu %6zu %9.1f %10.1f %12.0f %10.1f %9.0f\n", p.workers, p.host_queue, p.device_queue,
                  p.batch, p.link_gbps, p.compute_ms, p.images_per_s, 100 * p.consumer_idle, p.peak_rss_mib);
    } else {
      std::printf("%8zu %10zu %12zu %6zu %9.1f %10.1f %12s\n", p.workers, p.host_queue, p.device_queue, p.batch,
                  p.link_gbps, p.compute_ms, "failed");
    }
    std::fflush(stdout);
  }
  write_csv(o, points, H, D[0], B[0]);
  if (numbered_traces && !points.empty()) {
    std::printf("traces: %s to %s, one per row in order (none for a failed row)\n", point_file(o.trace, 1).c_str(),
                point_file(o.trace, points.size()).c_str());
  }
  if (const int sig = interrupt_signal(); sig != 0) {
    std::printf("interrupted by %s after %zu of %zu points\n", signal_word(sig), points.size(), grid.size());
    return 128 + sig;
  }
  for (auto& p : points) {
    if (!p.ok) return 1;
  }
  return 0;
}


}  // namespace conveyor::apps
