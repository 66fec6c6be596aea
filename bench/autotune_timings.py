#!/usr/bin/env python3
"""Carries torch.compile's max-autotune timings from one device call to the next
(scripts/gpu-bench.sh, BENCH_COMPILE="max-autotune-no-cudagraphs").

Inductor's max-autotune times every candidate kernel of each convolution and GEMM before it
picks one: about 490 s for MobileNetV1's training step on the H200, most of a 600 s device call.
It keeps those timings in <cache dir>/cache/<hash>, one JSON file per GPU and software versions:
{"system": {..., "hash": ...}, "cache": {op: {inputs: {precision: {choice: ms}}}}}. A compile
that finds its timings there picks the same kernels without timing them again, so the step it
builds is the one a fresh compile would build. This file seeds a fresh cache directory with the
timings committed in bench/torch_autotune_timings.json and writes the grown file back.

  autotune_timings.py seed CACHE_DIR TIMINGS.json     # merge TIMINGS into CACHE_DIR's timings
  autotune_timings.py collect CACHE_DIR TIMINGS.json  # write CACHE_DIR's timings to TIMINGS
  autotune_timings.py count CACHE_DIR                 # how many (op, inputs) pairs are timed
"""
import json
import os
import sys


def merge(into, extra):
    """Adds extra's entries to into, recursively; into's own entries win (they are newer)."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into.setdefault(key, value)
    return into


def load(path):
    with open(path) as f:
        timings = json.load(f)
    if "hash" not in timings.get("system", {}) or not isinstance(timings.get("cache"), dict):
        sys.exit(f"autotune_timings: {path} is not inductor's timings file (no system.hash or cache)")
    return timings


def save(timings, path):
    with open(path + ".tmp", "w") as f:
        json.dump(timings, f, indent=1, sort_keys=True)  # stable order: small diffs when committed
        f.write("\n")
    os.replace(path + ".tmp", path)


def seed(cache_dir, timings_path):
    if not os.path.exists(timings_path):
        return
    committed = load(timings_path)
    os.makedirs(os.path.join(cache_dir, "cache"), exist_ok=True)
    target = os.path.join(cache_dir, "cache", committed["system"]["hash"])
    save(merge(load(target), committed) if os.path.exists(target) else committed, target)


def cache_files(cache_dir):
    folder = os.path.join(cache_dir, "cache")
    return [os.path.join(folder, n) for n in os.listdir(folder)] if os.path.isdir(folder) else []


def collect(cache_dir, timings_path):
    """The cache's file for the committed hash; when the GPU or versions changed (no such file),
    the newest one, whose timings replace the committed ones (they cannot be reused)."""
    folder = os.path.join(cache_dir, "cache")
    files = cache_files(cache_dir)
    if not files:
        sys.exit(f"autotune_timings: no timings under {folder}")
    wanted = load(timings_path)["system"]["hash"] if os.path.exists(timings_path) else None
    same = [p for p in files if os.path.basename(p) == wanted]
    save(load(same[0] if same else max(files, key=os.path.getmtime)), timings_path)


def count(cache_dir):
    """Prints how many (op, inputs) pairs the cache's timings hold: a compile's progress."""
    caches = [load(p)["cache"] for p in cache_files(cache_dir)]
    print(sum(len(inputs) for cache in caches for inputs in cache.values()))


def main(argv):
    if len(argv) == 3 and argv[1] == "count":
        count(argv[2])
    elif len(argv) == 4 and argv[1] in ("seed", "collect"):
        (seed if argv[1] == "seed" else collect)(argv[2], argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
