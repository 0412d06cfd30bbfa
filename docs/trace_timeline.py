#!/usr/bin/env python3
"""Draws a conveyor --trace file as text: one row per thread, one column per
time step, a letter where the thread was in a span (d decode/fill, t transfer,
s step), '.' where it waited. Used for the timelines in docs/teaching.md.

    python3 docs/trace_timeline.py trace.json [--from-ms 100] [--ms 60] [--step-ms 0.5]
"""
import argparse
import json

p = argparse.ArgumentParser()
p.add_argument("trace")
p.add_argument("--from-ms", type=float, default=None, help="window start (default: the 10th step's start)")
p.add_argument("--ms", type=float, default=60.0, help="window length")
p.add_argument("--step-ms", type=float, default=0.5, help="time per column")
a = p.parse_args()

events = json.load(open(a.trace))["traceEvents"]
names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
spans = [e for e in events if e["ph"] == "X"]
steps = sorted(e["ts"] for e in spans if e["name"] == "step")
start = a.from_ms * 1000 if a.from_ms is not None else (steps[min(9, len(steps) - 1)] if steps else 0)
cols = int(a.ms / a.step_ms)
letter = {"decode": "d", "fill": "d", "transfer": "t", "step": "s"}
rows = {}
for e in spans:
    row = rows.setdefault(e["tid"], ["."] * cols)
    c0 = int((e["ts"] - start) / (a.step_ms * 1000))
    c1 = int((e["ts"] + e["dur"] - start) / (a.step_ms * 1000))
    for c in range(max(c0, 0), min(c1 + 1, cols)):
        row[c] = letter.get(e["name"], "#")
width = max(len(names.get(t, str(t))) for t in rows)
print(f"{'':{width}}  {a.ms:g} ms from {start / 1000:.1f} ms, {a.step_ms:g} ms per column")
for tid in sorted(rows, key=lambda t: (t != 1, t != 2, t)):
    print(f"{names.get(tid, str(tid)):>{width}}  {''.join(rows[tid])}")
