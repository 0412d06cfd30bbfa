"""The conveyor wheel: `pip install .` or `python3 -m build --wheel`.

pybind11's cmake_example pattern: one setuptools Extension with no sources,
whose build_ext configures this CMake project and builds two targets, the
module (conveyor/_conveyor*.so) and the C++ `conveyor` command (shipped as
conveyor/bin/conveyor, which the `conveyor` console script runs). pyproject.toml
holds the metadata; this file adds the version, read from CMakeLists.txt's
project(VERSION), and the build.

The CMake build: Release, for the interpreter running this (sys.executable),
without tests or LibTorch, libjpeg-turbo and stb linked statically
(CONVEYOR_STATIC_DEPS) so the wheel needs none of them installed; CUDA when nvcc
is found (CONVEYOR_CUDA=AUTO), with the static CUDA runtime, so the same wheel
imports where there is no CUDA. Without libcurl (CONVEYOR_CURL=OFF): libcurl
would bring OpenSSL, nghttp2 and a dozen more shared libraries the wheel could
not count on finding, so the wheel reads local shards only, and an http(s)://
shards= fails with one line saying so; a build of the project (./go, CMake)
links the system's libcurl and reads URLs. CMAKE_ARGS (space-separated) adds or overrides
CMake arguments, e.g. CMAKE_ARGS="-DCONVEYOR_CUDA=OFF"; CMAKE_BUILD_PARALLEL_LEVEL
sets the build's jobs (default: every core).
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def project_version():
    """CMakeLists.txt's project(conveyor VERSION x.y.z): the one place the version is written."""
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(\s*conveyor\s+VERSION\s+([0-9]+(?:\.[0-9]+)*)", text)
    if not m:
        raise RuntimeError("setup.py: CMakeLists.txt has no 'project(conveyor VERSION x.y.z)'")
    return m.group(1)


def run(command):
    """Runs a CMake step; its failure ends the build with one line (CMake's own output is above it)."""
    status = subprocess.run(command).returncode
    if status != 0:
        sys.exit(f"conveyor: '{' '.join(command[:3])} ...' failed with status {status} (its output is above)")


class CMakeExtension(Extension):
    """An extension CMake builds: setuptools compiles nothing itself."""

    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if shutil.which("cmake") is None:
            raise RuntimeError("conveyor: building the wheel needs CMake >= 3.25 on PATH (Debian: apt-get install cmake)")
        module = Path(self.get_ext_fullpath(ext.name)).resolve()  # where setuptools packs the extension
        package = module.parent  # .../conveyor
        build = Path(self.build_temp).resolve() / "cmake"
        args = [
            "-DCMAKE_BUILD_TYPE=Release",
            "-DCONVEYOR_TESTS=OFF",
            "-DCONVEYOR_INSTALL=OFF",
            "-DCONVEYOR_TORCH=OFF",
            "-DCONVEYOR_PYTHON=ON",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DCONVEYOR_STATIC_DEPS=ON",
            "-DCONVEYOR_CURL=OFF",
        ]
        if shutil.which("ninja") and not (build / "CMakeCache.txt").exists():
            args.append("-GNinja")
        args += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        jobs = [] if "CMAKE_BUILD_PARALLEL_LEVEL" in os.environ else ["-j", str(os.cpu_count() or 1)]
        build.mkdir(parents=True, exist_ok=True)
        run(["cmake", "-S", str(ROOT), "-B", str(build), *args])
        run(["cmake", "--build", str(build), "--target", "conveyor_python", "conveyor", *jobs])

        built = sorted((build / "python" / "conveyor").glob("_conveyor*.so"))
        if len(built) != 1:
            raise RuntimeError(f"conveyor: expected one _conveyor*.so in {build / 'python' / 'conveyor'}, found {len(built)}")
        package.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], module)
        # The command beside the package's Python files (conveyor/_command.py runs it);
        # copy2 keeps its executable bit, which the wheel and pip keep too.
        (package / "bin").mkdir(exist_ok=True)
        shutil.copy2(build / "apps" / "conveyor", package / "bin" / "conveyor")


setup(
    version=project_version(),
    ext_modules=[CMakeExtension("conveyor._conveyor")],
    cmdclass={"build_ext": CMakeBuild},
)
