#!/usr/bin/env bash
# Whether this tree's CUDA files compile to the same kernels as an earlier commit's, without a
# GPU: each side's files go to PTX (sm_90, the build's flags) and every kernel's body is compared
# by name. A refactor that moves kernels between files passes; one that changes what a kernel does
# lists it. Names in anonymous namespaces carry a per-file hash, and branch labels the function's
# index in its file, so both are normalized first (scripts/ptx_kernels.py).
#   scripts/ptx-compare.sh 4d976fb kernels/cuda/depthwise_conv.cu -- kernels/cuda/depthwise_*.cu
# Files before `--` are the base commit's, after it this tree's. Exits 1 when a kernel differs or
# is on one side only. nvcc 13.0 is not always deterministic: two compiles of one unchanged
# few_channel_conv.cu gave 5-7 of its few_channel_partial_kernel instances other code, not only
# other register numbers (one compile read six floats of shared memory as a v4 and a v2 load,
# the other otherwise; 1-2 lines apart in 1,100). Where a kernel differs, run it once with the
# tree checked out at BASE (both sides the same source) before blaming the change.
# NEW_NAME_SED, a sed -E script, renames this tree's kernels before the comparison: a template
# parameter added with a default mangles into every name (and its parameters' names), e.g.
#   NEW_NAME_SED='s/(ELb[01])ELi0EE/\1EE/g' for a trailing `int` argument of 0.
set -euo pipefail
cd "$(dirname "$0")/.."
base="$1"
shift
old=() new=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do old+=("$1"); shift; done
[ $# -gt 0 ] && shift
new=("$@")
[ ${#old[@]} -gt 0 ] && [ ${#new[@]} -gt 0 ] || { echo "usage: $0 BASE OLD.cu... -- NEW.cu..." >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/base" "$work/ptx-old" "$work/ptx-new"
git archive "$base" | tar -x -C "$work/base"
to_ptx() {  # ROOT FILE OUT
  nvcc -DFRUGAL_WITH_CUDA=1 -I"$1" -isystem=/usr/local/cuda/include -O3 -DNDEBUG -arch=compute_90 \
    --expt-relaxed-constexpr -std=c++20 -ptx "$1/$2" -o "$3"
}
pids=()
for i in "${!old[@]}"; do to_ptx "$work/base" "${old[i]}" "$work/ptx-old/$i.ptx" & pids+=($!); done
for i in "${!new[@]}"; do to_ptx "$PWD" "${new[i]}" "$work/ptx-new/$i.ptx" & pids+=($!); done
for pid in "${pids[@]}"; do wait "$pid"; done  # set -e: a file that does not compile stops here
[ -n "${NEW_NAME_SED:-}" ] && sed -E -i "$NEW_NAME_SED" "$work"/ptx-new/*.ptx
python3 scripts/ptx_kernels.py "$work"/ptx-old/*.ptx -- "$work"/ptx-new/*.ptx
