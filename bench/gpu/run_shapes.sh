#!/bin/bash
# Issues 12 (steady and closed shapes at every level), 14 (the 0.5.17 off path and greedy equality after the
# per-version internals table) and 13 (item 4: decisions per minute at constant load), one device call:
#   DEADLINE_S=570 bash bench/gpu/run_shapes.sh                (carry .whl, .jitcache)
#  1. an engine started without speculation: steady decode at batch 1/16/48/128, closed loop with continuous
#     arrivals at C = 1/16/48/128 (prompt 32-256, output 64-512), 2 repeats, radix cache flushed each run;
#  2. the daemon (sglang engine + plugin, its default off path), `specctl threshold pin 0`: the same loads;
#  3. greedy equality with arrivals (200 prompts, 32 clients, outputs 16-96): pinned never / always, and
#     switching 0 <-> MAXBS every 5 ms, against the crafted model's successor table;
#  4. the bandit unpinned under a closed loop of CONST_C clients for CONST_S seconds: threshold changes.
# The open-loop shape of issue 12 is run_modes.sh (never vs the no-spec engine, same call).
source bench/gpu/common.sh
MAXBS=128 ACC=natural
CONST_C=${CONST_C:-24}; CONST_S=${CONST_S:-60}
make_model $M --crafted $MODEL7B
CHECK=(--chain $M/target/next.json)
EQ=(--prompts 200 --concurrency 32 --input-len 32 --output-len 96 --output-len-min 16)
ST=(--shape steady --levels 1,16,48,128 --steady-len 192 --repeats 2 --flush --out "$R")
CL=(--shape closed --levels 1,16,48,128 --seconds 5 --warmup 2 --repeats 2 --flush --out "$R")

nospec_loads ST CL
if start_daemon; then
  specctl status 2>&1 | grep -E "off path|engine|sglang" | tee -a "$SUM"
  specctl threshold pin 0 >/dev/null
  load_sum --port 30000 --label off "${ST[@]}"
  load_sum --port 30000 --label off "${CL[@]}"; say "off done"
  greedy 30000 never "${EQ[@]}" "${CHECK[@]}"
  specctl threshold pin $MAXBS >/dev/null
  greedy 30000 always "${EQ[@]}" "${CHECK[@]}"
  greedy 30000 switching-5ms "${EQ[@]}" "${CHECK[@]}" --toggle 0,$MAXBS --toggle-ms 5
  specctl status 2>&1 | grep -E "off path|plugin cost|samples" | tee -a "$SUM"
  [ "$(left)" -gt $((CONST_S + 60)) ] && const_decisions "$CONST_C" "$CONST_S" "$OUT/history.json"
  stop_daemon
fi
save_caches
show_and_total
