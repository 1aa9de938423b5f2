#!/bin/bash
# Run-time switching under tensor parallelism (device tool, .whl and .jitcache carried):
#   TP=2 DEADLINE_S=565 bash bench/gpu/run_tp.sh                        (nvidia-h200-x2, issue 5)
#   TP=8 DUMMY=1 MAXBS=256 ACC_LEN=2.5 LEVELS=1,2,4,8,16,32,64,128,256 DEADLINE_S=565 bash bench/gpu/run_tp.sh [ema]
#                                                                       (nvidia-h200-x8, issue 6: ~34 B target)
# Phases after the TP run: ema (SGLang's EMA sweep), pin1 (a TP=1 daemon: pin latency and plugin costs).
# MODES: the interleaved sweep's modes (default never,always,static5,bandit), REPEATS (default 1).
# The daemon runs SGLang at TP ranks. Without DUMMY: the crafted clear-margin model, every greedy output
# checked against its successor table (never, always, and while the threshold switches). With DUMMY:
# SGLang makes random weights in place (no checkpoint to write), acceptance set by SGLANG_SIMULATE_ACC_LEN.
# Then >= 1,000 threshold changes through the request path while 48 clients generate (alternating 8 and
# 64 around the live batch of ~48); the daemon's token count must match what the clients received (one
# reporting rank); no error in any rank's log; pin latency; the modes interleaved inside each level.
source bench/gpu/common.sh
if [ -n "$DUMMY" ]; then make_model $M --config-only $BIGMODEL; CHECK=(); DESC="~34B, dummy weights"
else make_model $M --crafted; ACC=natural; CHECK=(--chain $M/target/next.json); DESC="2.6B, crafted"; fi
if start_daemon; then
  specctl status 2>&1 | tee -a "$SUM"
  specctl threshold pin 0; greedy 30000 never --input-len 32 "${CHECK[@]}" --prompts 200 --concurrency 48 --output-len 64
  specctl threshold pin $MAXBS; greedy 30000 always --input-len 32 "${CHECK[@]}" --prompts 200 --concurrency 48 --output-len 64
  specctl threshold pin 8          # the daemon holds still; the toggles below go straight to SGLang
  greedy 30000 switching --input-len 32 "${CHECK[@]}" --prompts 1600 --concurrency 48 --output-len 96 --toggle 8,64 --toggle-ms 4
  python3 bench/gpu/tokens_check.py $SC/state.db "$R" switching 2>&1 | tee -a "$SUM"
  # (the server_args line names watchdog_timeout: not an error)
  say "error lines in the engine's log (all ranks): $(grep -E 'Traceback|Error|NCCL WARN|watchdog' $OUT/daemon.log | grep -vc 'server_args=')"
  [ "$(left)" -gt 150 ] && pin_latency 64
  [ "$(left)" -gt 90 ] && ranked_sweep "${REPEATS:-1}" "${MODES:-never,always,static5,bandit}"
  specctl status 2>&1 | tee -a "$SUM"
  specctl history --limit 200 --json >"$OUT/history.json" 2>&1
  stop_daemon
  python3 bench/gpu/db_to_profile.py $SC/state.db "$OUT/h200-tp$TP.toml" --name h200-tp$TP \
    --source "${TP}x H200, TP=$TP, synthetic Llama $DESC, EAGLE3 K=3, fast off" \
    2>&1 | tee -a "$SUM"
fi
for phase in "$@"; do
  [ "$phase" = ema ] && [ "$(left)" -gt 150 ] && ema_phase
  if [ "$phase" = pin1 ] && [ "$(left)" -gt 170 ]; then   # the same model at TP=1 (one of the GPUs): pin latency
    TP=1 SC=/tmp/sc1 DAEMON_LOG=$OUT/daemon-tp1.log; mkdir -p $SC
    if start_daemon; then pin_latency $MAXBS; specctl status 2>&1 | tail -3 | tee -a "$SUM"; stop_daemon; fi
  fi
done
save_caches
say "total $(($(date +%s) - T0)) s"
