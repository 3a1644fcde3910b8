#!/usr/bin/env bash
# scripts/bench_stats.sh on hand-made inputs whose answers are worked out by
# hand: medians, the order-statistic confidence interval for the median and
# its coverage at the sample sizes bench.sh uses, the median's and the
# interval's verdicts on a target, and the small helpers beside them.
# usage: bench_stats_test.sh [BENCH_STATS_SH]
set -u
# shellcheck source=scripts/bench_stats.sh
source "${1:-$(dirname "$0")/../../scripts/bench_stats.sh}"
failed=0

# expect WHAT WANT GOT
expect() {
  if [[ $3 == "$2" ]]; then
    echo "bench_stats_test: ok: $1"
  else
    echo "bench_stats_test: FAIL: $1: expected '$2', got '$3'"
    failed=1
  fi
}

expect "median of an odd count" 3 "$(median 5 1 3)"
expect "median of an even count" 2.5 "$(median 4 1 3 2)"
expect "median skips NA" 2 "$(median NA 3 1 NA 2)"
expect "median of nothing" n/a "$(median NA)"
expect "numbers sorts numerically" "2 10 100" "$(numbers 100 NA 10 2 | tr '\n' ' ' | sed 's/ $//')"

# Coverage 1 - 2 P(Binomial(n, 1/2) < k): n = 4, k = 1 gives 1 - 2/16 =
# 0.875 < 0.9, so no interval.
expect "interval of 4 values" "n/a n/a n/a" "$(interval 0.4 0.1 0.3 0.2)"
expect "interval of 4 values and NAs" "n/a n/a n/a" \
  "$(interval 0.4 NA 0.1 0.3 NA 0.2)"
# n = 5, k = 1: 1 - 2/32 = 0.9375; k = 2 would give 1 - 12/32 = 0.625.
expect "interval of 5 values" "0.100 0.500 0.938" \
  "$(interval 0.5 0.3 0.1 0.4 0.2)"
# n = 9, k = 2: 1 - 2 (1 + 9) / 512 = 0.9609; k = 3: 1 - 2 * 46/512 = 0.82.
expect "interval of 9 values" "0.200 0.800 0.961" \
  "$(interval 0.9 0.1 0.8 0.2 0.7 0.3 0.6 0.4 0.5)"
# n = 15, k = 4: 1 - 2 (1 + 15 + 105 + 455) / 32768 = 0.9648; k = 5 adds
# 1365 and gives 0.88.
expect "interval of 15 values" "4.000 12.000 0.965" \
  "$(interval 15 14 13 12 11 10 9 8 7 6 5 4 3 2 1)"
expect "interval of 5 values and an NA" "1.000 5.000 0.938" \
  "$(interval 3 NA 5 1 4 2)"

expect "at least, interval above" met "$(settled 1.1 1.3 '>=' 1.0)"
expect "at least, interval from the target" met "$(settled 1.0 1.3 '>=' 1.0)"
expect "at least, interval below" missed "$(settled 0.7 0.9 '>=' 1.0)"
expect "at least, interval across" open "$(settled 0.9 1.1 '>=' 1.0)"
expect "at most, interval below" met "$(settled 0.5 0.7 '<=' 1.3)"
expect "at most, interval above" missed "$(settled 1.4 1.6 '<=' 1.3)"
expect "at most, interval across" open "$(settled 1.2 1.4 '<=' 1.3)"
expect "no interval" n/a "$(settled n/a n/a '>=' 1.0)"
expect "no target" - "$(settled 0.5 0.7 '' '')"

expect "median at least, above" yes "$(meets 1.2 '>=' 1.0)"
expect "median at least, on the target" yes "$(meets 1.0 '>=' 1.0)"
expect "median at least, below" no "$(meets 0.9 '>=' 1.0)"
expect "median at most, below" yes "$(meets 0.5 '<=' 1.3)"
expect "median at most, above" no "$(meets 1.4 '<=' 1.3)"
expect "median without a ratio" n/a "$(meets n/a '>=' 1.0)"
expect "median without a target" - "$(meets 0.5 '' '')"

expect "best, higher is better" 7 "$(best 1 3 NA 7 5)"
expect "best, lower is better" 3 "$(best 0 3 NA 7 5)"
expect "best of nothing" n/a "$(best 1 NA)"
expect "span" 0.10-0.90 "$(span 0.5 NA 0.9 0.1)"
expect "span of nothing" n/a "$(span NA)"
expect "quotient" 0.667 "$(quotient 2 3)"
expect "quotient by zero" n/a "$(quotient 2 0)"
expect "quotient of n/a" n/a "$(quotient n/a 3)"

if ((failed)); then exit 1; fi
echo "bench_stats_test: PASS"
