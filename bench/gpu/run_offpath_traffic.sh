#!/bin/bash
# Issue 12, one device call: an engine started without speculation vs the speculative engine's off modes
# (threshold 0) on steady decode and a closed loop with continuous arrivals, 2 repeats, plus greedy
# equality of the new off modes with arrivals.   DEADLINE_S=550 bash bench/gpu/run_offpath_traffic.sh
# Off modes, interleaved per level in one engine start (set_internal_state):
#   synced: fast target decode + the draft's 1-token extend (draft KV ready when speculation resumes)
#   lean:   fast target decode, no draft; prefills skip the draft while nothing speculates
#   fast:   fast target decode, no draft; prefills run the draft (the previous default)
# Model: the crafted clear-margin 7.2B target + EAGLE3 head (same compute as random weights).
source bench/gpu/common.sh
MAXBS=128
make_model $M --crafted $MODEL7B
CHECK=(--chain $M/target/next.json)
EQ=(--prompts 200 --concurrency 32 --input-len 32 --output-len 96 --output-len-min 16)
echo '{"1": {"candidate_steps": [0, 3]}}' >$SC/adaptive.json
ST=(--shape steady --levels 1,16,48,128 --steady-len 192 --repeats 2 --flush --out "$R")
CL=(--shape closed --levels 1,16,48,128 --seconds 5 --warmup 2 --repeats 2 --flush --out "$R")
OFF='"speculative_disable_batch_threshold": 0'
SYNCED="synced={$OFF, \"spec_controller_sync_draft\": true, \"spec_controller_lean_prefill\": false}"
LEAN="lean={$OFF, \"spec_controller_sync_draft\": false, \"spec_controller_lean_prefill\": true}"
FAST="fast={$OFF, \"spec_controller_sync_draft\": false, \"spec_controller_lean_prefill\": false}"
load() { python3 bench/gpu/loads.py "$@" 2>&1 | grep -E "LOAD|Error|refused" | cut -c1-200 >>"$OUT/loads.log"; }

if start_server nospec 30001 X=1 --; then
  load --port 30001 --label nospec "${ST[@]}"; say "nospec steady done"
  load --port 30001 --label nospec "${CL[@]}"; say "nospec closed done"
  stop_server
fi
if start_server spec 30000 SPEC_CONTROLLER_INITIAL_THRESHOLD=0 SPEC_CONTROLLER_SYNC_DRAFT=1 -- "${SPEC[@]}" \
    --speculative-adaptive --speculative-adaptive-config $SC/adaptive.json; then
  grep -E "spec-controller|Traceback" $OUT/spec.log | head -5 | tee -a "$SUM"
  say "synced: $(internal_state 30000 "{$OFF, \"spec_controller_sync_draft\": true}")"
  greedy 30000 never-synced "${EQ[@]}" "${CHECK[@]}"
  greedy 30000 switching-synced "${EQ[@]}" "${CHECK[@]}" --toggle 0,$MAXBS --toggle-ms 5
  load --port 30000 --configs "$SYNCED;$LEAN" "${ST[@]}"; say "spec steady done"
  [ "$(left)" -gt 200 ] && { load --port 30000 --configs "$SYNCED;$LEAN;$FAST" "${CL[@]}"; say "spec closed done"; }
  [ "$(left)" -gt 40 ] && { internal_state 30000 "{$OFF, \"spec_controller_sync_draft\": false, \"spec_controller_lean_prefill\": true}" >/dev/null
    greedy 30000 switching-lean "${EQ[@]}" "${CHECK[@]}" --toggle 0,$MAXBS --toggle-ms 5; }
  grep -E "spec-controller|Traceback|Error" $OUT/spec.log | grep -v "^benchmark_args" | tail -6 | tee -a "$SUM"
  stop_server
fi
save_caches
show_and_total
