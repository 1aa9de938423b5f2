#!/bin/bash
# Issue 12 item 1, one device call: where an off engine's time goes under open-loop Poisson arrivals.
#   DEADLINE_S=570 bash bench/gpu/run_where.sh                 (carry .whl, .jitcache)
# Both engines carry the bench-only timeline plugin (bench/gpu/timeline.py: per scheduler iteration the
# CPU spans of launch / result processing / scheduling and CUDA events around every forward):
#  1. an engine started without speculation; 2. the daemon pinned at 0 (the default off path). Each:
#  `sglang.bench_serving --request-rate R` for RATES (default 24,12), WHERE_S seconds of arrivals, 2 repeats,
#  the radix cache flushed before each; per run a TIMELINE line (bench/gpu/timeline_summary.py) over the
#  steady part of the run; then one torch-profiler window (80 steps) under the same load (trace_summary.py).
source bench/gpu/common.sh
MAXBS=128 ACC=natural
RATES=${RATES:-24,12}; WHERE_S=${WHERE_S:-20}
make_model $M --crafted $MODEL7B
timeline_plugin
OP=(--shape open --rates "$RATES" --seconds "$WHERE_S" --repeats 2 --flush --tokenizer $TOK)

where_phase() { # port label: the open-loop runs, a TIMELINE line per run, one profiler window
  local n0; n0=$([ -f "$R" ] && wc -l <"$R" || echo 0)
  load_sum --port "$1" --label "$2" "${OP[@]}" --out "$R"
  timeline_lines "$n0" 4 "$WHERE_S"
  [ "$(left)" -lt 60 ] && return
  python3 bench/gpu/loads.py --port "$1" --label "$2-prof" --shape open --rates 24 --seconds 12 --repeats 1 \
    --tokenizer $TOK --out /tmp/prof-load.jsonl >/dev/null 2>&1 &
  local load=$!
  sleep 7; profile "$1" "$2" 80; wait $load
}

if start_server nospec 30001 SPEC_TIMELINE=/tmp/tl/nospec --; then
  where_phase 30001 nospec; say "nospec done"
  stop_server
fi
tail -c 100000 "$OUT/nospec.log" >/tmp/nospec.log; rm -f "$OUT/nospec.log"     # 8 files come back at most
export SPEC_TIMELINE=/tmp/tl/off        # the daemon's SGLang child inherits it
if [ "$(left)" -gt 200 ] && start_daemon; then
  specctl status 2>&1 | grep -E "off path|engine|sglang" | tee -a "$SUM"
  specctl threshold pin 0 >/dev/null
  where_phase 30000 off; say "off done"
  specctl status 2>&1 | grep -E "off path|plugin cost|samples" | tee -a "$SUM"
  stop_daemon
fi
unset SPEC_TIMELINE
[ "$(left)" -gt 40 ] && tar cf - -C /tmp tl | xz -1 >"$OUT/timelines.tar.xz"
save_caches
show_and_total
