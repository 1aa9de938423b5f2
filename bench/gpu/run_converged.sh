#!/bin/bash
# Issue 13 (items 3 and 4 on the GPU), one device call, the daemon only (modes compared with each other):
#   DEADLINE_S=450 bash bench/gpu/run_converged.sh              (carry .whl, .jitcache)
#  1. decisions at constant load: the bandit unpinned, a closed loop of CONST_C clients for CONST_S seconds
#     (prompt 32-256, output 64-512): threshold changes per minute, and in the second half (converged);
#  2. the bandit at the middle rate once it has learned it: WARM_S seconds of Poisson arrivals at RATE
#     unmeasured, then never (pin 0) / always (pin MAXBS) / bandit (unpinned) interleaved, REPEATS runs each.
#     The bandit stays the active policy throughout (a server's daemon sees every batch), so the pinned
#     runs feed it too: what is measured is its converged choice, not its first minute.
# MIDDLE=0 leaves part 2 out (the constant load alone, e.g. CONST_S=180 for a converged second half). The daemon's
# database comes back as state.db.xz (its samples replay offline through the learner and guard).
# run_modes.sh is the cold counterpart (each learner only learns in its own 6 s runs) with the no-spec engine.
source bench/gpu/common.sh
MAXBS=128 ACC=natural
CONST_C=${CONST_C:-24}; CONST_S=${CONST_S:-60}; RATE=${RATE:-12}; WARM_S=${WARM_S:-45}; REPEATS=${REPEATS:-3}
MIDDLE=${MIDDLE:-1}
make_model $M --crafted $MODEL7B
if start_daemon; then
  specctl status 2>&1 | grep -E "off path|engine|sglang" | tee -a "$SUM"
  const_decisions "$CONST_C" "$CONST_S" "$OUT/history-const.json"
fi
if [ "$MIDDLE" = 1 ] && specctl status >/dev/null 2>&1; then
  python3 bench/gpu/loads.py --port 30000 --label "bandit-warmup" --shape open --rates "$RATE" --seconds "$WARM_S" \
    --repeats 1 --tokenizer $TOK --out /tmp/warmup.jsonl 2>&1 | grep LOAD | cut -c1-220 >>"$SUM"
  say "warm-up done"
  T2=$(date +%s)
  python3 bench/gpu/loads.py --port 30000 --socket $SC/ctl.sock \
    --configs "never=@threshold pin 0;always=@threshold pin $MAXBS;bandit=@threshold unpin" \
    --shape open --rates "$RATE" --seconds 6 --repeats "$REPEATS" --flush --tokenizer $TOK --out "$R" 2>&1 \
    | grep -E "LOAD|Error|Traceback" | cut -c1-220 >>"$SUM"
  specctl status 2>&1 | grep -E "threshold|off path|plugin cost|samples" | tee -a "$SUM"
  specctl history --limit 2000 --json >"$OUT/history.json" 2>/dev/null
  python3 bench/gpu/changes_count.py "$OUT/history.json" "$T2" "$(($(date +%s) - T2))" --skip 0 | tee -a "$SUM"
fi
if specctl status >/dev/null 2>&1; then
  stop_daemon
  save_db
fi
show_and_total
