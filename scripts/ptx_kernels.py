"""Compares the kernels of two sets of PTX files by name and body (scripts/ptx-compare.sh).

Usage: ptx_kernels.py OLD.ptx... -- NEW.ptx...
Prints the counts and every kernel that differs or stands on one side only; exits 1 if any.
"""
import re
import sys

# nvcc names an anonymous namespace after its file (`50_GLOBAL__N__f1ecb1b2_17_depthwise_conv_cu_
# afa4b954`), and the file-local variables of its functions (a static __shared__ array) after a
# hash of the file's path (`_INTERNAL_3f8d4f8c_20_depthwise_forward_cu_afa4b954`), and numbers
# branch labels by the function's place in its file ($L__BB9_48), so a kernel moved to another
# file or compiled from another checkout differs in all three though its code is the same.
ANON = re.compile(
    r"\d+_GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]{8}|_INTERNAL_[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]{8}"
)
LABEL = re.compile(r"\$L__BB\d+_")
ENTRY = re.compile(r"^(?:\.visible )?\.entry (\S+)\((.*?)^\}", re.S | re.M)


def kernels(paths):
    found = {}
    for path in paths:
        with open(path) as f:
            text = LABEL.sub("L_", ANON.sub("ANON", f.read()))
        for m in ENTRY.finditer(text):
            name, body = m.group(1), m.group(2)
            if name in found and found[name] != body:
                print(f"{path}: {name} differs from its copy in another file")
                found[name + " (second copy)"] = body
            else:
                found[name] = body
    return found


def main(argv):
    if "--" not in argv:
        sys.exit(__doc__)
    cut = argv.index("--")
    old, new = kernels(argv[:cut]), kernels(argv[cut + 1 :])
    only_old = sorted(set(old) - set(new))
    only_new = sorted(set(new) - set(old))
    differ = sorted(k for k in set(old) & set(new) if old[k] != new[k])
    print(f"kernels: {len(old)} before, {len(new)} after; {len(differ)} differ, "
          f"{len(only_old)} only before, {len(only_new)} only after")
    for label, names in (("differs", differ), ("only before", only_old), ("only after", only_new)):
        for name in names[:20]:
            print(f"  {label}: {name}")
        if len(names) > 20:
            print(f"  ... and {len(names) - 20} more {label}")
    return 1 if differ or only_old or only_new else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
