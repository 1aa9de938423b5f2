# shellcheck shell=bash
# Shared by the GPU scripts (sourced): environment, wheel install, import stubs, engine flags, helpers.
# Needs .whl (and optionally .jitcache) carried; writes $OUT/summary.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s); DEADLINE=${DEADLINE_S:-560}
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
fits() { # need-s what: true while that many seconds are left, else says what it needed (to plan the next call)
  [ "$(left)" -gt "$1" ] && return 0; say "skip $2 (time: needs $1 s, $(left) left)" | cut -c1-160; return 1; }
LEVELS=${LEVELS:-1,4,16,64,128}; ACC=${ACC_LEN:-2.5}; PPC=${PPC:-3}; OUTLEN=${OUTLEN:-128}
SWEEP_ARGS=(--prompts-per-client "$PPC" --output-len "$OUTLEN")
M=/tmp/m; SC=/tmp/sc
# A warm machine keeps /tmp and what a timed-out call left running (servers and daemons run in their own
# sessions): stop those process groups first, by the ids recorded when they started, never by name.
GROUPS_FILE=/tmp/bench-groups
stop_groups() {
  [ -f $GROUPS_FILE ] || return 0
  while read -r g; do kill -TERM -- "-$g" 2>/dev/null; done <$GROUPS_FILE
  for _ in $(seq 50); do     # up to 5 s for them to go
    while read -r g; do kill -0 -- "-$g" 2>/dev/null && break; done <$GROUPS_FILE || break; sleep 0.1; done
  while read -r g; do kill -KILL -- "-$g" 2>/dev/null; done <$GROUPS_FILE
  rm -f $GROUPS_FILE
}
start_afresh() { # [path...]: what a call that starts its engines begins with: nothing left running, a fresh database
  # (and those paths gone)
  stop_groups; rm -rf $SC "$@"; mkdir -p $SC
}
source bench/gpu/keep.sh    # KEEP_ENGINES=1: REUSE, KEEP (bench/gpu/keep.sh)
[ "$REUSE" = 1 ] || start_afresh $KEEP_DIR
LOGS=$OUT; [ "$KEEP" = 1 ] && { LOGS=$KEEP_DIR/logs; mkdir -p "$LOGS"; }   # the engines' logs
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export TVM_FFI_CACHE_DIR=/tmp/jitcache TRITON_CACHE_DIR=/tmp/tritoncache
SUM=$OUT/summary.txt; : >"$SUM"
R=$OUT/results.jsonl                # every script's measurements, one JSON line each
say() { echo "[t+$(($(date +%s) - T0))s] $*" | tee -a "$SUM"; }
kv_coalesced() { # do the engines started from here coalesce their draft-KV writes? The plugin's rule
  # (instance.coalesce_batches): with graphs unless SPEC_CONTROLLER_DRAFT_KV_COALESCE is 0 / 1, eager only at >= 2
  local n=${SPEC_CONTROLLER_DRAFT_KV_COALESCE:-}
  if [ "${SPEC_CONTROLLER_DRAFT_KV_GRAPH:-1}" != 0 ]; then [ "${n:-8}" != 0 ] && [ "${n:-8}" != 1 ]
  else [ -n "$n" ] && [ "$n" -ge 2 ] 2>/dev/null; fi
}

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  # the host's CPU topology (sockets, NUMA nodes, threads per core): where pinned core sets may differ in speed
  lscpu 2>/dev/null | grep -E '^(Model name|Socket|Core|Thread|NUMA node)' | tr -s ' ' | paste -sd';'
  # a warm machine keeps /tmp: the wheel set is installed once per machine (the project itself every call)
  WHEELS=$(stat -c '%n %s' .whl/*.whl | md5sum)   # the carried set (names, sizes): a changed one is installed again
  [ "$(cat /tmp/site/.wheels-installed 2>/dev/null)" = "$WHEELS" ] || { python3 -m pip install -q --no-index \
    --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && echo "$WHEELS" >/tmp/site/.wheels-installed; }
  # (not under kept engines: the same code by their signature, and a reinstall rewrites the files they import from)
  [ "$REUSE" = 1 ] || python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade \
    --target /tmp/site . 2>&1 | tail -2
  for c in .jitcache/caches.tar.*; do [ -f "$c" ] && tar xf "$c" -C /tmp && echo "restored JIT caches"; done
} >/tmp/env.log 2>&1
export PYTHONPATH=/tmp/site
tail -3 /tmp/env.log >>"$SUM"      # $OUT brings back 8 files at most: the install log stays behind
# bench_serving imports HF `datasets` for datasets this run never uses: a stub keeps the wheel set small.
python3 -c "import datasets" 2>/dev/null || { mkdir -p /tmp/site/datasets;
  printf 'def load_dataset(*a, **k):\n    raise RuntimeError("datasets is not installed on this machine")\n' >/tmp/site/datasets/__init__.py; }
# SGLang's HTTP server imports optional media/TLS/harmony libraries at module level that this
# run never calls and the image lacks; permissive stubs (absent names resolve to inert placeholders).
for mod in soundfile watchfiles zstandard openai_harmony; do
  python3 -c "import $mod" 2>/dev/null && continue
  mkdir -p /tmp/site/$mod
  cat >/tmp/site/$mod/__init__.py <<'STUB'
class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Missing
class _Missing(metaclass=_Meta):
    def __init__(self, *a, **k): pass
    def __call__(self, *a, **k): return _Missing()
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Missing()
def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Missing
STUB
done
if ! python3 -c "import deep_gemm" >>/tmp/env.log 2>&1; then
  rm -rf /tmp/site/deep_gemm && mkdir -p /tmp/site/deep_gemm && : >/tmp/site/deep_gemm/__init__.py
  export SGLANG_ENABLE_JIT_DEEPGEMM=0
fi
python3 -c "import importlib.metadata as m; print('sglang plugins:', [e.value for e in m.entry_points(group='sglang.srt.plugins')])" | tee -a "$SUM"
make_model() { # dir [--crafted] ...: made once per machine for the same arguments (seeded: the same weights)
  [ -f "$1/.made" ] && [ "$(cat "$1/.made")" = "$*" ] && { say "model $* already made"; return; }
  rm -f "$1/.made"
  python3 bench/gpu/mkmodel.py "$@" >/tmp/mkmodel.log 2>&1 && echo "$*" >"$1/.made"
  tail -1 /tmp/mkmodel.log | tee -a "$SUM"
}
TOK=$M/target

BIGMODEL="--hidden 8192 --layers 48 --inter 22016 --heads 64 --kv-heads 8"   # ~34 B parameters
# TARGET_LAYERS (32): the 7.2B target's depth. Fewer layers shorten its GPU step with the same CPU per batch: 26 on
# an H100 gives about the H200's decode step of the 32-layer target (7.3-7.8 against ~9 ms at closed 128, 12-05b),
# the regime where the off engine's extra CPU per batch is exposed (docs/sglang.md); the record uses 32.
TARGET_LAYERS=${TARGET_LAYERS:-32}
MODEL7B="--hidden 4096 --layers $TARGET_LAYERS --inter 14336 --heads 32 --kv-heads 8"     # ~7.2 B at 32 layers (Llama-3-8B shapes, vocab 32k)
TP=${TP:-1}; MAXBS=${MAXBS:-128}   # tensor-parallel size; max running requests = largest CUDA-graph batch
DUMMY=${DUMMY:-}                    # 1: weights made in place by SGLang (--load-format dummy; mkmodel --config-only)
# Prefill CUDA graphs: every measurement so far ran them disabled (eager, launch-bound prefills); SGLang
# 0.5.17's own default on CUDA is "breakable". PREFILL_GRAPH=default leaves SGLang's choice (12-01e, 12-01f).
PREFILL_GRAPH=${PREFILL_GRAPH:-disabled}
PREFILL_FLAG=(); [ "$PREFILL_GRAPH" != default ] && PREFILL_FLAG=(--cuda-graph-backend-prefill "$PREFILL_GRAPH")
# Grammar backend of every engine: none (the default so far: no grammar compiler at start-up); xgrammar for
# runs whose requests carry a regex (run_pair.sh's grammar / grcheck phases set it)
GRAMMAR_BACKEND=${GRAMMAR_BACKEND:-none}
COMMON=(--model-path $M/target --host 127.0.0.1 --attention-backend triton --mem-fraction-static 0.8
  --cuda-graph-max-bs-decode $MAXBS "${PREFILL_FLAG[@]}" --grammar-backend "$GRAMMAR_BACKEND"
  --sampling-backend pytorch --max-running-requests $MAXBS --random-seed 0 --tp-size $TP
  ${DUMMY:+--load-format dummy})
# SLEEP_ON_IDLE (1 by default; 0: SGLang's own default): every engine started with SGLang's --sleep-on-idle (its idle
# scheduler waits on its sockets instead of polling a full CPU, which the idle engine did while run_pair measured the
# other: 12-04d rows' cpu_s ~12 s in a 15 s run, 12-04e 0.13-0.19 s; the no-spec engine's run-to-run spread at closed
# 128 went from 19 % (12-04d) to 3.6 / 4.8 % (12-04e))
SLEEP_ON_IDLE=${SLEEP_ON_IDLE:-1}
[ "$SLEEP_ON_IDLE" = 1 ] && COMMON+=(--sleep-on-idle)
# POOL_TOKENS: every engine's KV pool capped at that many tokens (--max-total-tokens); 0 (the default here; run_pair.sh
# sets 230000): each engine's pool as its memory fraction gives. Until 12-05 the engine started second always got the
# larger pool (367k / 341k / 358k / 387k tokens vs 231k / 260k / 276k), so its prefill-CPU excess (12-04i, 12-05 call
# 3) followed the second start and the larger pool alike. Once the pool is full every new request evicts from the
# radix cache, whose evict() walks every evictable leaf, ~1 per cached request (on the CPU host: 529 leaves at 230k
# tokens of 432-token requests, 123 us an evict; 845 at 367k, 213 us: bench/results/radix-evict-2026-12-05.md).
POOL_TOKENS=${POOL_TOKENS:-0}
[ "$POOL_TOKENS" != 0 ] && COMMON+=(--max-total-tokens "$POOL_TOKENS")
SPEC=(--speculative-algorithm EAGLE3 --speculative-draft-model-path $M/eagle3 --speculative-num-steps 3
  --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 ${DUMMY:+--speculative-draft-load-format dummy})

save_caches() {   # the JIT/Triton caches, for the next call (carry as .jitcache)
  (cd /tmp && find jitcache -name '*.so' 2>/dev/null; find tritoncache -type f 2>/dev/null) >/tmp/cachelist.txt
  tar cf - -C /tmp -T /tmp/cachelist.txt 2>/dev/null | xz -6 >"$OUT/caches.tar.xz"   # carry back as .jitcache/
}

wait_http() { # port pid
  for _ in $(seq 1 400); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 1
  done; return 1
}

start_server() { # label port env... -- flags ; sets SERVER_PID, returns non-zero if it never got healthy
  local label=$1 port=$2; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  say "start $label"
  # its own session: the server and every process it starts share the process group SERVER_PID
  setsid env "${envs[@]}" python3 -m sglang.launch_server "${COMMON[@]}" --port "$port" "$@" >"$LOGS/$label.log" 2>&1 &
  SERVER_PID=$!; echo $SERVER_PID >>$GROUPS_FILE
  if wait_http "$port" "$SERVER_PID"; then say "$label ready"; return 0; fi
  say "$label FAILED to start"; tail -20 "$LOGS/$label.log" | tee -a "$SUM"; stop_server; return 1
}

pin_group() { # pgid cpus: every thread of every process in the group that pgid leads (an engine and its children;
  # by PID, never by name) onto those cores; prints how many threads were pinned (cpusets.py, as loads.py's rotation)
  # (or FAILED, its one-line reason in the summary)
  python3 bench/gpu/cpusets.py pin "$1" "$2" 2>>"$SUM" || echo FAILED
}

kill_group() { # pid: SIGTERM to the process group that pid leads (started with setsid), SIGKILL after 30 s
  kill -TERM -- "-$1" 2>/dev/null
  for _ in $(seq 1 30); do kill -0 -- "-$1" 2>/dev/null || return 0; sleep 1; done
  kill -KILL -- "-$1" 2>/dev/null; sleep 1
}

stop_server() {   # by PID, never by name: only the server this script started
  kill_group "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null; sleep 2
}

sweep() { # port label logfile
  python3 bench/gpu/sweep.py --port "$1" --tokenizer $TOK --label "$2" --levels "$LEVELS" --out "$R" \
    "${SWEEP_ARGS[@]}" >>"$3" 2>&1
  say "$2 swept: $(python3 bench/gpu/sweep.py --show "$2" --out "$R")"
}

greedy() { # port label greedy.py-args...: one line per run in the summary
  local port=$1 label=$2; shift 2
  python3 bench/gpu/greedy.py --port "$port" --label "$label" --out "$R" "$@" 2>&1 | grep GREEDY | cut -c1-330 | tee -a "$SUM"
}

steady() { # port label logfile steady.py-args...: decode throughput at fixed batch sizes
  local port=$1 label=$2 logfile=$3; shift 3
  [ "$(left)" -lt 45 ] && { say "skip steady $label (time)"; return; }
  python3 bench/gpu/steady.py --port "$port" --label "$label" --levels "$LEVELS" --out "$R" "$@" >>"$logfile" 2>&1
  say "steady $label: $(cd bench/gpu && python3 steady.py --show "$label" --out "$R")"
}

profile() { # port label steps: SGLang's torch profiler for N forward steps under the running load; summary line
  local dir=/tmp/prof/$2; rm -rf "$dir"; mkdir -p "$dir"
  curl -s -X POST "http://127.0.0.1:$1/start_profile" -H 'Content-Type: application/json' \
    -d "{\"output_dir\": \"$dir\", \"num_steps\": $3, \"activities\": [\"CPU\", \"GPU\"], \"with_stack\": false}" >/dev/null
  for _ in $(seq 1 60); do ls "$dir"/*.trace.json* >/dev/null 2>&1 && break; sleep 1; done
  local size=-1   # the trace is written (gzip) after the last step: wait until its size stops changing
  for _ in $(seq 1 30); do
    local now; now=$(du -sb "$dir" | cut -f1); [ "$now" = "$size" ] && break; size=$now; sleep 2
  done
  python3 bench/gpu/trace_summary.py "$dir" --label "$2" --json "$R" 2>&1 | tail -1 | cut -c1-1500 | tee -a "$SUM"
}

log_offset() { stat -c %s "$1" 2>/dev/null || echo 0; }

internal_state() { # port json: POST /set_internal_state, prints "updated True/False"
  python3 bench/gpu/greedy.py --updated "$(curl -s -X POST "http://127.0.0.1:$1/set_internal_state" \
    -H 'Content-Type: application/json' -d "{\"server_args\": $2}")"
}

server_phase() { # label port env... -- extra flags: start, sweep, stop
  local label=$1 port=$2
  start_server "$@" || return
  sweep "$port" "$label" "$LOGS/$label.log"
  stop_server
}

specctl() { python3 -m controller.cli --socket $SC/ctl.sock "$@"; }

pin_latency() { # high pin: time from a pin to the first batch that uses it, under load (one PINLAT line)
  python3 bench/gpu/pin_latency.py --db $SC/state.db --socket $SC/ctl.sock --port 30000 --tokenizer $TOK \
    --high "$1" 2>&1 | grep -E "PINLAT|pin_latency" | tee -a "$SUM"
}

start_daemon() { # spec-controller run (TP, MAXBS, DUMMY from the environment) with the sglang engine (+ plugin); sets DAEMON_PID
  cat >$SC/config.toml <<TOML
[engine]
kind = "sglang"
[sglang]
model_path = "$M/target"
speculative_algorithm = "EAGLE3"
speculative_draft_model_path = "$M/eagle3"
speculative_num_steps = 3
speculative_eagle_topk = 1
speculative_num_draft_tokens = 4
host = "127.0.0.1"
port = 30000
attention_backend = "triton"
mem_fraction_static = ${MEMFRAC:-0.8}
cuda_graph_max_bs_decode = $MAXBS
$([ "$PREFILL_GRAPH" != default ] && echo "cuda_graph_backend_prefill = \"$PREFILL_GRAPH\"")
grammar_backend = "$GRAMMAR_BACKEND"
sampling_backend = "pytorch"
max_running_requests = $MAXBS
tp_size = $TP
$([ -n "$DUMMY" ] && printf 'load_format = "dummy"\nspeculative_draft_load_format = "dummy"')
random_seed = 0
$([ -n "${OFF_PATH:-}" ] && echo "off_path = \"$OFF_PATH\"")
$([ "$SLEEP_ON_IDLE" = 1 ] && echo "sleep_on_idle = true")
$([ "$POOL_TOKENS" != 0 ] && echo "max_total_tokens = $POOL_TOKENS")
$([ -n "${API_KEY:-}" ] && echo "api_key = \"$API_KEY\"")
ready_timeout_s = 420
probe_s = ${PROBE_S:-30}
hang_after_s = ${HANG_AFTER_S:-180}
[sglang.env]
$([ "$ACC" != natural ] && echo "SGLANG_SIMULATE_ACC_LEN = \"$ACC\"")
$([ -n "${ACC_LEVELS:-}${EXPERIMENTS:-}" ] && echo 'SPEC_CONTROLLER_EXPERIMENTS = "1"')
[storage]
db = "$SC/state.db"
[control]
socket = "$SC/ctl.sock"
TOML
  say "start daemon (sglang engine + plugin, TP $TP, accept length $ACC)"
  setsid python3 -m controller.daemon run --config $SC/config.toml >"${DAEMON_LOG:-$LOGS/daemon.log}" 2>&1 &
  DAEMON_PID=$!; echo $DAEMON_PID >>$GROUPS_FILE   # leads the group of the daemon and its SGLang child
  for _ in $(seq 1 480); do
    specctl status --json 2>/dev/null | grep -q '"running": true' && { say "daemon up"; save_caches; return 0; }
    kill -0 $DAEMON_PID 2>/dev/null || break; sleep 1
  done
  say "daemon FAILED"; grep -E "Error|error" "${DAEMON_LOG:-$LOGS/daemon.log}" | grep -v "^benchmark_args" | tail -8 | tee -a "$SUM"
  kill_group $DAEMON_PID; return 1
}

stop_daemon() {   # SIGTERM to the daemon: it drains and stops its SGLang child; then nothing of the group may be left
  kill -TERM $DAEMON_PID; wait $DAEMON_PID; say "daemon exit code $? after SIGTERM"
  kill -0 -- "-$DAEMON_PID" 2>/dev/null && { say "processes left in the daemon's group: stopping them"; kill_group $DAEMON_PID; }
  return 0
}

ema_phase() { # SGLang's own adaptive EMA ({0,3} at slots 1/8/32/64), the plugin disabled, then its sweep
  echo '{"1": {"candidate_steps": [0, 3]}, "8": {"candidate_steps": [0, 3]}, "32": {"candidate_steps": [0, 3]}, "64": {"candidate_steps": [0, 3]}}' >$SC/ema.json
  local sim=(); [ "$ACC" != natural ] && sim=(SGLANG_SIMULATE_ACC_LEN=$ACC)
  server_phase sglang-ema 30002 SPEC_CONTROLLER_PLUGIN=0 "${sim[@]}" -- "${SPEC[@]}" --speculative-adaptive \
    --speculative-adaptive-config $SC/ema.json
}

ranked_sweep() { # repeats [modes]: the daemon's modes interleaved inside each level, order rotated per repeat
  local modes=${2:-never,always,static5,bandit}
  specctl policy set bandit
  python3 bench/gpu/sweep.py --port 30000 --tokenizer $TOK \
    --modes "$(echo "$modes" | sed "s/never/never=0/;s/always/always=$MAXBS/;s/static5/static5=5/;s/bandit/bandit=policy/")" \
    --socket $SC/ctl.sock --db $SC/state.db --repeats "$1" --levels "$LEVELS" --out "$R" "${SWEEP_ARGS[@]}" \
    >>"${DAEMON_LOG:-$LOGS/daemon.log}" 2>&1
  for mode in ${modes//,/ }; do say "TP $TP $mode: $(python3 bench/gpu/sweep.py --show $mode --out "$R")"; done
  grep -h '"measured_concurrency"' "$R" | python3 -c "import sys, json
for r in map(json.loads, sys.stdin): print(r['label'], r['measured_concurrency'], r['spec_share'], r['accept_measured'])" | tr '\n' ';' | sed 's/^/measured (mode c spec-share accept): /' | tee -a "$SUM"; echo | tee -a "$SUM"
}

timeline_plugin() { # the bench-only timeline plugin (bench/gpu/timeline.py) as an SGLang plugin; empties /tmp/tl
  cp bench/gpu/timeline.py /tmp/site/spec_timeline.py; cp bench/gpu/procspeed.py bench/gpu/proccpu.py /tmp/site/
  mkdir -p /tmp/site/spec_timeline-0.1.dist-info /tmp/tl; rm -f /tmp/tl/*
  printf 'Metadata-Version: 2.1\nName: spec-timeline\nVersion: 0.1\n' >/tmp/site/spec_timeline-0.1.dist-info/METADATA
  printf '[sglang.srt.plugins]\nspec_timeline = spec_timeline:load\n' >/tmp/site/spec_timeline-0.1.dist-info/entry_points.txt
}

proposals_plugin() { # the bench-only proposals recorder (bench/gpu/proposals.py) as an SGLang plugin; empties /tmp/pp
  cp bench/gpu/proposals.py /tmp/site/spec_proposals.py
  mkdir -p /tmp/site/spec_proposals-0.1.dist-info /tmp/pp; rm -f /tmp/pp/*
  printf 'Metadata-Version: 2.1\nName: spec-proposals\nVersion: 0.1\n' >/tmp/site/spec_proposals-0.1.dist-info/METADATA
  printf '[sglang.srt.plugins]\nspec_proposals = spec_proposals:load\n' >/tmp/site/spec_proposals-0.1.dist-info/entry_points.txt
}

timeline_lines() { # from_line open_skip open_s [closed_warmup closed_s]: a TIMELINE line per open (and closed and
  # steady) run in $R after line from_line, over its steady window (steady: the whole run, its prefill included),
  # into $OUT/timeline.jsonl and the summary
  local shapes='"open"'; [ $# -ge 5 ] && shapes='"(open|closed|steady)"'
  tail -n +"$(($1 + 1))" "$R" | grep '"mono_start"' | grep -E "\"shape\": $shapes" | while read -r row; do
    [ "$(left)" -lt 40 ] && { say "timeline summaries stopped (time)"; break; }
    read -r label shape span < <(echo "$row" | python3 -c "import sys, json; r = json.load(sys.stdin); print(r['label'], r['shape'], r['mono_end'] - r['mono_start'])")
    case $shape in open) win=(--skip "$2" --seconds "$3") ;; steady) win=(--skip 0 --seconds "$span") ;;
      *) win=(--skip "$4" --seconds "$(python3 -c "print($4 + $5)")") ;; esac
    case $label in nospec|nospec-*) label=nospec ;; *) label=off ;; esac   # run_pair.sh's variants (fast, perbatch,
    # pinned, ..., and -gcf after its gcfreeze phase): the daemon's engine; nospec and nospec-gcf: the no-spec engine
    python3 bench/gpu/timeline_summary.py /tmp/tl/"$label" --load-row "$row" "${win[@]}" \
      --json "$OUT/timeline.jsonl" | cut -c1-1800 >>"$SUM"   # whole (~1.5 kB): the summary stands in when a
    # call brings back no timeline.jsonl (8 files at most: 12-04i call 2)
  done
}

load_sum() { # loads.py args...: its result lines (and errors) into the summary (CLIENT: a prefix, e.g. taskset -c ...)
  ${CLIENT:-} python3 bench/gpu/loads.py "$@" 2>&1 | grep -E "LOAD|Error|refused|Traceback" | cut -c1-220 >>"$SUM"
}

nospec_loads() { # names of loads.py argument arrays...: an engine started without speculation (port 30001) under
  # each in turn, then stopped; its log kept at /tmp/nospec.log (8 files come back at most)
  if start_server nospec 30001 X=1 --; then
    local name; for name in "$@"; do local -n args=$name; load_sum --port 30001 --label nospec "${args[@]}"; done
    say "nospec done"; stop_server
  fi
  tail -c 200000 "$LOGS/nospec.log" >/tmp/nospec.log; rm -f "$LOGS/nospec.log"
}

show_and_total() { # the call's tables (loads.py --show over $R) and its wall time, at the end of a script
  python3 bench/gpu/loads.py --show "$R" | tee -a "$SUM"
  say "total $(($(date +%s) - T0)) s"
}

save_db() { # the daemon's database (after stop_daemon, or live: VACUUM INTO reads it), compacted and compressed: $OUT/state.db.xz
  rm -f /tmp/state-copy.db; python3 -c "import sqlite3; sqlite3.connect('$SC/state.db').execute(\"VACUUM INTO '/tmp/state-copy.db'\")"
  xz -6 -c /tmp/state-copy.db >"$OUT/state.db.xz"; ls -la "$OUT/state.db.xz" | tee -a "$SUM"
}

const_decisions() { # clients seconds history-file: the bandit unpinned under a constant closed loop; CONST line
  specctl policy set bandit >/dev/null; specctl threshold unpin >/dev/null
  local t1; t1=$(date +%s.%N)
  load_sum --port 30000 --label "bandit-const-$1" --shape closed --levels "$1" --seconds "$2" --warmup 2 \
    --repeats 1 --out "$R"
  specctl history --limit 2000 --json >"$3" 2>/dev/null
  python3 bench/gpu/changes_count.py "$3" "$t1" "$2" | tee -a "$SUM"
}

