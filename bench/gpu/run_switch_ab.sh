#!/bin/bash
# The learner's switch-step rule on the GPU, one device call, the daemon alone (12-06g: at a constant closed loop of
# 24 clients the threshold flapped 20 <-> 23 at 8 a minute: switch steps, accepting 1.00 against 2.00, had halved the
# shared accept length). One daemon from an empty database, the bandit unpinned; blocks in ORDER, each with the
# bandit's `switch_stub` parameter set (1: the rule, the default; 0: switch steps folded in, as before) and learned
# state kept across blocks (`policy set` of the running policy keeps it): a closed loop of CONST_C clients for
# PHASE_S seconds (threshold changes, tok/s), then QUIET_C clients for QUIET_S seconds (does the quiet load
# speculate at once after the boundary?).
#   DEADLINE_S=585 bash bench/gpu/run_switch_ab.sh          (carry .whl, .jitcache)
# Then: python3 bench/gpu/loads.py --show $OUT/results.jsonl; the CONST lines in summary.txt;
# python3 bench/gpu/spec_share.py --warmup 2 $OUT/results.jsonl state.db (speculated share per block).
source bench/gpu/common.sh
MAXBS=128 ACC=natural
CONST_C=${CONST_C:-24}; PHASE_S=${PHASE_S:-50}; QUIET_C=${QUIET_C:-4}; QUIET_S=${QUIET_S:-12}; ORDER=${ORDER:-1,0,1,0}
make_model $M --crafted $MODEL7B
if start_daemon; then
  specctl threshold unpin >/dev/null
  k=0
  for sw in ${ORDER//,/ }; do
    [ "$(left)" -lt $((PHASE_S + QUIET_S + 40)) ] && { say "block $k (switch_stub=$sw) left out: $(left) s left"; break; }
    specctl policy set bandit --param "switch_stub=$sw" | tee -a "$SUM"
    t1=$(date +%s.%N)
    load_sum --port 30000 --label "switch$sw-const-$CONST_C" --shape closed --levels "$CONST_C" --seconds "$PHASE_S" \
      --warmup 2 --repeats 1 --out "$R"
    specctl history --limit 2000 --json >"$OUT/history-$k.json" 2>/dev/null
    python3 bench/gpu/changes_count.py "$OUT/history-$k.json" "$t1" "$PHASE_S" | sed "s/^/block $k switch_stub=$sw: /" \
      | tee -a "$SUM"
    load_sum --port 30000 --label "switch$sw-quiet-$QUIET_C" --shape closed --levels "$QUIET_C" --seconds "$QUIET_S" \
      --warmup 0 --repeats 1 --out "$R"
    specctl status 2>&1 | grep -E "threshold|acceptance" | tee -a "$SUM"
    k=$((k + 1))
  done
  specctl history --limit 5000 --json >"$OUT/history.json" 2>/dev/null
  stop_daemon
  save_db
fi
python3 bench/gpu/loads.py --show "$R" | tee -a "$SUM"
say "total $(($(date +%s) - T0)) s"
