#include "data/shards/text.h"

#include <signal.h>
#include <sys/types.h>

#include <cerrno>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iterator>
#include <span>
#include <system_error>

#include "data/atomic_file.h"

namespace conveyor::shard_text {

namespace fs = std::filesystem;

namespace {

// Removes the temporaries of `file` that a killed writer left (FILE.tmpPID-N
// whose process is gone): Ctrl-C, SIGKILL or the OOM killer between write and
// rename. A PID alive here keeps its file; one of another PID namespace that
// reads as gone loses it, and its rename then fails: its index goes unwritten,
// never wrong.
void remove_stale_temporaries(const fs::path& file) {
  const std::string prefix = file.filename().string() + ".tmp";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(file.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (pid > 0 && *end == '-' && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH) fs::remove(e.path(), ec);
  }
}

}  // namespace

std::string escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '%') out += "%25";
    else if (c == '\n') out += "%0A";
    else if (c == '\r') out += "%0D";
    else out += c;
  }
  return out;
}

std::optional<std::string> unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    const auto code = s.substr(i + 1, 2);
    if (code == "25") out += '%';
    else if (code == "0A") out += '\n';
    else if (code == "0D") out += '\r';
    else return std::nullopt;
    i += 2;
  }
  return out;
}

std::optional<std::string> slurp(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::nullopt;
  try {
    std::ifstream f(p, std::ios::binary);
    if (!f) return std::nullopt;
    std::string s{std::istreambuf_iterator<char>(f), {}};
    if (f.bad()) return std::nullopt;
    return s;
  } catch (const std::exception&) {  // libstdc++ throws from underflow on a read error
    return std::nullopt;
  }
}

bool write_atomically(const fs::path& file, const std::string& text) {
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  remove_stale_temporaries(file);
  return write_file_atomically(file, {reinterpret_cast<const unsigned char*>(text.data()), text.size()}) == 0;
}

}  // namespace conveyor::shard_text
