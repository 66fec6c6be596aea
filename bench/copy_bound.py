#!/usr/bin/env python3
"""A training step's kernel time against what its launches could take at copy speed.

  python3 bench/copy_bound.py STEP.csv COPY.csv [--top 25] [--peak-gbs 4800]

STEP.csv: `ncu --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum`
over one step (scripts/gpu-profile.sh with PROFILE_COPY_BOUND=1 keeps it); COPY.csv: the same
metrics over build-gpu/copy_curve_probe.

Note [The copy bound]: the HBM goal divides the step's kernel time by its bytes at the peak
rate, a bound no real kernel reaches and one that ignores what every launch costs by itself (an
empty one 2.3 us under ncu). The copy bound gives each launch of the step the time of the fastest
plain copy, measured the same way, that moved at least as many bytes as the launch did, and sums
them. A launch that moves few bytes gets an empty copy's time; a large one a copy's streaming
rate. So it is what the same launches would take if each ran as fast as a copy of its bytes: the
step time that kernel work alone can still win, where the peak-rate bound also counts what only
fewer launches or fewer bytes can win.
"""
import argparse
import bisect
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_summary import launches  # noqa: E402


def copy_curve(path):
    """copy_ms(bytes): the least time of the copies that moved at least `bytes` (the largest
    copy's rate past its size)."""
    points = sorted((b, ms) for _, ms, b in launches(path) if b > 0)
    if not points:
        sys.exit(f"copy_bound: {path}: no launch with DRAM bytes (was it run with them?)")
    sizes = [b for b, _ in points]
    # suffix minima: the fastest copy that moved at least sizes[i]
    fastest = [0.0] * len(points)
    best = float("inf")
    for i in range(len(points) - 1, -1, -1):
        best = min(best, points[i][1])
        fastest[i] = best
    big_bytes, big_ms = points[-1]

    def copy_ms(b):
        if b > big_bytes:
            return big_ms * b / big_bytes
        return fastest[bisect.bisect_left(sizes, b)]

    return copy_ms


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step_csv")
    p.add_argument("copy_csv")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--peak-gbs", type=float, default=4800.0)
    a = p.parse_args()
    copy_ms = copy_curve(a.copy_csv)
    step = launches(a.step_csv)
    if not step:
        sys.exit(f"copy_bound: {a.step_csv}: no launches")
    by_name = {}
    for name, ms, b in step:
        e = by_name.setdefault(name, [0.0, 0.0, 0, 0.0])
        e[0] += ms
        e[1] += copy_ms(b)
        e[2] += 1
        e[3] += b
    time_ms = sum(e[0] for e in by_name.values())
    copy_total = sum(e[1] for e in by_name.values())
    dram = sum(e[3] for e in by_name.values())
    bound_ms = dram / (a.peak_gbs * 1e9) * 1e3
    print(f"{a.step_csv}: {time_ms:.2f} ms of kernel time in {len(step)} launches, "
          f"{dram / 1e9:.3f} GB")
    print(f"bound at {a.peak_gbs:.0f} GB/s {bound_ms:.2f} ms; the same launches at copy speed "
          f"{copy_total:.2f} ms ({copy_total / bound_ms:.2f}x the bound)")
    print(f"kernel time / bound {time_ms / bound_ms:.2f}; kernel time / copy bound "
          f"{time_ms / copy_total:.2f}")
    print(f"{'ms':>9} {'at copy':>9} {'above':>9} {'launches':>8}  kernel, most time above copy "
          "speed first")
    rows = sorted(by_name.items(), key=lambda kv: -(kv[1][0] - kv[1][1]))
    for name, (ms, at_copy, n, _) in rows[:a.top]:
        print(f"{ms:9.3f} {at_copy:9.3f} {ms - at_copy:9.3f} {n:8d}  {name[:100]}")


if __name__ == "__main__":
    main()
