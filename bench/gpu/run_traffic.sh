#!/bin/bash
# Issues 12 and 13, one device call (the device budget left one): an engine started without speculation
# vs the daemon's engine (sglang + plugin), same model, same call, 2 repeats everywhere, radix cache flushed
# before each measurement.                         DEADLINE_S=575 bash bench/gpu/run_traffic.sh
#  nospec: steady 128, closed loop 48, open loop (Poisson) at 12 and 24 req/s
#  daemon: off modes at threshold 0 (synced: draft kept in step; lean: no draft work while nothing speculates)
#          on steady 128 and closed 48; then open loop at 12 and 24 req/s for never / always / bandit
#          (the daemon's pins and policy), interleaved per rate. (What fits the device time left.)
# Model: the crafted 7.2B target + EAGLE3 head (accept length ~2 when speculating).
source bench/gpu/common.sh
MAXBS=128 ACC=natural
make_model $M --crafted $MODEL7B
OFF='"speculative_disable_batch_threshold": 0'
SYNCED="synced={$OFF, \"spec_controller_sync_draft\": true, \"spec_controller_lean_prefill\": false}"
LEAN="lean={$OFF, \"spec_controller_sync_draft\": false, \"spec_controller_lean_prefill\": true}"
ST=(--shape steady --levels 128 --steady-len 192 --repeats 2 --flush --out "$R")
CL=(--shape closed --levels 48 --seconds 6 --warmup 2 --repeats 2 --flush --out "$R")
OP=(--shape open --rates 12,24 --seconds 6 --repeats 2 --flush --tokenizer $TOK --out "$R")
load() { python3 bench/gpu/loads.py "$@" 2>&1 | grep -E "LOAD|Error|refused|Traceback" | cut -c1-220 >>"$OUT/loads.log"; }

if start_server nospec 30001 X=1 --; then
  load --port 30001 --label nospec "${ST[@]}"
  load --port 30001 --label nospec "${CL[@]}"
  load --port 30001 --label nospec "${OP[@]}"; say "nospec done"
  stop_server
fi
if start_daemon; then
  specctl status 2>&1 | grep -E "off path|engine" | tee -a "$SUM"
  specctl threshold pin 0 >/dev/null
  load --port 30000 --configs "$SYNCED;$LEAN" "${ST[@]}"
  load --port 30000 --configs "$SYNCED;$LEAN" "${CL[@]}"; say "off modes done"
  [ "$(left)" -lt 150 ] && OP=(--shape open --rates 12 --seconds 6 --repeats 2 --flush --tokenizer $TOK --out "$R")
  internal_state 30000 "{\"spec_controller_sync_draft\": true, \"spec_controller_lean_prefill\": false}" >/dev/null
  specctl policy set bandit >/dev/null
  load --port 30000 --socket $SC/ctl.sock --configs "never=@threshold pin 0;always=@threshold pin $MAXBS;bandit=@threshold unpin" "${OP[@]}"
  say "modes done"
  specctl status 2>&1 | grep -E "off path|plugin cost|samples|threshold" | tee -a "$SUM"
  specctl history --limit 400 --json >"$OUT/history.json" 2>/dev/null
  stop_daemon
fi
save_caches
show_and_total
