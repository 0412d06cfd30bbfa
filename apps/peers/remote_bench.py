#!/usr/bin/env python3
"""Shards over HTTP against the same shards on the local disk, side by side:
a cold cache read while it downloads (the default), a cold cache downloaded
first (`--download-first`: what every read did before streaming), a warm
cache (filled by `conveyor inspect` beforehand), every sample read by range
(`--cache-gb` below one shard: none is cached), and the local folder.

    python3 apps/peers/remote_bench.py --folder ../shared/data/photos-200 --repeat 5 --rounds 3 --mbps 0,200

--compare-build DIR runs the every-sample-by-range case with DIR's conveyor
too, in the same rounds (a build that differs in how it reads by range).
--latency-ms L puts a proxy in front of lighttpd that holds each request L ms
before passing it on (a network's round trip; the loopback has none).

The photos are copied --repeat times, listed, and packed with `conveyor pack
--shard-mb 16`; lighttpd serves the folder on a loopback port, its bandwidth
capped at --mbps megabytes/s (lighttpd's server.kbytes-per-second; 0: no cap,
the loopback's own speed). Each case is `conveyor bench` for one epoch
(RandomResizedCrop 224 + flip, batch 64, --workers), and its wall time from
the process's start, of which the time before the epoch began (wall less the
epoch's own seconds: the start, the manifest and index, and a download
first). Reported per case: those seconds and the epoch's images/s (median,
min-max), and the range reads and network wait of the streamed runs (bench
--json).
"""
import json
import os
import shutil
import asyncio
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from common import conveyor_binary, copy_photos, photo_bench_arguments  # this folder's



def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lighttpd(root, kbps, work):
    port = free_port()
    conf = os.path.join(work, "lighttpd.conf")
    with open(conf, "w") as f:
        f.write(f'server.document-root = "{root}"\nserver.bind = "127.0.0.1"\nserver.port = {port}\n'
                f'server.errorlog = "{work}/lighttpd.err"\n')
        if kbps:
            f.write(f"server.kbytes-per-second = {kbps}\n")
    lighttpd = shutil.which("lighttpd") or "/usr/sbin/lighttpd"
    proc = subprocess.Popen([lighttpd, "-D", "-f", conf])
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("lighttpd does not start")


def start_delay_proxy(port, latency_s):
    """A loopback TCP proxy to `port` that holds each chunk the client sends (a request) latency_s before passing
    it on; the answers go back at once. Returns the proxy's port; it runs in a daemon thread."""
    async def pipe(reader, writer, delay):
        try:
            while data := await reader.read(1 << 16):
                if delay:
                    await asyncio.sleep(delay)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def serve(client_reader, client_writer):
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.gather(pipe(client_reader, server_writer, latency_s), pipe(server_reader, client_writer, 0))

    proxy_port = free_port()
    ready = threading.Event()

    def run():
        async def main_loop():
            await asyncio.start_server(serve, "127.0.0.1", proxy_port)
            ready.set()
            await asyncio.Event().wait()
        asyncio.run(main_loop())

    threading.Thread(target=run, daemon=True).start()
    ready.wait()
    return proxy_port


def main():
    ap = photo_bench_arguments(__doc__, rounds=3)
    ap.add_argument("--mbps", default="0", help="bandwidth caps to run, MB/s, comma-separated (0: none)")
    ap.add_argument("--compare-build", help="another build folder: its conveyor reads every sample by range too")
    ap.add_argument("--latency-ms", type=float, default=0, help="each request held this long by a proxy (default 0: none)")
    a = ap.parse_args()
    conveyor = conveyor_binary(a)
    work = tempfile.mkdtemp(prefix="conveyor-remote-")
    try:
        listfile, files = copy_photos(a.folder, a.repeat, work)
        www = os.path.join(work, "www")
        shards_dir = os.path.join(www, "ds")
        subprocess.run([conveyor, "pack", "--list", listfile, "--out", shards_dir, "--shard-mb", "16"], check=True,
                       stdout=subprocess.DEVNULL)
        shards = [f for f in os.listdir(shards_dir) if f.endswith(".tar")]
        mb = sum(os.path.getsize(os.path.join(shards_dir, f)) for f in shards) / 1e6
        print(f"{len(files)} samples in {len(shards)} shards ({mb:.0f} MB); {a.rounds} rounds; {a.workers} workers",
              flush=True)
        flags_of_bench = ["bench", "--workers", str(a.workers), "--batch", "64", "--crop", "224", "--augment", "rrc",
                          "--epochs", "1"]
        other = os.path.join(os.path.abspath(a.compare_build), "apps", "conveyor") if a.compare_build else None
        for mbps in [float(x) for x in a.mbps.split(",")]:
            server, port = start_lighttpd(www, int(mbps * 1000), work)
            if a.latency_ms:
                port = start_delay_proxy(port, a.latency_ms / 1000)
            url = f"http://127.0.0.1:{port}/ds/"
            cases = ["local", "URL, cold, streamed", "URL, cold, downloaded first", "URL, warm", "URL, every sample by range"]
            if other:
                cases.append("URL, every sample by range, --compare-build")
            results = {c: [] for c in cases}
            streamed = []
            try:
                for r in range(a.rounds):
                    cache = os.path.join(work, f"cache-{mbps}-{r}")
                    for case in cases[r % len(cases):] + cases[:r % len(cases)]:
                        out = os.path.join(work, "bench.json")
                        t0 = time.monotonic()
                        if case == "local":
                            flags = ["--shards", shards_dir]
                        elif case == "URL, warm":
                            subprocess.run([conveyor, "inspect", "--shards", url, "--cache-dir", cache + "-warm"],
                                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                            t0 = time.monotonic()
                            flags = ["--shards", url, "--cache-dir", cache + "-warm"]
                        elif case.startswith("URL, every sample by range"):
                            flags = ["--shards", url, "--cache-dir", cache + "-none", "--cache-gb", "1e-6"]
                        elif case == "URL, cold, downloaded first":
                            flags = ["--shards", url, "--cache-dir", cache + "-first", "--download-first"]
                        else:
                            flags = ["--shards", url, "--cache-dir", cache + "-stream"]
                        binary = other if case.endswith("--compare-build") else conveyor
                        subprocess.run([binary, *flags_of_bench, *flags, "--json", out], check=True, stdout=subprocess.DEVNULL)
                        wall = time.monotonic() - t0
                        with open(out) as f:
                            j = json.load(f)
                        # Before the epoch: the process's start, the dataset, a download first.
                        results[case].append((wall, j["images_per_s"], wall - j["seconds"]))
                        if case.startswith("URL, cold, streamed") or case.startswith("URL, every"):
                            streamed.append((case, j["remote"]))
                        print(f"  {mbps:g} MB/s round {r + 1}: {case:28s} {wall:6.2f} s  {j['images_per_s']:7.1f} images/s",
                              flush=True)
            finally:
                server.kill()
                server.wait()
            cap = f"{mbps:g} MB/s" if mbps else "no cap"
            proxy = f", each request held {a.latency_ms:g} ms by a proxy" if a.latency_ms else ""
            print(f"\nlighttpd on loopback, {cap}{proxy}:")
            print("| case | wall s, median (min-max) | before the epoch, s | the epoch's images/s, median (min-max) |")
            print("|---|---|---|---|")
            for c in cases:
                w = [x[0] for x in results[c]]
                i = [x[1] for x in results[c]]
                b = [x[2] for x in results[c]]
                print(f"| {c} | {statistics.median(w):.2f} ({min(w):.2f}-{max(w):.2f}) | "
                      f"{statistics.median(b):.2f} ({min(b):.2f}-{max(b):.2f}) | "
                      f"{statistics.median(i):.0f} ({min(i):.0f}-{max(i):.0f}) |")
            ratios = [f[0] / s[0] for s, f in zip(results["URL, cold, streamed"], results["URL, cold, downloaded first"])]
            print("downloaded first / streamed, wall, per round: " + ", ".join(f"{x:.2f}" for x in ratios) +
                  f" (median {statistics.median(ratios):.2f}x)")
            for c in sorted({c for c, _ in streamed}):
                print(f"{c}: range reads (sent ahead) and the workers' network wait: " +
                      ", ".join(f"{s['range_reads']} ({s.get('read_ahead', 0)}), {s['network_wait_s']:.2f} s"
                                for k, s in streamed if k == c), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
