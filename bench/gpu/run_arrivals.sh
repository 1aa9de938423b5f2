#!/bin/bash
# One device call: the layout smoke test (issue 11) and where an off engine's time goes under arrivals (issue 12).
#   DEADLINE_S=560 bash bench/gpu/run_arrivals.sh          (carry .whl, .jitcache)
# Model: the crafted clear-margin 7.2B target (Llama-3-8B shapes) + EAGLE3 head: greedy outputs must follow
# its successor table. 1. the daemon with the sglang engine + plugin: off path, greedy equality never /
# always / switching every 5 ms with continuous arrivals (outputs 16-96 tokens), pin latency. 2. closed
# loop of 48 clients (prompt 32-256, output 64-512) on the off engine: throughput, SGLang's own log
# figures, a torch-profiler summary; again with the draft's prefill skipped (experiment knob).
# 3. the same load on an engine started without speculation.
source bench/gpu/common.sh
MAXBS=128 EXPERIMENTS=1 ACC=natural
make_model $M --crafted $MODEL7B
CHECK=(--chain $M/target/next.json)
EQ=(--prompts 200 --concurrency 32 --input-len 32 --output-len 96 --output-len-min 16)
CL=(--shape closed --levels 48 --seconds 12 --warmup 3 --repeats 1 --out "$R")
LOG=$OUT/daemon.log

closed_phase() { # port label logfile
  local a; a=$(log_offset "$3")
  python3 bench/gpu/loads.py --port "$1" --label "$2" "${CL[@]}" 2>&1 | grep LOAD | cut -c1-300 | tee -a "$SUM"
  python3 bench/gpu/logstats.py "$3" "$a" "$(log_offset "$3")" --label "$2" | tee -a "$SUM"
}

profile_phase() { # port label: a short closed loop in the background, the profiler in its middle
  python3 bench/gpu/loads.py --port "$1" --label "$2-prof" --shape closed --levels 48 --seconds 8 --warmup 3 \
    --repeats 1 --out /tmp/prof-load.jsonl >/dev/null 2>&1 &
  local load=$!
  sleep 5; profile "$1" "$2" 40; wait $load
}

if start_daemon; then
  specctl status 2>&1 | grep -E "daemon|engine|off path|threshold" | tee -a "$SUM"
  specctl threshold pin 0 | tee -a "$SUM"
  greedy 30000 never-fastoff "${EQ[@]}" "${CHECK[@]}"
  specctl threshold pin $MAXBS | tee -a "$SUM"
  greedy 30000 always "${EQ[@]}" "${CHECK[@]}"
  greedy 30000 switching-5ms "${EQ[@]}" "${CHECK[@]}" --toggle 0,$MAXBS --toggle-ms 5
  [ "$(left)" -gt 330 ] && python3 bench/gpu/pin_latency.py --db $SC/state.db --socket $SC/ctl.sock --port 30000 \
    --tokenizer $TOK --high $MAXBS --toggles 6 2>&1 | grep -E "PINLAT|pin_latency" | tee -a "$SUM"
  specctl threshold pin 0 >/dev/null
  closed_phase 30000 off "$LOG"
  [ "$(left)" -gt 250 ] && profile_phase 30000 off
  say "skip draft prefill: $(internal_state 30000 '{"spec_controller_skip_draft_prefill": true}')"
  [ "$(left)" -gt 200 ] && closed_phase 30000 off-nodraftprefill "$LOG"
  internal_state 30000 '{"spec_controller_skip_draft_prefill": false}' >/dev/null
  specctl status 2>&1 | grep -E "off path|plugin cost|samples" | tee -a "$SUM"
  stop_daemon
fi
if [ "$(left)" -gt 110 ] && start_server nospec 30001 X=1 --; then
  closed_phase 30001 nospec "$OUT/nospec.log"
  [ "$(left)" -gt 45 ] && profile_phase 30001 nospec
  stop_server
fi
save_caches
show_and_total
