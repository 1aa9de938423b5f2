#!/bin/bash
# One GPU experiment per call (device tool), from the repo root, with .whl (and .jitcache) carried:
#   bash bench/gpu/run_h200.sh PHASE...      PHASE: daemon | nospec | ema | pin | hang
#   daemon: spec-controller with the sglang engine + plugin; sweeps bandit, never, always, static 5; pin latency
#   nospec: SGLang started without speculation (the baseline an "off" batch must match)
#   ema:    SGLang's own adaptive EMA ({0,K} at slots 1/8/32/64), plugin disabled
#   pin:    spec-controller only for the pin latency and the plugin's cost counters
#   hang:   pins under load (SGLang's per-switch override log trimmed, its INFO line dropped), then
#           rank 0's scheduler stopped with SIGSTOP: the daemon must exit 1 after hang_after_s (20 s here)
# Env: CRAFTED=1 (the clear-margin model, natural accept length ~2), ACC_LEN (SGLANG_SIMULATE_ACC_LEN,
#      default 2.5; "natural": not set), LEVELS (default 1,4,16,64,128), DEADLINE_S (default 560),
#      PPC prompts per client per level (default 3: 1-3 s of decoding, too short for the bandit to learn;
#      use >= 20 for a bandit comparison; BANDIT_PPC sets it for the bandit alone), INTERLEAVE=1 (modes
#      interleaved inside each level, REPEATS times, order rotated: the fair ranking), ACC_LEVELS=1.5,3.0
#      (after the sweeps: steady always-on throughput at these simulated accept lengths, same engine), OUTLEN output tokens per request (default 128).
source bench/gpu/common.sh
make_model $M ${CRAFTED:+--crafted} ${DUMMY:+--config-only $BIGMODEL}

daemon_phase() {
  start_daemon || return
  specctl status 2>&1 | tee -a "$SUM"
  if [ "${INTERLEAVE:-0}" = 1 ]; then   # modes interleaved inside each level, order rotated per repeat
    ranked_sweep "${REPEATS:-2}"
  else
    for mode in bandit never always static5; do
      [ "$(left)" -lt 60 ] && { say "skip $mode (time)"; continue; }
      case $mode in
        bandit) specctl threshold unpin; specctl policy set bandit ;;
        never) specctl threshold pin 0 ;;
        always) specctl threshold pin $MAXBS ;;
        static5) specctl threshold pin 5 ;;
      esac
      if [ $mode = bandit ]; then   # the bandit learns online: its levels must last long enough
        SWEEP_ARGS=(--prompts-per-client "${BANDIT_PPC:-$PPC}" --output-len "$OUTLEN"); fi
      sweep 30000 "$mode" "$OUT/daemon.log"
      SWEEP_ARGS=(--prompts-per-client "$PPC" --output-len "$OUTLEN")
      specctl status --json >>"$OUT/status.jsonl" 2>&1
    done
  fi
  if [ "$(left)" -gt 70 ]; then
    pin_latency $MAXBS
  fi
  if [ -n "${ACC_LEVELS:-}" ] && [ "$(left)" -gt 60 ]; then
    specctl threshold pin 0
    steady 30000 never-steady "$OUT/daemon.log" --output-len 256 --repeats 1
  fi
  for acc in ${ACC_LEVELS//,/ }; do   # more acceptance levels in the same engine (the plugin's experiment knob)
    [ "$(left)" -lt 60 ] && { say "skip accept length $acc (time)"; continue; }
    say "accept length $acc: $(internal_state 30000 "{\"spec_controller_simulate_acc_len\": $acc}")"
    specctl threshold pin $MAXBS
    steady 30000 "always-acc$acc" "$OUT/daemon.log" --output-len 256 --repeats 1
  done
  [ -n "${ACC_LEVELS:-}" ] && internal_state 30000 '{"spec_controller_simulate_acc_len": -1}' >/dev/null
  specctl threshold unpin; specctl status 2>&1 | tee -a "$SUM"
  specctl history --limit 300 --json >"$OUT/history.json" 2>&1
  stop_daemon
  python3 bench/gpu/db_to_profile.py $SC/state.db "$OUT/h200-measured.toml" --name h200-2b6-acc$ACC \
    --source "H200, synthetic 2.6B Llama, EAGLE3 K=3, accept length $ACC, off = the plugin's fast off path (plain decode)" 2>&1 | tee -a "$SUM"
  python3 - <<PY | tee -a "$SUM"
import sqlite3; db = sqlite3.connect("$SC/state.db")
print("db integrity:", db.execute("PRAGMA integrity_check").fetchone()[0])
print("samples:", db.execute("SELECT count(*), sum(steps>0), avg(CASE WHEN steps>0 THEN 1.0*tokens/batch_size END), max(batch_size) FROM samples").fetchone())
print("events:", db.execute("SELECT group_concat(kind) FROM events").fetchone()[0])
PY
}

pin_phase() {
  start_daemon || return
  pin_latency $MAXBS
  specctl status 2>&1 | tee -a "$SUM"
  stop_daemon
}

hang_phase() {
  PROBE_S=2 HANG_AFTER_S=20 start_daemon || return
  pin_latency $MAXBS            # toggles the threshold under load: the state switches each time
  specctl status 2>&1 | tee -a "$SUM"
  say "switch INFO lines in the engine log: $(grep -c 'Switch adaptive runtime state' "$OUT/daemon.log")"
  say "trim notice: $(grep -c "trimming SGLang's override log" "$OUT/daemon.log")"
  local sched; sched=$(pgrep -g "$DAEMON_PID" -f 'sglang::scheduler' | head -1)   # in this daemon's group only
  [ -z "$sched" ] && { say "no sglang::scheduler process"; stop_daemon; return; }
  kill -STOP "$sched"; local t0; t0=$(date +%s.%N)
  say "SIGSTOP scheduler pid $sched"
  local rc=none
  for _ in $(seq 1 120); do kill -0 $DAEMON_PID 2>/dev/null || { wait $DAEMON_PID; rc=$?; break; }; sleep 1; done
  say "daemon exit code $rc, $(python3 -c "import time; print(round(time.time() - $t0, 1))") s after the SIGSTOP"
  grep -E "engine is gone|hung" "$OUT/daemon.log" | tail -2 | tee -a "$SUM"
  kill -CONT "$sched" 2>/dev/null; kill_group $DAEMON_PID
}

for phase in "$@"; do
  [ "$(left)" -lt 90 ] && { say "skip phase $phase (time)"; continue; }
  case $phase in
    daemon) daemon_phase ;;
    nospec) server_phase nospec 30001 X=1 -- ;;
    ema) ema_phase ;;
    pin) pin_phase ;;
    hang) hang_phase ;;
  esac
done
save_caches
say "caches $(du -h "$OUT"/caches.tar.* | cut -f1); total $(($(date +%s) - T0)) s"
