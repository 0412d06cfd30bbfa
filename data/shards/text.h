// The text files of a shard folder (the index, the manifest): how a name is
// written at the end of a line, and how a file is read whole or replaced whole.
// Shared by shard_index.cpp, manifest.cpp and the remote cache
// (data/remote/remote_shards.cpp); not installed.
// Thread safety: functions without shared state.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace conveyor::shard_text {

// A name as it ends its line: '%', CR and LF escaped so any name fits.
std::string escape(std::string_view s);
// escape's inverse; nothing for an escape it does not know.
std::optional<std::string> unescape(std::string_view s);
// The file's bytes, or nothing when it is missing, not a regular file or unreadable.
std::optional<std::string> slurp(const std::filesystem::path& p);
// Writes text to `file` whole or not at all (an AtomicFile), first removing the
// temporaries a killed writer left. False when anything fails.
bool write_atomically(const std::filesystem::path& file, const std::string& text);

}  // namespace conveyor::shard_text
