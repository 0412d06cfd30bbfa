"""The `conveyor` console script of the wheel: runs the C++ `conveyor` command
that the wheel ships beside this file (conveyor/bin/conveyor), with the same
arguments, in this process (exec), so its exit status and signals are the
command's own. Where it is missing (the package imported from a CMake build
tree, say), one line on stderr says where the command is, and the status is 127,
a shell's for a command not found; 126 where it cannot be run.
"""

import os
import sys


def main():
    binary = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "conveyor")
    if not os.access(binary, os.X_OK):
        sys.stderr.write(
            f"conveyor: the C++ command is not in this installation ({binary} is missing or not executable); "
            "the wheel ships it (pip install .), a CMake build has it at BUILD/apps/conveyor\n"
        )
        return 127
    try:
        os.execv(binary, ["conveyor", *sys.argv[1:]])
    except OSError as e:  # not a program for this machine, say
        sys.stderr.write(f"conveyor: cannot run {binary}: {e.strerror}\n")
        return 126  # a shell's for a command found but not runnable


if __name__ == "__main__":
    sys.exit(main())
