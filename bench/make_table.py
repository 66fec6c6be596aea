#!/usr/bin/env python3
"""Builds a markdown table from the JSON lines of train_step_bench and torch_train_step.py:
one row per case (device, model, batch, input, classes, precision), frugal beside PyTorch,
with the ratios frugal / PyTorch. When a case ran several times (scripts/gpu-bench.sh's
BENCH_REPEATS), the row shows the run with the median img/s and the range of all runs; a second
table gives each precision's img/s over the same implementation's f32.

  python3 bench/make_table.py results.jsonl --title "H200, $(date -u +%F)" >> bench/RESULTS.md
"""
import argparse
import json
import sys

MIB = 1024.0 * 1024.0


def load(paths):
    rows = []
    for path in paths:
        with (sys.stdin if path == "-" else open(path)) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line.startswith("{"):
                    continue  # logs may be mixed in; only JSON objects count
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"make_table: {path}:{n}: bad JSON ({e})")
    return rows


def case_key(r):
    mode = "CUDA graph" if r.get("graph") else "eager"
    return (r["device"], r["model"], r["batch"], r["input"], r["classes"], r["precision"], mode)


def case_name(key):
    device, model, batch, inp, classes, _, mode = key
    graph = ", replayed from a CUDA graph" if mode != "eager" else ""
    return f"{model} {device} {batch} x {inp}, {classes} classes{graph}"


def mib(v):
    return "n/a" if v is None or v < 0 else f"{v / MIB:,.0f}" if v >= 100 * MIB else f"{v / MIB:,.1f}"


def ratio(a, b, digits=2):
    if a is None or b is None or a < 0 or b <= 0:
        return "n/a"
    return f"{a / b:.{digits}f}x"


def fmt_rate(v):
    return "n/a" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def impl_of(r):
    """frugal, pytorch, or "pytorch compile MODE" for torch_train_step.py --compile MODE runs."""
    config = r.get("config", "")
    if r["impl"] == "pytorch" and ", compile " in config:
        return "pytorch compile " + config.split(", compile ", 1)[1]
    return r["impl"]


def median_runs(rows):
    """{case: {impl: (the run with the median img/s, [img/s of every run])}}"""
    runs = {}
    for r in rows:
        runs.setdefault(case_key(r), {}).setdefault(impl_of(r), []).append(r)
    out = {}
    for key, impls in runs.items():
        for impl, rs in impls.items():
            rs = sorted(rs, key=lambda r: r["img_per_s"])
            out.setdefault(key, {})[impl] = (rs[(len(rs) - 1) // 2], [r["img_per_s"] for r in rs])
    return out


def fmt_runs(run):
    if run is None:
        return "n/a"
    r, rates = run
    text = fmt_rate(r["img_per_s"])
    if len(rates) > 1:
        text += f" ({fmt_rate(rates[0])}-{fmt_rate(rates[-1])}, {len(rates)} runs)"
    return text


def compile_runs(cases, key):
    """{impl: run} of the torch.compile modes for this case. torch.compile times eager steps of
    the compiled model; a replayed case without runs of its own takes its eager case's, so its row
    compares frugal's replayed step with PyTorch's best (issue 16's goal: 1.1x torch.compile)."""
    def of(impls):
        return {i: r for i, r in impls.items() if i.startswith("pytorch compile")}

    own = of(cases.get(key, {}))
    if own or key[6] == "eager":
        return own
    return of(cases.get(key[:6] + ("eager",), {}))


def table(rows):
    runs = median_runs(rows)
    cases = {k: {impl: run[0] for impl, run in v.items()} for k, v in runs.items()}
    cpu = any(k[0] == "cpu" for k in cases)
    head = ["case", "precision", "frugal img/s", "PyTorch img/s", "img/s frugal/PyTorch",
            "frugal peak alloc MiB", "PyTorch peak alloc MiB", "alloc frugal/PyTorch",
            "frugal peak reserved MiB", "PyTorch peak reserved MiB", "reserved frugal/PyTorch"]
    if cpu:
        head += ["frugal peak RSS MiB", "PyTorch peak RSS MiB", "RSS frugal/PyTorch"]
    compiled = any(i.startswith("pytorch compile") for v in cases.values() for i in v)
    if compiled:
        head += ["torch.compile img/s (best mode)", "compile peak alloc MiB",
                 "img/s frugal/best PyTorch"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key, impls in cases.items():
        f, t = impls.get("frugal"), impls.get("pytorch")
        if f is None and t is None:
            continue  # torch.compile alone: shown beside the replayed row of its case
        precision = key[5]
        get = lambda r, k: None if r is None else r.get(k)  # noqa: E731
        layout = f" ({t['layout']})" if t is not None else ""
        cells = [case_name(key), precision + layout,
                 fmt_runs(runs[key].get("frugal")), fmt_runs(runs[key].get("pytorch")),
                 ratio(get(f, "img_per_s"), get(t, "img_per_s")),
                 mib(get(f, "peak_allocated_bytes")), mib(get(t, "peak_allocated_bytes")),
                 ratio(get(f, "peak_allocated_bytes"), get(t, "peak_allocated_bytes")),
                 mib(get(f, "peak_reserved_bytes")), mib(get(t, "peak_reserved_bytes")),
                 ratio(get(f, "peak_reserved_bytes"), get(t, "peak_reserved_bytes"))]
        if cpu:
            cells += [mib(get(f, "peak_rss_timed_bytes")), mib(get(t, "peak_rss_timed_bytes")),
                      ratio(get(f, "peak_rss_timed_bytes"), get(t, "peak_rss_timed_bytes"))]
        if compiled:
            modes = compile_runs(cases, key)
            best_mode = max(modes, key=lambda i: modes[i]["img_per_s"]) if modes else None
            c = modes.get(best_mode)
            best = max([r["img_per_s"] for i, r in impls.items() if i != "frugal"] +
                       [r["img_per_s"] for r in modes.values()], default=None)
            cells += [f"{fmt_rate(c['img_per_s'])} ({best_mode[len('pytorch compile '):]})"
                      if c else "n/a", mib(get(c, "peak_allocated_bytes")),
                      ratio(get(f, "img_per_s"), best)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def precision_table(rows):
    """img/s of each precision over f32's, per case and implementation (median runs)."""
    runs = median_runs(rows)
    lines = ["| case | precision | frugal img/s / frugal f32 | PyTorch img/s / PyTorch f32 |",
             "| --- | --- | --- | --- |"]
    for key, impls in runs.items():
        if key[5] == "f32":
            continue
        f32 = runs.get(key[:5] + ("f32",) + key[6:], {})
        cells = [case_name(key), key[5]]
        for impl in ("frugal", "pytorch"):
            low, base = impls.get(impl), f32.get(impl)
            cells.append(ratio(low[0]["img_per_s"] if low else None,
                               base[0]["img_per_s"] if base else None))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


def notes(rows):
    out = []
    by_impl = {}
    for r in rows:
        by_impl.setdefault((r["impl"], r["device"]), r)
    for (impl, device), r in by_impl.items():
        extra = f", torch {r['torch_version']}" if "torch_version" in r else ""
        threads = f", {r['threads']} threads" if r.get("threads") else ""
        out.append(f"- {impl} on {device} ({r['device_name']}): {r['timer']}, median of {r['steps']} steps after {r['warmup']} "
                   f"warm-up{threads}{extra}. Memory: {r['memory_measured']}.")
    if any(r["device"] == "cpu" for r in rows):
        out.append("- Peak RSS: the process's VmHWM over the timed steps, after resetting it "
                   "through /proc/self/clear_refs; it includes each runtime's own libraries.")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*", default=["-"], help="JSON-lines files ('-': stdin)")
    p.add_argument("--title", default="", help="heading line, e.g. date and device")
    p.add_argument("--missing", default="", help="a note to add, e.g. that PyTorch was not found")
    a = p.parse_args()
    rows = load(a.files)
    if not rows:
        sys.exit("make_table: no JSON results found")
    parts = []
    if a.title:
        parts.append(f"### {a.title}\n")
    parts.append(table(rows))
    parts.append("")
    by_precision = precision_table(rows)
    if by_precision:
        parts += [by_precision, ""]
    parts.append(notes(rows))
    if a.missing:
        parts.append(f"- {a.missing}")
    print("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
