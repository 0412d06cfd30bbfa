#!/usr/bin/env python3
"""Where Conveyor's CPU goes: perf samples of `conveyor bench`, grouped by stage.

    cmake -S . -B build/profile -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-g \\
          -DCONVEYOR_TESTS=OFF -DCONVEYOR_STATIC_JPEG=ON && cmake --build build/profile
    python3 apps/peers/perf_profile.py --list photos.txt [--build build/profile] [-- extra bench flags]
    python3 apps/peers/perf_profile.py --shards DIR ...     # what `conveyor pack` wrote

Debian's libjpeg-turbo shared libraries are stripped, so a profile of the
normal build shows one anonymous blob for the whole decoder; CONVEYOR_STATIC_JPEG
links the static archives, whose symbols survive. The run is the side-by-side setup
(RandomResizedCrop 224 + flip + normalize float32, batch 64, 2 workers, host
backend handing buffers over); `perf record --delay` skips the start-up (the
buffer pool's first touch), so the figures are the steady state.

Prints one row per bucket: its share of all CPU samples (times compare.py's
CPU ms per image, microseconds per image). Needs perf (linux-perf) and
permission to profile one's own processes (kernel.perf_event_paranoid <= 2).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

# First match wins; patterns are searched in the symbol name.
BUCKETS = [
    ("entropy decode (Huffman)", r"decode_mcu|jpeg_fill_bit_buffer|jpeg_huff_decode|jpeg_make_d_derived_tbl|"
                                 r"process_restart|start_pass_huff"),
    ("IDCT", r"idct"),
    ("upsampling + colour conversion", r"upsample|ycc_rgb|rgb_convert|color_convert|gray_rgb|ycck|cmyk"),
    ("other libjpeg (coefficient control, row skipping, headers)", r"decompress_onepass|jpeg_|jinit|jpeg|"
                                                                    r"read_markers|get_sos|get_sof|skip_variable"),
    ("resize", r"resize_triangle|horizontal_row|vertical_row|make_taps|layout_horizontal_weights"),
    ("flip (unfolded)", r"flip_rows"),
    ("normalize", r"normalize_on_host|to_float_chw|NormalizeTable"),
    ("render, copy into the slot, memcpy/memset", r"conveyor::render|memmove|memcpy|memset"),
    ("file read (kernel page cache)", r"copy_to_iter|filemap_|_copy_to_user|rep_movs|clear_user|read_iter|vfs_read|"
                                      r"ksys_read|do_syscall|entry_SYSCALL|syscall_exit|__d_lookup|link_path_walk|"
                                      r"do_filp_open|path_openat|xas_"),
    ("queues, threads, scheduler (futex, wake-ups)", r"futex|LightweightSemaphore|ConcurrentQueue|schedule|"
                                                    r"try_to_wake|pthread_|sem_|Pipeline::|BoundedQueue|"
                                                    r"DevicePipeline|pvm_irq|finish_task_switch"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--list", help="list file of images (`path label` per line)")
    src.add_argument("--shards", help="a folder `conveyor pack` wrote")
    ap.add_argument("--build", default="build/profile", help="build folder with symbols (see above)")
    ap.add_argument("--workers", default="2")
    ap.add_argument("--epochs", default="8")
    ap.add_argument("--delay-ms", default="2500", help="perf record --delay: skip start-up")
    ap.add_argument("extra", nargs="*", help="more conveyor bench flags (after --)")
    a = ap.parse_args()
    conveyor = os.path.join(a.build, "apps", "conveyor")
    if not os.access(conveyor, os.X_OK):
        sys.exit(f"perf_profile: {conveyor} is not built (see the configure line in this script's help)")
    with tempfile.TemporaryDirectory(prefix="conveyor-profile-") as work:
        data = os.path.join(work, "perf.data")
        bench = [conveyor, "bench", *(["--list", a.list] if a.list else ["--shards", a.shards]), "--workers", a.workers, "--batch", "64", "--crop", "224",
                 "--augment", "rrc", "--normalize", "float32", "--device", "host", "--host-transfer", "handover",
                 "--epochs", a.epochs] + a.extra
        rec = subprocess.run(["perf", "record", "-F", "1999", "--delay", a.delay_ms, "-o", data, "--"] + bench,
                             capture_output=True, text=True)
        if rec.returncode != 0:
            sys.exit("perf_profile: perf record failed: " + (rec.stderr.strip().splitlines() or ["?"])[-1])
        m = re.search(r"bench: (\d+) images/s over (\d+) epoch", rec.stdout)
        rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "symbol", "--stdio",
                              "--percent-limit", "0"], capture_output=True, text=True)
    shares = {name: 0.0 for name, _ in BUCKETS}
    shares["other"] = 0.0
    others = []
    for line in rep.stdout.splitlines():
        hit = re.match(r"\s+([\d.]+)%\s+\[[.k]\]\s+(.*?)\s*$", line)
        if not hit:
            continue
        pct, sym = float(hit.group(1)), hit.group(2)
        for name, pattern in BUCKETS:
            if re.search(pattern, sym):
                shares[name] += pct
                break
        else:
            shares["other"] += pct
            others.append((pct, sym))
    print(f"conveyor bench, {a.workers} workers: {m.group(1) if m else '?'} images/s (perf at 1999 Hz, start-up skipped)")
    print("| where | share of CPU samples |")
    print("|---|---|")
    for name, share in sorted(shares.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {share:.1f}% |")
    top = ", ".join(f"{s[:40]} {p:.1f}%" for p, s in sorted(others, reverse=True)[:5])
    print(f"largest in 'other': {top}")


if __name__ == "__main__":
    main()
