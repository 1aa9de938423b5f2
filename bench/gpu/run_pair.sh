#!/bin/bash
# Issue 12 (items 1, 2), one device call: the off engine and an engine without speculation RESIDENT TOGETHER on
# the GPU and measured alternately (order rotated per repeat, the same seeds for both), so that drift and the
# seeds' workloads do not decide the ratio:
#   DEADLINE_S=540 bash bench/gpu/run_pair.sh                  (carry .whl, .jitcache)
# Engines: a no-spec engine (mem fraction 0.30) started first, then the daemon (sglang engine + plugin, the
# default off path, mem fraction 0.64 of which its own share is 0.34), `specctl threshold pin 0`. Both carry
# the bench-only timeline plugin (bench/gpu/timeline.py). Loads (bench/gpu/loads.py --engines), in order:
#  open loop `sglang.bench_serving --request-rate R` at 2 / 12 / 24 req/s, OPEN_S s of arrivals, 2 repeats,
#  each run's TIMELINE line (per batch kind: GPU ms, idle gap before it, CPU ms); closed loop at C = 1 / 16 /
#  48 / 128 (prompt 32-256, output 64-512, 4 s after 2 s); steady decode at batch 1 / 16 / 48 / 128.
source bench/gpu/common.sh
MAXBS=128 ACC=natural
OPEN_S=${OPEN_S:-12}; SHAPES=${SHAPES:-open,closed,steady}   # SHAPES: the phases to run
make_model $M --crafted $MODEL7B
cp bench/gpu/timeline.py /tmp/site/spec_timeline.py
mkdir -p /tmp/site/spec_timeline-0.1.dist-info /tmp/tl; rm -f /tmp/tl/*
printf 'Metadata-Version: 2.1\nName: spec-timeline\nVersion: 0.1\n' >/tmp/site/spec_timeline-0.1.dist-info/METADATA
printf '[sglang.srt.plugins]\nspec_timeline = spec_timeline:load\n' >/tmp/site/spec_timeline-0.1.dist-info/entry_points.txt
PAIR=(--engines nospec=30001,off=30000 --repeats 2 --flush --out "$R")

start_server nospec 30001 SPEC_TIMELINE=/tmp/tl/nospec -- --mem-fraction-static 0.30 || exit 1
NOSPEC_PID=$SERVER_PID
export SPEC_TIMELINE=/tmp/tl/off MEMFRAC=0.64     # the daemon's SGLang child inherits the timeline prefix
if start_daemon; then
  specctl status 2>&1 | grep -E "off path|engine|sglang" | tee -a "$SUM"
  specctl threshold pin 0 | tee -a "$SUM"
  n0=$([ -f "$R" ] && wc -l <"$R" || echo 0)
  CLOSED=${CLOSED_LEVELS:-1,16,48,128}
  # what each phase needs (s): 12 open runs of OPEN_S + ~8 s; closed ~36 s a level (2 repeats, 2 engines)
  if [[ $SHAPES == *open* ]] && [ "$(left)" -gt $((12 * (OPEN_S + 8))) ]; then
    load_sum --shape open --rates 2,12,24 --seconds "$OPEN_S" --tokenizer $TOK "${PAIR[@]}"; say "open done"
  fi
  tail -n +"$((n0 + 1))" "$R" | grep '"mono_start"' | grep '"open"' | while read -r row; do
    [ "$(left)" -lt 40 ] && { say "timeline summaries stopped (time)"; break; }
    label=$(echo "$row" | python3 -c "import sys, json; print(json.load(sys.stdin)['label'])")
    python3 bench/gpu/timeline_summary.py /tmp/tl/"$label" --load-row "$row" --skip 3 --seconds "$OPEN_S" \
      --json "$OUT/timeline.jsonl" | cut -c1-400 >>"$SUM"
  done
  if [[ $SHAPES == *closed* ]] && [ "$(left)" -gt $((36 * $(echo "$CLOSED" | tr ',' '\n' | wc -l) + 30)) ]; then
    load_sum --shape closed --levels "$CLOSED" --seconds 4 --warmup 2 "${PAIR[@]}"; say "closed done"
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
