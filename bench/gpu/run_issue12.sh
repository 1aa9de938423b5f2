#!/bin/bash
# Issue 12's table (bench/results/offpath-traffic.json): every level of the three load shapes, the daemon's engine
# pinned at threshold 0 against an engine started without speculation, both resident, runs alternating per repeat
# (order rotated, core sets swapped, the idle engine asleep: run_pair.sh's defaults and PIN_CPUS=1).
#   PART=all (default): one invocation, ~15 min (a GPU host of your own:   DEADLINE_S=1000 bash bench/gpu/run_issue12.sh)
#   PART=a: steady 1 / 16 / 48 / 128 and Poisson 2 / 12 / 24 req/s; PART=b: the closed loop at 1 / 16 / 48 / 128
#   clients: each fits one 600 s device call (carry .whl and .jitcache; DEADLINE_S=590).
# Then: python3 bench/gpu/loads.py --show $OUT/results.jsonl (ratios of medians and each repeat's pair) and
# traffic_table.offpath_rows for the rows (bench/gpu/README "Recording").
case "${PART:-all}" in
  all) shapes=steadyab,openab,closedab ;;
  a) shapes=steadyab,openab ;;
  b) shapes=closedab ;;
  *) echo "run_issue12.sh: PART must be all, a or b, got '${PART}'" >&2; exit 2 ;;
esac
# WARM=1: run_pair's `warm` phase first (both engines WARM_S s at closed 128, unrecorded): a start-up cost of the
# engine measured first (12-07d call 2) told from the host's draw; WARM_S=60 lets a cold PART=b keep one repeat
case "${WARM:-0}" in 1) shapes=warm,$shapes ;; 0) ;; *) echo "run_issue12.sh: WARM must be 0 or 1, got '${WARM}'" >&2; exit 2 ;; esac
# ROTATION=product: the same loads with always-on and the bandit beside no-spec (run_pair.sh), not the record's rows
case "${ROTATION:=pair}" in pair|product) ;; *) echo "run_issue12.sh: ROTATION must be pair or product, got '${ROTATION}'" >&2; exit 2 ;; esac
export SHAPES=$shapes ROTATION PIN_CPUS=1 PREFILL_GRAPH=default OFF_PATH=kv
# (PART=b: 10 s windows, so that even a cold machine's start, ~250 s, leaves the phase its 334 s)
export CLOSED_LEVELS=1,16,48,128 OPEN_RATES=2,12,24 CLOSED_WARMUP=5 OPEN_S=10 REPEATS=${REPEATS:-2}
export CLOSED_S=${CLOSED_S:-$([ "${PART:-all}" = b ] && echo 10 || echo 12)}
export DEADLINE_S=${DEADLINE_S:-$([ "${PART:-all}" = all ] && echo 1000 || echo 590)}
export FIT_REPEATS=${FIT_REPEATS:-1}   # a cold start longer than planned (12-05d: 295 s) runs fewer repeats, not none
exec bash bench/gpu/run_pair.sh
