# Statistics for scripts/bench.sh, in a file of their own so that
# tests/scripts/bench_stats_test.sh can check them on hand-made inputs.
# Sourced, not run. Each function takes its inputs as arguments and prints
# its answer; those over VALUES skip the non-numeric ones, such as NA (a run
# that failed).
# shellcheck shell=bash

# numbers VALUES...: the numeric arguments (not NA), ascending, one a line.
numbers() { printf '%s\n' "$@" | grep -E '^[0-9.eE+-]+$' | sort -g; }

# median VALUES...: the median of the numeric arguments, or n/a.
median() {
  numbers "$@" |
    awk '{v[NR] = $1} END {
      if (NR == 0) { print "n/a"; exit }
      if (NR % 2) m = v[(NR + 1) / 2]; else m = (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "%.6g\n", m }'
}

# interval VALUES...: a distribution-free confidence interval for the median
# of the numeric arguments, assuming they are independent: the k-th smallest
# and the k-th largest, with k as large as keeps the coverage,
# 1 - 2 P(Binomial(n, 1/2) < k), at least 90%. Prints "LO HI COVERAGE", or
# "n/a n/a n/a" with fewer than 5 values (even k = 1 covers only 87.5% of
# 4). 5 values give 93.8% (k = 1), 9 give 96.1% (k = 2), 15 give 96.5% (k = 4).
interval() {
  numbers "$@" |
    awk '{v[NR] = $1} END {
      n = NR; best = 0; cov = 0
      # tail = P(Binomial(n, 1/2) < k), built up term by term.
      term = 1; for (i = 0; i < n; i++) term /= 2
      tail = 0
      for (k = 1; 2 * k <= n; k++) {
        tail += term; term = term * (n - k + 1) / k
        c = 1 - 2 * tail
        if (c < 0.9) break
        best = k; cov = c
      }
      if (best == 0) { print "n/a n/a n/a"; exit }
      printf "%.3f %.3f %.3f\n", v[best], v[n + 1 - best], cov }'
}

# meets RATIO OP TARGET: whether the median RATIO meets the target (yes or
# no); n/a without a ratio, - without a target.
meets() {
  awk -v r="$1" -v op="$2" -v t="$3" 'BEGIN {
    if (r == "n/a") print "n/a"
    else if (op == "") print "-"
    else if (op == ">=") print (r + 0 >= t + 0 ? "yes" : "no")
    else print (r + 0 <= t + 0 ? "yes" : "no") }'
}

# settled LO HI OP TARGET: whether the interval meets the target (met), misses
# it (missed) or straddles it (open); n/a without an interval, - without a
# target.
settled() {
  awk -v lo="$1" -v hi="$2" -v op="$3" -v t="$4" 'BEGIN {
    if (op == "") print "-"
    else if (lo == "n/a") print "n/a"
    else if (op == ">=") print (lo + 0 >= t + 0 ? "met" : (hi + 0 < t + 0 ? "missed" : "open"))
    else print (hi + 0 <= t + 0 ? "met" : (lo + 0 > t + 0 ? "missed" : "open")) }'
}

# best HIGHER_IS_BETTER VALUES...: the largest (1) or smallest (0) numeric
# argument, or n/a.
best() {
  local higher=$1
  shift
  numbers "$@" |
    awk -v h="$higher" 'NR == 1 {lo = $1} {hi = $1} END {
      if (NR == 0) print "n/a"; else printf "%.6g\n", h ? hi : lo }'
}

# span VALUES...: "min-max" of the numeric arguments, or n/a.
span() {
  numbers "$@" |
    awk 'NR == 1 {lo = $1} {hi = $1} END {
      if (NR == 0) print "n/a"; else printf "%.2f-%.2f\n", lo, hi }'
}

# quotient X Y: X / Y to 3 decimals, or n/a.
quotient() {
  awk -v x="$1" -v y="$2" 'BEGIN {
    if (x == "n/a" || y == "n/a" || y + 0 == 0) print "n/a"; else printf "%.3f", x / y }'
}
