# shellcheck shell=bash
# Engines kept up between device calls, sourced by common.sh before it stops anything: sets KEEP (1: this call keeps
# its engines), REUSE (1: it measures the ones the last call left), KEEP_SIG (their signature) and KEEP_DIR.
# KEEP_ENGINES=1 (run_pair.sh, which sets KEEPS_ENGINES=1 before sourcing this; any other script stops kept engines
# as before): the engines stay up when the call ends, and the next call on the same warm machine measures them as they
# are (REUSE=1) instead of spending the ~210-310 s of a start again, where they were started the same way
# (keep_signature), are alive and answer, and the call that left them ended normally ($KEEP_DIR/clean: every phase
# had put back what it switched, loads.py its pins). Their logs live in $KEEP_DIR/logs (each call brings back its own
# part); the daemon's database is the one it started with (each call pins the threshold again).
KEEP_DIR=${KEEP_DIR:-/tmp/keep}
keep_signature() { # how the engines start: the settings read at their start, the scripts that start them, the wheels,
  # the code they import
  { for v in B_FIRST PLAIN TWIN POOL_TOKENS PREFILL_GRAPH OFF_PATH KV_GRAPH SIDE COALESCE GRAMMAR_BACKEND MEMCHECK \
      SLEEP_ON_IDLE TP MAXBS DUMMY ACC_LEN ACC_LEVELS EXPERIMENTS API_KEY PROBE_S HANG_AFTER_S PIN_CPUS TARGET_LAYERS; do
      echo "$v=${!v:-}"; done
    case "${ROTATION:-}" in resolve|leanall) echo "lean resolve hook" ;; esac
    env | grep -E '^(SPEC_|SGLANG_)' | sort
    stat -c '%n %s' .whl/*.whl 2>/dev/null
    find controller policies state -name '*.py' | sort | xargs cat
    cat bench/gpu/common.sh bench/gpu/run_pair.sh bench/gpu/timeline.py bench/gpu/procspeed.py bench/gpu/proccpu.py \
      bench/gpu/mkmodel.py
  } 2>/dev/null | md5sum | cut -d' ' -f1
}
leader_up() { # pid: that process group's leader runs (not gone, not a zombie no one has reaped yet)
  kill -0 -- "-$1" 2>/dev/null && [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" != Z ]
}
kept_alive() { # the kept engines' process groups are there and both answer
  local a b; read -r a b <$KEEP_DIR/pids 2>/dev/null || return 1
  leader_up "$a" && leader_up "$b" \
    && curl -sf -m 5 http://127.0.0.1:30001/health >/dev/null && curl -sf -m 5 http://127.0.0.1:30000/health >/dev/null
}
# run_pair.sh's side (called once its engines' labels are known):
reuse_engines() { # REUSE=1: the engines the last KEEP_ENGINES=1 call left up (common.sh checked them), where the
  # daemon still runs its engine; else they are stopped and this call starts its own
  read -r NOSPEC_PID DAEMON_PID <$KEEP_DIR/pids
  if [ "$B" != off ] || specctl status --json 2>/dev/null | grep -q '"running": true'; then
    [ "${B_FIRST:-0}" = 1 ] && export LOAD_B_FIRST=1
    say "engines reused (KEEP_ENGINES=1): nospec group $NOSPEC_PID, $GROUP_B group $DAEMON_PID"; return 0
  fi
  say "the kept daemon does not run its engine: stopping both, starting afresh"
  start_afresh $KEEP_DIR/pids; REUSE=0; return 1
}
follow_logs() { # KEEP_ENGINES=1: each engine's log from its length now into $OUT as it grows (by this call's own
  # processes: a call cut at its limit still brings back its part); FOLLOWERS: their PIDs
  FOLLOWERS=()
  [ "$LOGS" = "$OUT" ] && return
  for f in nospec $GROUP_B; do
    tail -c +$(($(log_offset "$LOGS/$f.log") + 1)) -F "$LOGS/$f.log" >"$OUT/$f.log" 2>/dev/null &
    FOLLOWERS+=($!)
  done
}
call_log() { # NAME: this call's part of that engine's log (a kept engine's log holds earlier calls' lines too)
  tail -c +$((LOG_FROM[$1] + 1)) "$LOGS/$1.log"
}
# The decision, at common.sh's start (before it stops anything a call left running):
REUSE=0; KEEP_SIG=""; KEEP=0
[ "${KEEP_ENGINES:-0}" = 1 ] && [ "${KEEPS_ENGINES:-0}" = 1 ] && KEEP=1
if [ "$KEEP" = 1 ]; then
  KEEP_SIG=$(keep_signature)      # now: the scripts export more SPEC_ variables once sourced
  [ -f $KEEP_DIR/clean ] && [ "$(cat $KEEP_DIR/signature 2>/dev/null)" = "$KEEP_SIG" ] && kept_alive && REUSE=1
  rm -f $KEEP_DIR/clean           # until this call ends normally
fi
