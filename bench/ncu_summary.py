#!/usr/bin/env python3
"""Sums an `ncu --csv --metrics gpu__time_duration.sum` log by kernel name, longest first: where
the time of one profiled training step goes (scripts/gpu-profile.sh writes the logs).

  python3 bench/ncu_summary.py frugal-f32.csv [--top 40]
"""
import argparse
import csv
import sys

UNIT_TO_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0,
              "ms": 1.0, "second": 1e3, "s": 1e3}


def kernel_times(path):
    """{kernel name: (total ms, launches)} from ncu's CSV; lines before the header are skipped."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    totals = {}
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = UNIT_TO_MS.get(row.get("Metric Unit", "nsecond"))
        if scale is None:
            sys.exit(f"ncu_summary: {path}: unknown unit '{row.get('Metric Unit')}'")
        ms = float(row["Metric Value"].replace(",", "")) * scale
        name = row["Kernel Name"]
        t, n = totals.get(name, (0.0, 0))
        totals[name] = (t + ms, n + 1)
    return totals


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=40)
    a = p.parse_args()
    totals = kernel_times(a.csv)
    if not totals:
        sys.exit(f"ncu_summary: {a.csv}: no gpu__time_duration.sum rows")
    all_ms = sum(t for t, _ in totals.values())
    launches = sum(n for _, n in totals.values())
    print(f"{a.csv}: {all_ms:.2f} ms of kernel time in {launches} launches")
    for name, (t, n) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:a.top]:
        print(f"{t:9.3f} ms {100 * t / all_ms:5.1f}% {n:5d}x  {name[:110]}")


if __name__ == "__main__":
    main()
