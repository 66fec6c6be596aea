#!/usr/bin/env bash
# The `gpu` suite (build-gpu/test_gpu) under compute-sanitizer, one pass per tool: memcheck,
# racecheck, initcheck, synccheck. Fails on any error but the CUDA API errors that a test
# provokes on purpose (ALLOWED_API_ERRORS, by error name and API call); prints one summary line
# per tool with its error count. Logs go to $OUT (default /tmp/sanitize).
#   OUT=/tmp/san scripts/gpu-sanitize.sh                 # builds build-gpu first, as gpu-check.sh
#   TOOLS="memcheck synccheck" MEMCHECK_FILTER='CapturedStep*' scripts/gpu-sanitize.sh
# What each pass runs (a gtest filter per tool, overridable by <TOOL>_FILTER):
#   memcheck, synccheck: the whole suite but the sweeps that repeat one step thousands of times
#     (FaultInjectionGpu, OomRecoveryGpu.AnOomAtEveryAllocation*: each allocation of a step in
#     turn) and the model zoo's estimates (MemoryEstimateGpu): the same kernels as the training
#     tests that do run, at many times the cost under instrumentation.
#   racecheck: the kernel parity tests (Gpu*, AmpGpu*): it checks shared-memory hazards inside a
#     kernel, and those tests launch every kernel of kernels/cuda at odd sizes; the training tests
#     launch the same kernels and would only cost hours. It runs in deterministic mode
#     (FRUGAL_DETERMINISTIC=1), so the kernels chosen do not depend on timings. It used to report
#     2 races inside cuDNN 9's TF32 input-gradient kernel for strided convolutions
#     (sm90_xmma_dgrad_implicit_gemm_indexed_..._strided), NVIDIA's code and cuDNN's only
#     deterministic TF32 algorithm there; deterministic mode now runs that gradient in full f32
#     (tf32_for in kernels/cuda/conv.cu). Nothing is excluded by kernel name.
#   initcheck: the kernel parity tests and DeterminismGpu (f32 and f16 MobileNetV2 steps, so
#     every layer's forward, backward and optimizer reads are checked once).
# memcheck runs with the caching allocator as it is: a read past a tensor but inside its segment
# is not seen (as in PyTorch); the kernels' own parity tests poison and bound their outputs.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUTDIR="${OUT:-/tmp/sanitize}"
BIN="${BIN:-build-gpu/test_gpu}"
TOOLS="${TOOLS:-memcheck racecheck initcheck synccheck}"
LONG_TESTS="FaultInjectionGpu*:OomRecoveryGpu.AnOomAtEveryAllocation*:MemoryEstimateGpu*"
# NvmlGpu compares NVML's device-used memory with the test's cudaMalloc; memcheck puts its own
# allocator (with padding) in between, so the test's expectation does not hold under it.
MEMCHECK_FILTER="${MEMCHECK_FILTER:-*-$LONG_TESTS:NvmlGpu*}"
# synccheck also leaves out the budget test (steps at batch 384 and 768, 224x224: over 5 minutes
# under it), whose kernels the training tests run too.
SYNCCHECK_FILTER="${SYNCCHECK_FILTER:-*-$LONG_TESTS:NvmlGpu*:MemoryBudgetGpu*}"
RACECHECK_FILTER="${RACECHECK_FILTER:-Gpu*:AmpGpu*}"
INITCHECK_FILTER="${INITCHECK_FILTER:-Gpu*:AmpGpu*:DeterminismGpu*}"
RACECHECK_ARGS="${RACECHECK_ARGS:-}"
# name@call of each API error a test provokes on purpose, and the test:
#   CapturedStepGpu.AStepThatReadsBackFailsToCaptureAndChangesNothing reads a value back inside a
#   stream capture: the copy fails as unsupported, ending the capture reports it invalidated, and
#   the error check after it (cudaGetLastError, which clears it) sees the same.
ALLOWED_API_ERRORS="${ALLOWED_API_ERRORS:-cudaErrorStreamCaptureUnsupported@cudaMemcpyAsync cudaErrorStreamCaptureUnsupported@cudaStreamSynchronize cudaErrorStreamCaptureInvalidated@cudaStreamEndCapture cudaErrorStreamCaptureInvalidated@cudaGetLastError}"
mkdir -p "$OUTDIR"
SANITIZER="${SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
[ -x "$SANITIZER" ] || { echo "gpu-sanitize: no compute-sanitizer (CUDA toolkit) here"; exit 1; }

if [ "${BUILD:-1}" = 1 ]; then
  scripts/gpu-build.sh test_gpu > "$OUTDIR/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$OUTDIR/build.log" | head -30; exit 1; }
fi

# Prints "errors allowed unexpected" for a sanitizer log: errors from the tool's summary line,
# allowed = the API errors of ALLOWED_API_ERRORS among them.
count_errors() {
  awk -v allowed="$ALLOWED_API_ERRORS" '
    BEGIN { n = split(allowed, a, " "); for (i = 1; i <= n; ++i) ok[a[i]] = 1; total = -1 }
    /========= ERROR SUMMARY: [0-9]+ error/ { total = $4 + 0 }
    /RACECHECK SUMMARY: .*\([0-9]+ error/ && total < 0 {
      s = $0; sub(/.*\(/, "", s); total = s + 0
    }
    /========= Program hit cuda[A-Za-z]+ .* on CUDA API call to [A-Za-z_0-9]+/ {
      name = $4; call = $NF; sub(/\.$/, "", call)
      if ((name "@" call) in ok) { allowed++; seen[name "@" call]++ } else { other[name "@" call]++ }
    }
    END {
      if (total < 0) { print "-1 0 -1"; exit }
      printf "%d %d %d\n", total, allowed, total - allowed
      for (k in seen) printf "  allowed: %s x%d\n", k, seen[k] > "/dev/stderr"
      for (k in other) printf "  NOT ALLOWED API error: %s x%d\n", k, other[k] > "/dev/stderr"
    }' "$1"
}

status=0
summary=()
for tool in $TOOLS; do
  var="$(echo "$tool" | tr a-z A-Z)_FILTER"
  filter="${!var:-*}"
  log="$OUTDIR/sanitize-$tool.log"
  echo "== $tool over $BIN --gtest_filter='$filter'"
  start=$(date +%s)
  extra=()
  env=()
  if [ "$tool" = racecheck ]; then
    read -r -a extra <<< "$RACECHECK_ARGS"
    env=(FRUGAL_DETERMINISTIC=1)
  fi
  env "${env[@]}" "$SANITIZER" --tool "$tool" --print-limit 1000 "${extra[@]}" "$BIN" --gtest_filter="$filter" \
    > "$log" 2>&1
  rc=$?
  read -r total allowed unexpected < <(count_errors "$log" 2> "$OUTDIR/sanitize-$tool.api")
  cat "$OUTDIR/sanitize-$tool.api"
  tests=$(grep -cE '^\[       OK \]' "$log")
  failed=$(grep -E '^\[  FAILED  \] [A-Za-z]' "$log" | sed 's/ (.*//' | sort -u | wc -l)
  line="gpu-sanitize $tool: $total errors ($allowed allowed API errors, $unexpected others), $tests tests passed, $failed failed, exit $rc, $(( $(date +%s) - start )) s"
  if [ "$total" -lt 0 ]; then
    line="gpu-sanitize $tool: no summary from compute-sanitizer (exit $rc): see $log"
    status=1
  elif [ "$unexpected" -ne 0 ] || [ "$failed" -ne 0 ]; then
    status=1
    grep -E "^========= (Invalid|Uninitialized|Error|Barrier|Race|Program hit)" "$log" | sort | uniq -c | sort -rn | head -10
  fi
  echo "$line"
  summary+=("$line")
done
echo "== summary"
printf '%s\n' "${summary[@]}"
exit "$status"
