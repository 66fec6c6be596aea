# Checks a `frugal train --memory-log` CSV of a soak run (scripts/soak.sh): at step ends after
# `warmup` steps, allocated and reserved bytes and the host's RSS stay flat. The largest value
# over the `window` steps after warm-up (an epoch boundary included, so that a periodic rise is
# in it) is the baseline; the largest after the window may exceed it by at most `block` bytes
# (allocated, reserved) and `rss_tol` bytes (RSS). Prints one line per quantity; exit status 1
# when one grew or when there are too few steps to tell.
#   awk -F, -v warmup=50 -v window=202 -v block=20971520 -v rss_tol=16777216 -f soak-check.awk log.csv
BEGIN { FS = ","; n = 0 }
NR == 1 {
  for (i = 1; i <= NF; ++i) col[$i] = i
  if (!("global_step" in col) || !("allocated_bytes" in col) || !("reserved_bytes" in col) ||
      !("host_rss_bytes" in col)) {
    print "soak-check: " FILENAME " lacks the memory log's columns (host_rss_bytes: a newer frugal)"
    bad = 1
    exit 1
  }
  next
}
$col["point"] == "step_end" {
  step = $col["global_step"] + 0
  if (step < warmup) next
  n++
  last = step
  q[1] = $col["allocated_bytes"] + 0
  q[2] = $col["reserved_bytes"] + 0
  q[3] = $col["host_rss_bytes"] == "" ? -1 : $col["host_rss_bytes"] + 0
  for (k = 1; k <= 3; ++k) {
    if (step < warmup + window) {
      if (!(k in base) || q[k] > base[k]) base[k] = q[k]
    } else {
      if (!(k in after) || q[k] > after[k]) { after[k] = q[k]; at[k] = step }
    }
  }
}
END {
  if (bad) exit 1
  name[1] = "allocated"; name[2] = "reserved"; name[3] = "host RSS"
  limit[1] = block; limit[2] = block; limit[3] = rss_tol
  if (!(1 in after)) {
    printf "soak-check: %d step ends after warm-up (%d), fewer than the window of %d and more: " \
           "nothing to compare\n", n, warmup, window
    exit 1
  }
  status = 0
  for (k = 1; k <= 3; ++k) {
    if (base[k] < 0) {
      printf "soak-check: %s was not recorded\n", name[k]
      status = 1
      continue
    }
    grown = after[k] - base[k]
    ok = grown <= limit[k]
    printf "soak-check: %-9s %s: steps %d-%d at most %.1f MiB, steps %d-%d at most %.1f MiB " \
           "(%+.1f MiB, limit %.1f MiB, highest at step %d)\n", name[k], ok ? "flat" : "GREW",
           warmup, warmup + window - 1, base[k] / 1048576, warmup + window, last,
           after[k] / 1048576, grown / 1048576, limit[k] / 1048576, at[k]
    if (!ok) status = 1
  }
  exit status
}
