#!/usr/bin/env python3
"""Loss curves side by side (frugal train --loss-log CSVs: step,loss) as a Markdown table:
chosen steps, the mean of the last 20 steps, and each curve's mean and largest absolute
difference from the first one.

  python3 bench/loss_curve_table.py one-process=one.csv two-ranks=ranks.csv
"""
import csv
import sys


def read(path):
    with open(path) as f:
        return [float(row["loss"]) for row in csv.DictReader(f)]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    named = [arg.split("=", 1) for arg in sys.argv[1:]]
    curves = [(name, read(path)) for name, path in named]
    steps = min(len(c) for _, c in curves)
    if steps == 0:
        sys.exit("loss_curve_table: a curve has no steps")
    shown = sorted({1, 10, 50, steps // 2, steps} & set(range(1, steps + 1)))
    print("| step | " + " | ".join(name for name, _ in curves) + " |")
    print("| --- |" + " --- |" * len(curves))
    for s in shown:
        print(f"| {s} | " + " | ".join(f"{c[s - 1]:.4f}" for _, c in curves) + " |")
    tail = min(20, steps)
    print(f"| mean of the last {tail} | " +
          " | ".join(f"{sum(c[steps - tail:steps]) / tail:.4f}" for _, c in curves) + " |")
    base = curves[0][1]
    for name, c in curves[1:]:
        diffs = [abs(a - b) for a, b in zip(base[:steps], c[:steps])]
        print(f"\n{name} against {curves[0][0]}: mean |difference| {sum(diffs) / steps:.4f}, "
              f"largest {max(diffs):.4f} (step {diffs.index(max(diffs)) + 1}) over {steps} steps")


if __name__ == "__main__":
    main()
