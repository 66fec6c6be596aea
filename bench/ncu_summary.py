#!/usr/bin/env python3
"""Sums an `ncu --csv --metrics gpu__time_duration.sum[,dram__bytes_read.sum,dram__bytes_write.sum]`
log by kernel name, longest first: where the time of one profiled training step goes
(scripts/gpu-profile.sh writes the logs). With the DRAM metrics it also reports the step's
HBM-traffic bound: every byte the kernels moved to or from HBM at the device's peak bandwidth
(--peak-gbs, the H200's 4,800 GB/s by default), against the kernel time.

  python3 bench/ncu_summary.py frugal-f32.csv [--top 40] [--peak-gbs 4800] [--ranges]

--ranges: the log is of ranges (ncu --replay-mode app-range), each row a whole range rather than a
kernel: the same sums, counted as ranges.
"""
import argparse
import csv
import sys

UNIT_TO_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0,
              "ms": 1.0, "second": 1e3, "s": 1e3}
UNIT_TO_BYTES = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6,
                 "GB": 1e9}
DRAM_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")


def launches(path):
    """[(kernel name, ms, DRAM bytes)], a launch each in the order ncu profiled them (its ID
    column), from ncu's CSV; lines before the header are skipped."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    by_id = {}
    for row in csv.DictReader(lines):
        metric, unit = row.get("Metric Name"), row.get("Metric Unit", "nsecond")
        if metric not in ("gpu__time_duration.sum",) + DRAM_METRICS:
            continue
        value = float(row["Metric Value"].replace(",", ""))
        entry = by_id.setdefault(row.get("ID", row["Kernel Name"]), [row["Kernel Name"], 0.0, 0.0])
        if metric == "gpu__time_duration.sum":
            scale = UNIT_TO_MS.get(unit)
            if scale is None:
                sys.exit(f"ncu_summary: {path}: unknown time unit '{unit}'")
            entry[1] += value * scale
        else:
            scale = UNIT_TO_BYTES.get(unit)
            if scale is None:
                sys.exit(f"ncu_summary: {path}: unknown byte unit '{unit}'")
            entry[2] += value * scale
    return [tuple(e) for e in by_id.values()]


def kernel_totals(path):
    """{kernel name: [total ms, launches, DRAM bytes]} from ncu's CSV."""
    totals = {}
    for name, ms, dram in launches(path):
        entry = totals.setdefault(name, [0.0, 0, 0.0])
        entry[0] += ms
        entry[1] += 1
        entry[2] += dram
    return totals


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--peak-gbs", type=float, default=4800.0)
    p.add_argument("--ranges", action="store_true", help="rows are ranges, not kernels")
    a = p.parse_args()
    totals = kernel_totals(a.csv)
    if not any(n for _, n, _ in totals.values()):
        sys.exit(f"ncu_summary: {a.csv}: no gpu__time_duration.sum rows")
    all_ms = sum(t for t, _, _ in totals.values())
    launches = sum(n for _, n, _ in totals.values())
    all_bytes = sum(b for _, _, b in totals.values())
    what = "ranges" if a.ranges else "launches"
    print(f"{a.csv}: {all_ms:.2f} ms of kernel time in {launches} {what}")
    if all_bytes > 0:
        bound_ms = all_bytes / (a.peak_gbs * 1e9) * 1e3
        print(f"HBM traffic {all_bytes / 1e9:.3f} GB: {bound_ms:.2f} ms at {a.peak_gbs:.0f} GB/s; "
              f"kernel time / bound = {all_ms / bound_ms:.2f}")
    for name, (t, n, b) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:a.top]:
        traffic = f" {b / 1e6:8.1f} MB" if all_bytes > 0 else ""
        print(f"{t:9.3f} ms {100 * t / all_ms:5.1f}% {n:5d}x{traffic}  {name[:110]}")


if __name__ == "__main__":
    main()
