#!/bin/bash
# Issue 12 (items 1, 2), one device call: the off engine and an engine without speculation RESIDENT TOGETHER on
# the GPU and measured alternately (order rotated per repeat, the same seeds for both), so that drift and the
# seeds' workloads do not decide the ratio:
#   DEADLINE_S=540 bash bench/gpu/run_pair.sh                  (carry .whl, .jitcache)
# Engines: a no-spec engine (mem fraction 0.30) started first, then the daemon (sglang engine + plugin, the
# default off path, mem fraction 0.64 of which its own share is 0.34), `specctl threshold pin 0`. Both carry
# the bench-only timeline plugin (bench/gpu/timeline.py). Loads (bench/gpu/loads.py --engines), in order:
#  open loop `sglang.bench_serving --request-rate R` at 2 / 12 / 24 req/s, OPEN_S s of arrivals, 2 repeats,
#  closed loop at C = CLOSED_LEVELS (default 1 / 16 / 48 / 128; prompt 32-256, output 64-512, CLOSED_S s after
#  CLOSED_WARMUP s); a TIMELINE line per open and closed run (per batch kind: GPU span, idle gap before it,
#  CPU ms); steady decode at batch 1 / 16 / 48 / 128; with SHAPES containing `logprob`, a closed loop at
#  LOGPROB_LEVELS (48) where LOGPROB_SHARE (0.1) of the requests ask for logprobs (issue 12 item 4); with
#  `greedy`, greedy equality while switching every 5 ms. OFF_PATH sets the daemon's [sglang] off_path.
source bench/gpu/common.sh
MAXBS=128 ACC=natural
OPEN_S=${OPEN_S:-12}; SHAPES=${SHAPES:-open,closed,steady}   # SHAPES: the phases to run
CLOSED_S=${CLOSED_S:-4}; CLOSED_WARMUP=${CLOSED_WARMUP:-2}     # at C = 128 a request lives ~3-4 s: use >= 8 s of warm-up
make_model $M --crafted $MODEL7B
timeline_plugin
PAIR=(--engines nospec=30001,off=30000 --repeats 2 --flush --out "$R")

start_server nospec 30001 SPEC_TIMELINE=/tmp/tl/nospec -- --mem-fraction-static 0.30 || exit 1
NOSPEC_PID=$SERVER_PID
export SPEC_TIMELINE=/tmp/tl/off MEMFRAC=0.64     # the daemon's SGLang child inherits the timeline prefix
if start_daemon; then
  specctl status 2>&1 | grep -E "off path|engine|sglang" | tee -a "$SUM"
  specctl threshold pin 0 | tee -a "$SUM"
  n0=$([ -f "$R" ] && wc -l <"$R" || echo 0)
  CLOSED=${CLOSED_LEVELS:-1,16,48,128}
  # what each phase needs (s): 12 open runs of OPEN_S + ~8 s; closed: 4 runs a level (2 repeats, 2 engines)
  # of CLOSED_WARMUP + CLOSED_S + ~3 s (integers)
  if [[ $SHAPES == *open* ]] && [ "$(left)" -gt $((12 * (OPEN_S + 8))) ]; then
    load_sum --shape open --rates 2,12,24 --seconds "$OPEN_S" --tokenizer $TOK "${PAIR[@]}"; say "open done"
  fi
  if [[ $SHAPES == *closed* ]] && [ "$(left)" -gt $((4 * (CLOSED_WARMUP + CLOSED_S + 3) * $(echo "$CLOSED" | tr ',' '\n' | wc -l) + 30)) ]; then
    load_sum --shape closed --levels "$CLOSED" --seconds "$CLOSED_S" --warmup "$CLOSED_WARMUP" "${PAIR[@]}"
    say "closed done"
  fi
  timeline_lines "$n0" 3 "$OPEN_S" "$CLOSED_WARMUP" "$CLOSED_S"   # open: after 3 s; closed: their window
  # issue 12 item 4: a share of logprob requests (their off batches take SGLang's steps-0 path); the
  # off engine's status then says how many batches fell back
  if [[ $SHAPES == *logprob* ]] && [ "$(left)" -gt $((4 * (CLOSED_WARMUP + CLOSED_S + 3) + 30)) ]; then
    load_sum --shape closed --levels "${LOGPROB_LEVELS:-48}" --logprob-share "${LOGPROB_SHARE:-0.1}" \
      --seconds "$CLOSED_S" --warmup "$CLOSED_WARMUP" "${PAIR[@]}"
    specctl status 2>&1 | grep -E "off path" | tee -a "$SUM"; say "logprob done"
  fi
  # issue 12 item 5: greedy outputs of the daemon's engine identical to the crafted chain while the
  # threshold flips between 0 and MAXBS every 5 ms under continuous arrivals (200 prompts)
  if [[ $SHAPES == *greedy* ]] && [ "$(left)" -gt 70 ]; then
    greedy 30000 "switching-${OFF_PATH:-default}" --prompts 200 --concurrency 32 --input-len 32 --output-len 96 \
      --output-len-min 16 --chain $M/target/next.json --toggle 0,$MAXBS --toggle-ms 5
    specctl threshold pin 0 >/dev/null
  fi
  if [[ $SHAPES == *steady* ]] && [ "$(left)" -gt 40 ]; then
    load_sum --shape steady --levels 1,16,48,128 --steady-len 192 "${PAIR[@]}"; say "steady done"
  fi
  specctl status 2>&1 | grep -E "off path|plugin cost|samples" | tee -a "$SUM"
  stop_daemon
fi
SERVER_PID=$NOSPEC_PID; stop_server
unset SPEC_TIMELINE
python3 bench/gpu/loads.py --show "$R" | tee -a "$SUM"
say "total $(($(date +%s) - T0)) s"
