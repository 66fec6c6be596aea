#!/usr/bin/env python3
"""A markdown table of peak memory and speed from the JSON lines of train_step_bench and
torch_train_step.py, one row per run in the order they ran, with the configuration (checkpoint,
torch.compile) each ran under; scripts/gpu-memory-bench.sh writes the lines.

  python3 bench/memory_table.py "$OUT/memory.jsonl" --title "H200, $(date -u +%F)"
"""
import argparse
import json

MIB = 1024.0 * 1024.0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("jsonl")
    p.add_argument("--title", default="peak memory")
    a = p.parse_args()
    rows = []
    with open(a.jsonl) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    print(f"\n### {a.title}\n")
    print("| model | batch x input | precision | impl | configuration | img/s | peak allocated MiB |"
          " peak reserved MiB | reserved/allocated | arena / its bound |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        alloc = r.get("peak_allocated_bytes")
        res = r.get("peak_reserved_bytes")
        print(f"| {r['model']} | {r['batch']} x {r['input']} | {r['precision']} | {r['impl']} | "
              f"{r.get('config', '')} | {r['img_per_s']:,.0f} | "
              f"{alloc / MIB:,.0f} | {res / MIB:,.0f} | {res / alloc:.3f} | {arena(r)} |"
              if alloc is not None else "| - | - |")


def arena(r):
    """The step planner's arena against its lower bound (frugal with the planner only)."""
    if not r.get("planner_arena_bytes"):
        return "-"
    bound = r["planner_lower_bound_bytes"]
    return f"{r['planner_arena_bytes'] / MIB:,.0f} / {bound / MIB:,.0f} MiB ({r['planner_arena_bytes'] / bound:.3f}x)"


if __name__ == "__main__":
    main()
