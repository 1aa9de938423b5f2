#!/bin/bash
# Issue 13's three-shape proof for the bandit itself, one device call (the open-loop shape is run_modes.sh /
# run_converged.sh, with the no-spec engine in h200-2026-12-03 call 2):
#   PREFILL_GRAPH=default DEADLINE_S=570 bash bench/gpu/run_bandit_shapes.sh        (carry .whl, .jitcache)
#  1. an engine started without speculation: steady decode at batch 1/16/48/128 and a closed loop with continuous
#     arrivals at C = 1/16/48/128 (prompt 32-256, output 64-512), 2 repeats, radix cache flushed each run;
#  2. the daemon from a fresh database, the bandit unpinned: WARM_S seconds per closed level unmeasured (what a
#     fresh server sees first), then the same loads with always (pin MAXBS) and the bandit (unpinned) interleaved
#     inside each level, order rotated per repeat (the bandit stays the policy: the pinned runs feed it too);
#  3. with the time left (at most CONST_S s): the bandit under a constant closed loop of CONST_C clients,
#     threshold changes per minute and in the second half (converged).
# The daemon's database comes back as state.db.xz.
source bench/gpu/common.sh
MAXBS=128 ACC=natural
CONST_C=${CONST_C:-24}; STEADY_LEVELS=${STEADY_LEVELS:-1,16,48,128}; CLOSED_LEVELS=${CLOSED_LEVELS:-1,16,48,128}
EXTRA_MODES=${EXTRA_MODES:-}   # e.g. "never=@threshold pin 0;" before always and bandit
 CONST_S=${CONST_S:-180}; WARM_S=${WARM_S:-4}; REPEATS=${REPEATS:-2}
make_model $M --crafted $MODEL7B
ST=(--shape steady --levels "$STEADY_LEVELS" --steady-len 192 --repeats "$REPEATS" --flush --out "$R")
CL=(--shape closed --levels "$CLOSED_LEVELS" --seconds 5 --warmup 2 --repeats "$REPEATS" --flush --out "$R")
MODES=(--socket $SC/ctl.sock --configs "${EXTRA_MODES}always=@threshold pin $MAXBS;bandit=@threshold unpin")

nospec_loads ST CL
if start_daemon; then
  specctl status 2>&1 | grep -E "off path|engine|sglang" | tee -a "$SUM"
  specctl policy set bandit >/dev/null; specctl threshold unpin >/dev/null
  python3 bench/gpu/loads.py --port 30000 --label bandit-warmup --shape closed --levels 1,16,48,128 \
    --seconds "$WARM_S" --warmup 1 --repeats 1 --out /tmp/warmup.jsonl 2>&1 | grep LOAD | cut -c1-200 >>"$SUM"
  specctl status 2>&1 | grep -E "threshold" | tee -a "$SUM"; say "warm-up done"
  load_sum --port 30000 "${MODES[@]}" "${ST[@]}"
  load_sum --port 30000 "${MODES[@]}" "${CL[@]}"; say "modes done"
  specctl threshold unpin >/dev/null
  specctl status 2>&1 | grep -E "threshold|off path|plugin cost|samples" | tee -a "$SUM"
  CS=$(( $(left) - 45 )); [ "$CS" -gt "$CONST_S" ] && CS=$CONST_S
  if [ "$CS" -ge 40 ] && [ "$CONST_S" -gt 0 ]; then const_decisions "$CONST_C" "$CS" "$OUT/history-const.json"
  else say "skip constant load (time: $(left) s left)"; fi
  stop_daemon
  save_db
fi
save_caches
show_and_total
