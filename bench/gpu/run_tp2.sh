#!/bin/bash
# Run-time switching under tensor parallelism (issue 5), on nvidia-h200-x2 with .whl and .jitcache carried:
#   DEADLINE_S=565 bash bench/gpu/run_tp2.sh
# The daemon runs SGLang at TP=2 on the crafted clear-margin model (every greedy output must follow its
# successor table). Pinned never / always, then >= 1,000 threshold changes through the request path
# while 48 clients generate (alternating 8 and 64 around the live batch of ~48); the daemon's token
# count must match what the clients received (one reporting rank); no error in either rank's log;
# then pin latency and the never / always / bandit sweeps.
source bench/gpu/common.sh
make_model $M --crafted
ACC=natural
R=$OUT/results.jsonl
CHAIN=(--input-len 32 --chain $M/target/next.json --out $R)
greedy() { # label args...
  local label=$1; shift
  python3 bench/gpu/greedy.py --port 30000 --label $label "${CHAIN[@]}" "$@" 2>&1 | grep GREEDY | cut -c1-330 | tee -a "$SUM"
}
if start_daemon 2; then
  specctl status 2>&1 | tee -a "$SUM"
  specctl threshold pin 0; greedy never --prompts 200 --concurrency 48 --output-len 64
  specctl threshold pin 128; greedy always --prompts 200 --concurrency 48 --output-len 64
  specctl threshold pin 8          # the daemon holds still; the toggles below go straight to SGLang
  greedy switching --prompts 1200 --concurrency 48 --output-len 96 --toggle 8,64 --toggle-ms 4
  python3 bench/gpu/tokens_check.py $SC/state.db $R switching 2>&1 | tee -a "$SUM"
  say "errors in the engine's log (both ranks): $(grep -cE 'Traceback|Error|NCCL WARN|watchdog' $OUT/daemon.log)"
  grep -E "spec-controller" $OUT/daemon.log | grep -E "TP0|TP1|plugin|fast off" | head -6 | tee -a "$SUM"
  [ "$(left)" -gt 120 ] && python3 bench/gpu/pin_latency.py --db $SC/state.db --socket $SC/ctl.sock --port 30000 \
    --tokenizer $TOK --high 64 2>&1 | grep PINLAT | tee -a "$SUM"
  for mode in never always bandit; do
    [ "$(left)" -lt 60 ] && { say "skip $mode (time)"; continue; }
    case $mode in
      never) specctl threshold pin 0 ;;
      always) specctl threshold pin 128 ;;
      bandit) specctl threshold unpin; specctl policy set bandit
              SWEEP_ARGS=(--prompts-per-client "${BANDIT_PPC:-8}" --output-len "$OUTLEN") ;;
    esac
    sweep 30000 "tp2-$mode" "$OUT/daemon.log"
  done
  specctl status 2>&1 | tee -a "$SUM"
  specctl history --limit 200 --json >"$OUT/history.json" 2>&1
  stop_daemon
  python3 bench/gpu/db_to_profile.py $SC/state.db "$OUT/h200x2-tp2.toml" --name h200-tp2-2b6 \
    --source "2x H200, TP=2, synthetic 2.6B Llama (crafted), EAGLE3 K=3, fast off path" 2>&1 | tee -a "$SUM"
fi
save_caches
say "total $(($(date +%s) - T0)) s"
