#!/usr/bin/env python3
"""Where reserved memory goes: one row per train_step_bench --json --segments result (one JSON object
per line on stdin or in the files named), with peak allocated and reserved, their ratio, and the
caching allocator's segments after the timed steps by pool (count, reserved, allocated, free)."""
import json
import sys

MIB = 1024.0 * 1024.0


def rows(lines):
    for line in lines:
        line = line.strip()
        if line.startswith("{"):
            yield json.loads(line)


def main():
    lines = []
    if any(not a.startswith("--") for a in sys.argv[1:]):
        for path in [a for a in sys.argv[1:] if not a.startswith("--")]:
            with open(path) as f:
                lines += f.readlines()
    else:
        lines = sys.stdin.readlines()
    print("| model | precision | config | peak allocated MiB | peak reserved MiB | ratio "
          "| arena MiB | small: n, reserved/allocated MiB | large: n, reserved/allocated MiB "
          "| largest free blocks MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows(lines):
        segs = r.get("segments", [])
        by = {}
        for s in segs:
            d = by.setdefault(s["pool"], [0, 0, 0])
            d[0] += 1
            d[1] += s["size"]
            d[2] += s["allocated"]
        free = sorted((b for s in segs if s["pool"] != "arena" for b in s["free_blocks"]),
                      reverse=True)[:6]
        def pool(name):
            n, size, alloc = by.get(name, [0, 0, 0])
            return f"{n}, {size / MIB:.1f}/{alloc / MIB:.1f}"
        # A replayed step allocates nothing: its step's own peak is the capture's.
        alloc = r.get("capture_peak_allocated_bytes") or r["peak_allocated_bytes"]
        res = r["peak_reserved_bytes"]
        print(f"| {r['model']} | {r['precision']} | {r['config']}{', graph' if r.get('graph') else ''} "
              f"| {alloc / MIB:.1f} | {res / MIB:.1f} | {res / max(alloc, 1):.3f} "
              f"| {by.get('arena', [0, 0, 0])[1] / MIB:.1f} | {pool('small')} | {pool('large')} "
              f"| {', '.join(f'{b / MIB:.2f}' for b in free)} |")
    if "--maps" in sys.argv:
        maps(lines)


def maps(lines):
    """Every segment mapped, by the request that mapped it (train_step_bench --segments)."""
    for r in rows(lines):
        print(f"\n{r['model']} {r['precision']} {r['config']}{', graph' if r.get('graph') else ''}:")
        for m in r.get("segment_maps", []):
            when = "setup" if m["step"] < 0 else f"step {m['step']}"
            print(f"  {when}: {m['bytes'] / MIB:.2f} MiB for {m['tag'] or '(untagged)'}"
                  f" [{m['category']}, {m['phase']}]")


if __name__ == "__main__":
    main()
