// Shard URLs as WebDataset users write them: one pattern with brace groups,
// expanded as Python's braceexpand (which webdataset uses) expands it.
//
//   expand_url_list("https://host/train-{000000..000002}.tar");
//     // https://host/train-000000.tar, ...-000001.tar, ...-000002.tar
//   expand_url_list("s/{a,b}-{1..3..2}.tar");  // s/a-1.tar s/a-3.tar s/b-1.tar s/b-3.tar
//
// A group is `{x,y,...}` (alternatives, each expanded in turn; groups nest),
// `{M..N}` or `{M..N..STEP}` (integers, either way; zero-padded to the wider
// end when an end is written with a leading zero, as in 000127), or `{a..e}`
// (letters). Expansions come out in order: left groups vary
// slowest. Hand-written: Debian packages no C++ brace expander, and the
// grammar is this small.
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor {

// The URLs `pattern` stands for; a pattern without braces is itself. Throws
// std::invalid_argument, one line saying what is wrong (not quoting the
// pattern, which may hold credentials: the caller names it): an unbalanced brace, a
// group with neither ',' nor '..', a range whose ends are not both integers
// or both letters, a step of 0, or more than `limit` URLs.
std::vector<std::string> expand_url_list(std::string_view pattern, std::size_t limit = 1'000'000);

}  // namespace conveyor
