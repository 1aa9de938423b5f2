#!/bin/bash
# Issues 13 (item 5, and the data for item 2) and 12 (open-loop shape), one device call:
#   DEADLINE_S=570 bash bench/gpu/run_modes.sh                 (carry .whl, .jitcache)
# Open-loop Poisson arrivals (sglang.bench_serving --request-rate) at a light, a middle and a near-saturation
# rate (RATES, default 2,12,24 req/s), 2 repeats, the radix cache flushed before each run:
#  1. an engine started without speculation;
#  2. the daemon (sglang engine + plugin, the default off path) with its modes interleaved per rate (order
#     rotated per repeat): never (pin 0), always (pin MAXBS), static 5 (pin 5), SGLang's EMA (the daemon's
#     sglang-ema policy, a port of SGLang's AdaptiveController) and bandit. The two learners learn only from
#     their own runs (the pinned runs are made under the inert `fixed` policy) and carry what they learned
#     from one run to the next, as they would on a server whose load moves.
#  PINS_UNDER=bandit (the warm variant, issue 13 item 5 as a server sees it): the bandit is the active policy
#  throughout but for the EMA's runs (the pinned runs are pins over it, so it sees their batches as a server's
#  daemon sees every batch; a switch back to it resumes what it learned); WARM_S=N: each rate starts with N s of
#  its arrivals under the unpinned bandit, not measured (needs ~15 s a rate more than the call has at 3 rates).
# Then the daemon's samples as a simulator profile (calibration, issue 13 item 2) and its history.
# Model: the crafted 7.2B target + EAGLE3 head (accept length ~2 when speculating).
source bench/gpu/common.sh
MAXBS=128 ACC=natural
RATES=${RATES:-2,12,24}; SECONDS_PER_RUN=${SECONDS_PER_RUN:-6}; WARM_S=${WARM_S:-0}; PINS_UNDER=${PINS_UNDER:-fixed}
make_model $M --crafted $MODEL7B
OPEN=(--shape open --seconds "$SECONDS_PER_RUN" --repeats 2 --flush --tokenizer $TOK --out "$R")
OP=(--rates "$RATES" "${OPEN[@]}")

if start_server nospec 30001 X=1 --; then
  load_sum --port 30001 --label nospec "${OP[@]}"; say "nospec done"
  stop_server
fi
tail -c 200000 "$OUT/nospec.log" >/tmp/nospec.log; rm -f "$OUT/nospec.log"     # 8 files come back at most
if start_daemon; then
  specctl status 2>&1 | grep -E "off path|engine|sglang" | tee -a "$SUM"
  PIN="@policy set $PINS_UNDER && threshold pin"
  say "pinned runs under policy $PINS_UNDER, warm-up ${WARM_S} s a rate"
  MODES="never=$PIN 0;always=$PIN $MAXBS;static5=$PIN 5"
  MODES="$MODES;ema=@policy set sglang-ema && threshold unpin;bandit=@policy set bandit && threshold unpin"
  if [ "$WARM_S" = 0 ]; then
    load_sum --port 30000 --socket $SC/ctl.sock --configs "$MODES" "${OP[@]}"
  else
    for rate in ${RATES//,/ }; do   # each rate: the bandit learns it for WARM_S s, then the modes interleaved
      specctl policy set bandit >/dev/null; specctl threshold unpin >/dev/null
      python3 bench/gpu/loads.py --port 30000 --label bandit-warmup --shape open --rates "$rate" --seconds "$WARM_S" \
        --repeats 1 --tokenizer $TOK --out /tmp/warmup.jsonl 2>&1 | grep LOAD | cut -c1-220 >>"$SUM"
      say "rate $rate: warm-up done, threshold $(specctl status --json | python3 -c 'import sys, json; print(json.load(sys.stdin)["threshold"])' 2>&1 | tail -1)"
      load_sum --port 30000 --socket $SC/ctl.sock --configs "$MODES" --rates "$rate" "${OPEN[@]}"
    done
  fi
  say "modes done"
  specctl status 2>&1 | grep -E "off path|plugin cost|samples|threshold" | tee -a "$SUM"
  specctl history --limit 1000 --json >"$OUT/history.json" 2>/dev/null
  stop_daemon
  python3 bench/gpu/db_to_profile.py $SC/state.db "$OUT/h200-7b-open.toml" --name h200-7b-open \
    --source "H200, SGLang 0.5.17, crafted 7.2B + EAGLE3 K=3, bench/gpu/run_modes.sh" \
    --prompt-len-range 102,512 --output-len-range 76,384 --arrival-rate "$RATES" --max-batch-size $MAXBS 2>&1 | tail -2 | tee -a "$SUM"
  save_db
fi
save_caches
show_and_total
