#!/bin/bash
# Issue 12 (items 1, 2), one device call: the off engine and an engine without speculation RESIDENT TOGETHER on
# the GPU and measured alternately (order reversed in odd repeats, the same seeds for both), so that drift and the
# seeds' workloads do not decide the ratio:
#   DEADLINE_S=540 bash bench/gpu/run_pair.sh                  (carry .whl, .jitcache)
# Engines: a no-spec engine (mem fraction 0.30) started first, then the daemon (sglang engine + plugin, the
# default off path, mem fraction 0.64 of which its own share is 0.34; B_FIRST=1: the daemon first at 0.34, then
# no-spec at 0.64), `specctl threshold pin 0`. Both carry
# the bench-only timeline plugin (bench/gpu/timeline.py). Loads (bench/gpu/loads.py --engines), in order:
#  open loop `sglang.bench_serving --request-rate R` at 2 / 12 / 24 req/s, OPEN_S s of arrivals, 2 repeats,
#  closed loop at C = CLOSED_LEVELS (default 1 / 16 / 48 / 128; prompt 32-256, output 64-512, CLOSED_S s after
#  CLOSED_WARMUP s); a TIMELINE line per open and closed run (per batch kind: GPU span, idle gap before it,
#  CPU ms); steady decode at batch 1 / 16 / 48 / 128; with SHAPES containing `logprob`, a closed loop at
#  LOGPROB_LEVELS (48) where LOGPROB_SHARE (0.1) of the requests ask for logprobs (issue 12 item 4);
#  `syncdebug`: torch's sync debug mode in both engines under a short closed loop ($OUT/syncs.txt); `cprofile`:
#  cProfile of the decode batches' launch in both engines under a short closed loop ($OUT/cprofile.txt;
#  SPEC_CPROFILE_KINDS=extend: the prefills'); `gcfreeze`: gc.freeze() in both engines' schedulers for the phases
#  after it (their labels end in -gcf); every TIMELINE line counts garbage collection (gc_ms per launch)
#  and the CUDA allocator's device calls (allocator); `warm`: both engines served a closed loop at 128 for WARM_S
#  (120) s each, unrecorded, before the phases after it; `calibrate`: a fixed pure-Python loop timed in both schedulers;
#  `spin`: CPU spun before each launch for the phases after it (SPIN_DOSES, timeline.py's SPEC_SPIN; default: the
#  no-spec engine's decodes 1000 us; one spin phase per call) with the labels of every phase after it ending in -spin
#  (SHAPES=closedab,spin,closedab or closed,spin,closed measures with and without);
#  `grammar`: the same closed loop at GRAMMAR_LEVELS (48) where GRAMMAR_SHARE (0.1) of the requests carry a regex
#  (loads.py GRAMMAR_REGEX, or GRAMMAR_REGEX; SPEC_CONTROLLER_FAST_GRAMMAR=0 in the environment keeps grammar
#  batches on steps-0 to measure that fallback); `grcheck`: grammar-constrained outputs of the off engine
#  against the no-spec engine's and the forced sequence, greedy and sampled, in batches mixing grammar and plain
#  requests (grammar_check.py; rows in grammar.jsonl); either phase starts both engines with the xgrammar
#  backend (GRAMMAR_BACKEND, else none);
#  `lpcheck`: the off engine's output logprobs against the no-spec engine's (logprob_check.py); `penalty`: the
#  same for requests with frequency / presence / repetition penalties, min_new_tokens and a logit bias, sent in
#  lockstep groups, prompts on the crafted chain's short cycles (penalty_check.py; rows in logprob.jsonl); `greedy`:
#  greedy equality while switching every 5 ms; `closedfast`: the closed loop again with the kv writes switched
#  off at run time (label fast; `openfast`, `steadyfast` the same for those shapes); `closedpb`, `steadypb` (with
#  the kv writes coalesced (the default since 12-04b; COALESCE=N other counts): the same per batch, label perbatch); `closedkveager` (with KV_GRAPH=1, the default, the kv writes from CUDA graphs:
#  the same with them eager, label kveager); `closedab`: kv (label off) and fast in one rotation with the no-spec
#  engine (the daemon's engine switched before each run; with KV_GRAPH=1, the default, kveager in it too; `openab`
#  the same on the open loop; LEAN=1: the lean off step in that rotation instead, below); PIN_CPUS=1: each engine's process group and the load
#  client on a third of the physical cores each, the engines' sets equal, siblings together (cpusets.py, by PID; the two engines' sets swapped every repeat unless PIN_ROTATE=0); every run's row has cpu_s (both engines' process groups'
#  CPU seconds per process name, the host's busy share: proccpu.py); `closedpinned`: the closed loop
#  with the threshold pinned at PIN_T (8) (label pinned: lean prefills above 0); `profile`: the GPU kernels of a decode step at
#  PROFILE_BS (48) per engine (kernel_profile.py). Phases run in the order SHAPES names them, each only if
#  its time is left; OPEN_RATES (2,12,24); OFF_PATH sets the daemon's [sglang] off_path.
# KEEP_ENGINES=1: both engines stay up when the call ends; the next call on the same warm machine (within its 30 s idle
#  release) with the same start settings, scripts and code measures them again instead of starting them (~210-310 s
#  saved; bench/gpu/keep.sh; its summary says "engines reused"), where the last call ended normally and both
#  still answer. Give every call of such a chain KEEP_ENGINES=1 and the same start-time variables (B_FIRST, PIN_CPUS,
#  SPEC_CPROFILE_KINDS, ...); a call without it (or any other script) stops them. Their logs come back per call.
# FIT_REPEATS=1: an ab phase (closedab, openab, steadyab) that cannot fit REPEATS whole runs the repeats that fit (>= 1,
#  said in the summary), and the call starts if its first phase fits once (phases.sh fit_repeats).
# TWIN=1 (the A/A): instead of the daemon, a second engine WITHOUT speculation started as the daemon's is (second,
#  mem fraction 0.64, port 30000, timeline prefix off, pinned and rotated the same), label twin: twin / nospec is what
#  the harness reads for a second engine as fast as plain decoding (its median: the harness's own bias; its spread: the
#  noise a 0.97 verdict must clear). Only the phases that need no daemon: TWIN_PHASES.
# requests with a regex need a grammar backend in both engines (common.sh reads GRAMMAR_BACKEND)
case ",${SHAPES:-}," in *,grammar,*|*,grcheck,*) export GRAMMAR_BACKEND=${GRAMMAR_BACKEND:-xgrammar} ;; esac
# both engines' KV pools the same size (common.sh POOL_TOKENS: from 12-06 on; before, the second start's was larger):
# 230,000 tokens on an H200 (the smallest pool seen), 40,000 on a GPU under 100 GB (an H100: both fit beside each other)
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
export POOL_TOKENS=${POOL_TOKENS:-$([ "${gpu_mib:-0}" -gt 0 ] 2>/dev/null && [ "$gpu_mib" -lt 100000 ] && echo 40000 || echo 230000)}
KEEPS_ENGINES=1     # (KEEP_ENGINES=1 is honoured here only: keep.sh)
source bench/gpu/common.sh
MAXBS=128 ACC=natural
RUNS=$((2 * ${REPEATS:-2}))          # runs per level or rate: REPEATS (2) of each of the two engines
# KV_GRAPH (1, the plugin's default since 12-02e): the daemon's engine captures the kv writes as CUDA graphs
# (draftkv_graph.py); KV_GRAPH=0 starts it with them eager (and closedab / closedkveager then have no graphs)
KV_GRAPH=${KV_GRAPH:-1}; export SPEC_CONTROLLER_DRAFT_KV_GRAPH=$KV_GRAPH
# COALESCE=N: the daemon's engine coalesces the kv writes over N off batches (default 8 since 12-04b; 1: per batch)
[ -n "${COALESCE:-}" ] && export SPEC_CONTROLLER_DRAFT_KV_COALESCE=$COALESCE
# SIDE (1, the plugin's default since 12-03i): the daemon's engine replays the kv graphs on a side stream
# (draftkv_graph.SideStream); SIDE=0 starts it with them in line
SIDE=${SIDE:-1}; export SPEC_CONTROLLER_DRAFT_KV_SIDE=$SIDE
# ROTATION=resolve needs the hook, which an engine registers only when started with it (then switched per label)
case "${ROTATION:-}" in resolve|leanall) export SPEC_CONTROLLER_LEAN_RESOLVE=1 ;; esac
PB_OFF='{"spec_controller_draft_kv_coalesce": false}'; PB_ON='{"spec_controller_draft_kv_coalesce": true}'
KV_OFF='{"spec_controller_draft_kv": false}'; KV_ON='{"spec_controller_draft_kv": true}'
KV_GRAPH_ON='{"spec_controller_draft_kv": true, "spec_controller_draft_kv_graph": true}'
KV_GRAPH_OFF='{"spec_controller_draft_kv": true, "spec_controller_draft_kv_graph": false}'
# LEAN=1: steadyab / closedab / openab rotate the lean off step (plugin/offstubs.py) instead: off (kv graphs, lean
# off), lean (the same, lean on) and the no-spec engine; the engine is left lean afterwards (greedy, lpcheck then
# check the lean step; the engine starts lean anyway, the default). LEAN=2: off (neither the lean
# step nor SGLang 0.5.19's allocation loop, plugin/allocloop.py), leanalloc (both) and the no-spec engine.
KVG='"spec_controller_draft_kv": true, "spec_controller_draft_kv_graph": true'
LEAN_NO="{$KVG, \"spec_controller_lean_off\": false}"; LEAN_YES="{$KVG, \"spec_controller_lean_off\": true}"
BOTH_NO="{$KVG, \"spec_controller_lean_off\": false, \"spec_controller_alloc_loop\": false}"
LEANALLOC='"spec_controller_lean_off": true, "spec_controller_alloc_loop": true'    # the engine's defaults
BOTH_YES="{$KVG, $LEANALLOC}"; FAST_YES="{\"spec_controller_draft_kv\": false, $LEANALLOC}"
INLINE="{$KVG, $LEANALLOC, \"spec_controller_draft_kv_side\": false}"
SIDE_YES="{$KVG, $LEANALLOC, \"spec_controller_draft_kv_side\": true}"
# ROTATION=defer: the no-spec engine, the default state (off) and the same with the prompts' draft-KV writes held
# until the next decode's forward is queued (defer; spec_controller_defer_prompt_kv, plugin/promptkv.py).
# ROTATION=plain (with PLAIN=1): the no-spec engine, off batches on the fast path (off) and as SGLang's own
# non-speculative batches (plain; spec_controller_plain_off, plugin/plainoff.py) in the same engine: no start order
# between the two.
# ROTATION=resolve: the no-spec engine, the default state (off) and the same with the future map gathering only the
# bonus tokens of an off batch (resolve; spec_controller_lean_resolve, plugin/offresolve.py; status counts them).
# ROTATION=leanall: the no-spec engine, the default state (off) and the same with both of the above on (leanall: the
# lean resolve and the prompts' writes held; each measured alone within the spread in 12-04e/f).
# ROTATION=product: the product beside the engine a user compares against: the no-spec engine, the daemon pinned at
# MAXBS (label always: every batch speculates) and the daemon unpinned (label bandit: the bandit decides, learning
# from every batch of the call, the always runs' too, as on a server); the daemon pinned at 0 again after each phase.
# At the end of the call: the decisions ($OUT/history.json) and the daemon's database ($OUT/state.db.xz: which mode
# each run's batches took, bench/gpu/spec_share.py).
# ROTATION=pair: only the no-spec engine and the daemon's engine in its default state (kv graphs, lean step,
# allocation loop; label off): twice the runs per mode in the same time, for longer windows (12-03f: 5 s windows of
# 128 clients moved 12-39 % run to run). ROTATION=fast: the same plus that state without the kv writes (label fast).
# ROTATION=coalesce (the graphed writes gathered 8 (COALESCE) batches a replay, the default since 12-04b): the no-spec
# engine, the writes coalesced (label off) and the same per batch (label perbatch).
# ROTATION=side: the no-spec engine, the default state (label off: the kv replays on the side stream) and the same
# with them in line (label inline); the engine is left as it started afterwards (SIDE=0: in line). 12-03i's call 1
# ran it before side became the default: its labels were off (in line) and side.
# ROTATION=writes: the no-spec engine, the default state (off), the same without the kv writes (fast), with them in
# line (inline) and with each write its own replay (perbatch): which of the writes' switches gives back the GPU time the
# off engine's prefills (+15 %) and decode steps (+4 %) took at closed 128 on the H200 (12-07h), in one rotation.
ab_rotation() { # sets AB (loads.py --engines), NAB (states in it) and AB_RESTORE (the daemon's engine's state after)
  local dflt=$SIDE_YES; [ "$SIDE" = 1 ] || dflt=$INLINE
  one_key() { # label key restore: no-spec, the daemon's engine with run-time key false (off) and true (label)
    AB="nospec=30001;off=30000:{$KVG, $LEANALLOC, \"$2\": false};$1=30000:{$KVG, $LEANALLOC, \"$2\": true}"; NAB=3
    AB_RESTORE="{$KVG, $LEANALLOC, \"$2\": $3}"
  }
  if [ "${ROTATION:-}" = pair ]; then AB="nospec=30001;off=30000:$dflt"; NAB=2; AB_RESTORE=$dflt
  elif [ "${ROTATION:-}" = product ]; then   # '@': specctl commands to the daemon (loads.py --socket)
    AB="nospec=30001;always=30000:@threshold pin $MAXBS;bandit=30000:@threshold unpin"; NAB=3
    AB_RESTORE="@threshold pin 0"
  elif [ "${ROTATION:-}" = defer ]; then   # the default state, the same with the prompts' draft-KV writes held (promptkv)
    one_key defer spec_controller_defer_prompt_kv false
  elif [ "${ROTATION:-}" = resolve ]; then   # the default state, the same with the bonus tokens gathered alone (offresolve)
    one_key resolve spec_controller_lean_resolve false
  elif [ "${ROTATION:-}" = leanall ]; then   # the default state, the same with the lean resolve and the held prompts
    local none="\"spec_controller_lean_resolve\": false, \"spec_controller_defer_prompt_kv\": false"
    AB="nospec=30001;off=30000:{$KVG, $LEANALLOC, $none}"
    AB="$AB;leanall=30000:{$KVG, $LEANALLOC, \"spec_controller_lean_resolve\": true, \"spec_controller_defer_prompt_kv\": true}"
    NAB=3; AB_RESTORE="{$KVG, $LEANALLOC, $none}"
  elif [ "${ROTATION:-}" = plain ]; then   # (PLAIN=1) off batches on the fast path against SGLang's non-speculative ones
    one_key plain spec_controller_plain_off true
  elif [ "${ROTATION:-}" = side ]; then
    AB="nospec=30001;off=30000:$SIDE_YES;inline=30000:$INLINE"; NAB=3; AB_RESTORE=$dflt
  elif [ "${ROTATION:-}" = coalesce ]; then    # the writes coalesced (off), per batch, no-spec
    AB="nospec=30001;off=30000:{$KVG, $LEANALLOC, \"spec_controller_draft_kv_coalesce\": true}"
    AB="$AB;perbatch=30000:{$KVG, $LEANALLOC, \"spec_controller_draft_kv_coalesce\": false}"; NAB=3
    AB_RESTORE="{$KVG, $LEANALLOC, \"spec_controller_draft_kv_coalesce\": true}"
  elif [ "${ROTATION:-}" = writes ]; then   # the default state and each of its write switches undone, one at a time
    local sw='"spec_controller_draft_kv_side": true, "spec_controller_draft_kv_coalesce": true'    # every label names both
    AB="nospec=30001;off=30000:{$KVG, $LEANALLOC, $sw};fast=30000:{\"spec_controller_draft_kv\": false, $LEANALLOC, $sw}"
    AB="$AB;inline=30000:{$KVG, $LEANALLOC, ${sw/side\": true/side\": false}}"
    AB="$AB;perbatch=30000:{$KVG, $LEANALLOC, ${sw/coalesce\": true/coalesce\": false}}"; NAB=5
    AB_RESTORE="{$KVG, $LEANALLOC, $sw}"
  elif [ "${ROTATION:-}" = fast ]; then   # the default state, the same without the kv writes, the no-spec engine
    AB="nospec=30001;off=30000:$BOTH_YES;fast=30000:$FAST_YES"; NAB=3; AB_RESTORE=$BOTH_YES
  elif [ "${LEAN:-0}" = 2 ]; then AB="nospec=30001;off=30000:$BOTH_NO;leanalloc=30000:$BOTH_YES"; NAB=3; AB_RESTORE=$BOTH_YES
  elif [ "${LEAN:-0}" = 1 ]; then AB="nospec=30001;off=30000:$LEAN_NO;lean=30000:$LEAN_YES"; NAB=3; AB_RESTORE=$LEAN_YES
  elif [ "$KV_GRAPH" = 1 ]; then
    AB="nospec=30001;off=30000:$KV_GRAPH_ON;kveager=30000:$KV_GRAPH_OFF;fast=30000:$KV_OFF"; NAB=4; AB_RESTORE=$KV_GRAPH_ON
  else AB="nospec=30001;off=30000:$KV_ON;fast=30000:$KV_OFF"; NAB=3; AB_RESTORE=$KV_ON; fi
  AB=$(echo "$AB" | sed "s/\([a-z]*\)=3000/\1${SUFFIX:-}=3000/g")    # after phase gcfreeze: labels end in -gcf
}
restore_ab() { # the daemon's engine back to AB_RESTORE after an ab phase ('@...': a specctl command)
  if [ "${AB_RESTORE:0:1}" = @ ]; then specctl ${AB_RESTORE#@} | tee -a "$SUM"
  else internal_state 30000 "$AB_RESTORE" | tee -a "$SUM"; fi
}
engine_lines() { # pattern: lines matching it in both engines' logs so far
  cat "$LOGS/nospec.log" "$LOGS/$GROUP_B.log" | grep -c "$1"
}
wait_engine_lines() { # pattern count-before seconds: until both engines printed one more such line (each looks
  # at its flag files at its next flush, or within a second while idle)
  for _ in $(seq "$3"); do [ "$(engine_lines "$1")" -ge $(($2 + 2)) ] && return; sleep 1; done
}
load_as() { # label state-json restore-json need-s loads.py-args...: one load against the no-spec engine with the
  # daemon's engine switched to state (its rows labelled label), then back
  local label=$1 state=$2 restore=$3 need=$4; shift 4
  fits "$need" "$label $*" || return
  internal_state 30000 "$state" | tee -a "$SUM"
  load_sum "$@" --engines "nospec=30001,$label=30000" --repeats "${REPEATS:-2}" --flush --out "$R"
  internal_state 30000 "$restore" | tee -a "$SUM"; say "$label $2 done"
}
closed_as() { # label state-json restore-json: the closed loop with the daemon's engine switched to state, then back
  load_as "$1" "$2" "$3" "$(phase_need closed)" \
    --shape closed --levels "$CLOSED" --seconds "$CLOSED_S" --warmup "$CLOSED_WARMUP"
}
OPEN_S=${OPEN_S:-12}; SHAPES=${SHAPES:-open,closed,steady}   # SHAPES: the phases to run
CLOSED_S=${CLOSED_S:-4}; CLOSED_WARMUP=${CLOSED_WARMUP:-2}     # at C = 128 a request lives ~3-4 s: use >= 8 s of warm-up
CLOSED=${CLOSED_LEVELS:-1,16,48,128}; RATES=${OPEN_RATES:-2,12,24}
nlev=$(echo "$CLOSED" | tr ',' '\n' | wc -l); nrates=$(echo "$RATES" | tr ',' '\n' | wc -l)
phase_need() { # phase: the seconds it needs once both engines are up (what fits checks; 0: not reckoned here). open: 4
  # runs a rate (2 repeats, 2 engines) of OPEN_S + ~8 s; closed: 4 runs a level of CLOSED_WARMUP + CLOSED_S + ~3 s; the
  # ab phases: NAB labels (ab_rotation) a repeat
  case $1 in
    open) echo $((RUNS * nrates * (OPEN_S + 8))) ;;
    closed|closedpinned) echo $((RUNS * (CLOSED_WARMUP + CLOSED_S + 3) * nlev + 30)) ;;
    logprob|grammar) echo $((RUNS * (CLOSED_WARMUP + CLOSED_S + 3) + 30)) ;;
    closedab) ab_rotation; echo $((NAB * ${REPEATS:-2} * (CLOSED_WARMUP + CLOSED_S + 4) * nlev + 30)) ;;
    openab) ab_rotation; echo $((NAB * ${REPEATS:-2} * nrates * (OPEN_S + 8) + 30)) ;;
    steadyab) ab_rotation; echo $((NAB * ${REPEATS:-2} * 4 * 3 + 30)) ;;
    profile) echo 90 ;;
    greedy) echo $((70 + 50 * ${PLAIN:-0})) ;;
    syncdebug|grcheck|lpcheck|penalty) echo 60 ;;
    cprofile) echo 100 ;;                  # twice, the core sets swapped between
    warm) echo $((2 * (${WARM_S:-120} + 5))) ;;
    steady) echo 40 ;;
    gcfreeze|spin) echo 25 ;;
    calibrate) echo 15 ;;
    *) echo 0 ;;
  esac
}
# Before any engine starts: a call whose first phase cannot fit after the engines' start (ENGINES_UP_S: ~170 s on a
# warm machine, ~200-250 cold) would measure nothing (12-04e's call 2: 220 s of device time for "skip closedab").
TWIN_PHASES=" open closed steady calibrate spin cprofile syncdebug gcfreeze warm "
for phase in ${SHAPES//,/ }; do
  [ "${TWIN:-0}" = 1 ] && [ "${TWIN_PHASES/ $phase /}" = "$TWIN_PHASES" ] && {
    say "not started: TWIN=1 has no daemon for phase $phase (TWIN=1 runs:$TWIN_PHASES)"; exit 2; }
done
first=${SHAPES%%,*}; need=$( [ "${FIT_REPEATS:-0}" = 1 ] && REPEATS=1; phase_need "$first"); up=${ENGINES_UP_S:-200}
[ "${REUSE:-0}" = 1 ] && up=${ENGINES_UP_S:-20}    # engines a KEEP_ENGINES=1 call left up (keep.sh)
if [ $((need + up)) -gt "$DEADLINE" ]; then
  say "not started: $first needs $need s after the engines are up (~$up s, ENGINES_UP_S), DEADLINE_S is $DEADLINE"
  exit 2
fi
DEFAULT_SPIN='{"nospec": {"decode": 1000}}'        # us before each launch, per engine (timeline prefix) and batch kind
SPIN_JSON=${SPIN_DOSES:-$DEFAULT_SPIN}             # phase spin's doses, checked here: a bad one measures nothing
case ",$SHAPES," in *,spin,*)
  spin_engines=$(python3 bench/gpu/timeline.py --check-spin "$SPIN_JSON" 2>&1) \
    || { say "not started: $spin_engines"; exit 2; } ;;
esac
make_model $M --crafted $MODEL7B
timeline_plugin
export SPEC_SYNC_DEBUG=/tmp/tl/syncdebug.flag    # phase syncdebug creates it (timeline_plugin empties /tmp/tl)
export SPEC_CPROFILE=/tmp/tl/cprofile.flag        # phase cprofile creates it
export SPEC_GC_FREEZE=/tmp/tl/gcfreeze.flag       # phase gcfreeze creates it
export SPEC_CALIBRATE=/tmp/tl/calibrate.flag      # phase calibrate creates it
export SPEC_SPIN=/tmp/tl/spin.json                # phase spin writes it (SPIN_JSON)
rm -f "$SPEC_GC_FREEZE" "$SPEC_CALIBRATE" "$SPEC_SPIN"   # a warm machine keeps /tmp: never start frozen or spinning
B=off; GROUP_B=daemon     # the label of the engine beside the no-spec one; its process group and log ($LOGS/NAME.log)
[ "${TWIN:-0}" = 1 ] && B=twin GROUP_B=twin
start_b() { # the engine beside the no-spec one: the daemon (sglang engine + plugin), or with TWIN=1 a second no-spec
  # engine started as the daemon's is; sets DAEMON_PID (either way: the group that pins and CPU counts follow)
  if [ "$B" = twin ]; then start_server twin 30000 SPEC_CONTROLLER_PLAIN_OFF=0 -- --mem-fraction-static "$MEMFRAC" && DAEMON_PID=$SERVER_PID \
    && save_caches        # (as start_daemon does: a cold call's JIT caches for the next call to carry)
  else start_daemon; fi
}
pair_labels() { # PAIR: the two engines for the plain phases (open, closed, steady, logprob, grammar), their labels
  # ending in SUFFIX after a gcfreeze or spin phase as the ab rotations' do (dosed runs never share a label with undosed)
  PAIR=(--engines "nospec${SUFFIX:-}=30001,$B${SUFFIX:-}=30000" --repeats "${REPEATS:-2}" --flush --out "$R")
}
pair_labels

beside="off path ${OFF_PATH:-default}"; [ "$B" = twin ] && beside="beside it a twin without speculation (TWIN=1)"
# PLAIN=1: the daemon's engine runs its off batches as SGLang's non-speculative batches (plugin/plainoff.py; a start-time
# switch); MEMCHECK=1: its scheduler checks the KV pool for leaks after every batch (SGLang's strict busy check and its
# page invariants: slower, for correctness calls only)
[ "${PLAIN:-0}" = 1 ] && { export SPEC_CONTROLLER_PLAIN_OFF=1; beside="$beside, off batches as plain batches (PLAIN=1)"; }
[ "${ROTATION:-}" = plain ] && [ "${PLAIN:-0}" != 1 ] && { say "not started: ROTATION=plain needs PLAIN=1 (the plain \
batches' hooks are registered at start only)"; exit 2; }
[ "${MEMCHECK:-0}" = 1 ] && { export SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY=1 SGLANG_CHECK_KV_PAGE_INVARIANTS=1
  beside="$beside, KV leak checks after every batch (MEMCHECK=1)"; }
say "prefill graphs $PREFILL_GRAPH, $beside, grammar backend $GRAMMAR_BACKEND, sleep on idle $SLEEP_ON_IDLE, KV pools ${POOL_TOKENS/#0/as sized} tokens, steady $([ "${LOAD_STEADY_BATCHED:-1}" != 0 ] && echo "batched (one /generate)" || echo "one request each")"
# B_FIRST=1: the engine beside no-spec starts first (0.34) and no-spec second (0.64, of which its own share ~0.30),
# the same pools the other way round: whether a per-op CPU excess follows the engine or the second start (12-04i:
# the second-started engine's prefills ran +9-16 % CPU for the same code, the A/A's twin too)
start_nospec() { start_server nospec 30001 SPEC_TIMELINE=/tmp/tl/nospec SPEC_CONTROLLER_PLAIN_OFF=0 -- \
  --mem-fraction-static "$1" && NOSPEC_PID=$SERVER_PID; }
start_engines() { # both engines in the order B_FIRST says; exits when no-spec cannot start, fails when B did not
  export SPEC_TIMELINE=/tmp/tl/off     # the daemon's SGLang child inherits the timeline prefix
  if [ "${B_FIRST:-0}" = 1 ]; then
    say "started first: $B (B_FIRST=1)"; export MEMFRAC=0.34 LOAD_B_FIRST=1    # (loads.py's rows say b_first)
    local b_up=0; start_b && b_up=1
    start_nospec 0.64 || exit 1
    [ "$b_up" = 1 ]
  else
    start_nospec 0.30 || exit 1
    export MEMFRAC=0.64; start_b
  fi
}
engines_up() { # reused or started; with KEEP_ENGINES=1 recorded for the next call, and each log's length now (this
  # call brings back its own part)
  { [ "$REUSE" = 1 ] && reuse_engines; } || start_engines || return
  [ "$KEEP" = 1 ] && { echo "$NOSPEC_PID $DAEMON_PID" >$KEEP_DIR/pids; echo "$KEEP_SIG" >$KEEP_DIR/signature; }
  declare -gA LOG_FROM; for f in nospec $GROUP_B; do LOG_FROM[$f]=$(log_offset "$LOGS/$f.log"); done
  [ "$REUSE" = 1 ] || LOG_FROM=([nospec]=0 [$GROUP_B]=0)
}
source bench/gpu/phases.sh    # run_phase (each phase of SHAPES)
follow_logs
if engines_up; then
  [ "$B" = off ] && { specctl status 2>&1 | grep -E "off path|engine|sglang" | tee -a "$SUM"
    specctl threshold pin 0 | tee -a "$SUM"; }
  # every run's row: both groups' CPU seconds per process name and the host's busy share (proccpu.py)
  export LOAD_CPU_GROUPS="nospec=$NOSPEC_PID,$GROUP_B=$DAEMON_PID"
  CLIENT=""
  if [ "${PIN_CPUS:-0}" = 1 ]; then   # whole physical cores each (cpusets.py): no-spec engine, daemon + its engine, client
    mapfile -t SETS < <(python3 bench/gpu/cpusets.py 3 2>>"$SUM" || true)
    if [ ${#SETS[@]} -eq 3 ]; then
      pa=$(pin_group $NOSPEC_PID "${SETS[0]}"); pb=$(pin_group $DAEMON_PID "${SETS[1]}")
      say "pinned: nospec $pa threads on ${SETS[0]}, $GROUP_B $pb on ${SETS[1]}, client ${SETS[2]}"
      CLIENT="taskset -c ${SETS[2]}"
      # PIN_ROTATE=0 keeps these pins for the whole call; else loads.py swaps the two engines' core sets every
      # repeat (12-04c: the daemon's engine on one set for a whole call was slow in 4 of 6 runs, no-spec in none)
      if [ "$pa" = FAILED ] || [ "$pb" = FAILED ]; then say "pins not rotated: an engine could not be pinned"
      elif [ "${PIN_ROTATE:-1}" != 0 ]; then
        export LOAD_PIN_ROTATE="nospec=$NOSPEC_PID:${SETS[0]};$GROUP_B=$DAEMON_PID:${SETS[1]}"; fi
    else say "not pinned: cpusets.py gave ${#SETS[@]} sets (its line above says why)"; fi
  fi
  # where each engine's memory is (resident, huge pages, NUMA nodes): pins move threads, not pages (procmem.py)
  python3 bench/gpu/procmem.py "$LOAD_CPU_GROUPS" 2>&1 | sed 's/^/memory: /' | tee -a "$SUM"
  # each engine's KV pool as SGLang sized it (POOL_TOKENS caps both: equal unless one had less memory left)
  say "KV pools as started: $(for f in nospec $GROUP_B; do echo -n "$f $(grep -o 'max_total_num_tokens=[0-9]*' \
    "$LOGS/$f.log" | head -1 | cut -d= -f2); "; done)"
  n0=$([ -f "$R" ] && wc -l <"$R" || echo 0)
  # the phases in the order SHAPES names them, each only if its time is left (phase_need)
  for phase in ${SHAPES//,/ }; do
    run_phase "$phase"
  done
  # a TIMELINE line per open and closed run (open: after 3 s; closed: their window); TIMELINE=0: none
  [ "${TIMELINE:-1}" != 0 ] && [ -s "$R" ] && timeline_lines "$n0" 3 "$OPEN_S" "$CLOSED_WARMUP" "$CLOSED_S"
  python3 bench/gpu/procmem.py "$LOAD_CPU_GROUPS" 2>&1 | sed 's/^/memory at the end: /' | tee -a "$SUM"
  if [ "$B" = off ]; then specctl status 2>&1 | grep -E "off path|plugin cost|off launch|samples" | tee -a "$SUM"
    # the plain mode's engagement and anything that went wrong in the daemon's engine (in this call)
    call_log $GROUP_B | grep -E "non-speculative batches|plain off|Leak|Traceback|Error" | head -8 | cut -c1-300 | tee -a "$SUM"
  fi
  if [ "${ROTATION:-}" = product ] && [ "$B" = off ]; then   # the bandit's decisions and samples of the call
    specctl history --limit 5000 --json >"$OUT/history.json" 2>/dev/null; save_db
    python3 bench/gpu/spec_share.py "$R" "$SC/state.db" --warmup "$CLOSED_WARMUP" --seconds "$CLOSED_S" | tee -a "$SUM"
  fi
  if [ "$KEEP" = 1 ]; then    # left up for the next call, which may reuse them: every phase put back its state
    touch $KEEP_DIR/clean
    say "engines kept up (KEEP_ENGINES=1): nospec group $NOSPEC_PID, $GROUP_B group $DAEMON_PID"
  else
    if [ "$B" = off ]; then stop_daemon; else SERVER_PID=$DAEMON_PID; stop_server; fi
    SERVER_PID=$NOSPEC_PID; stop_server
  fi
elif [ -n "${NOSPEC_PID:-}" ]; then SERVER_PID=$NOSPEC_PID; stop_server
fi
[ ${#FOLLOWERS[@]} -gt 0 ] && { sleep 1; kill "${FOLLOWERS[@]}" 2>/dev/null; }    # (their last lines written)
unset SPEC_TIMELINE
if [ -s "$R" ]; then python3 bench/gpu/loads.py --show "$R" | tee -a "$SUM"; else say "no run measured: no tables"; fi
# steady runs whose client wall ran past their engine's window (the HTTP front end stalled, not the engine's steps)
[ -s "$R" ] && [ -s "$OUT/timeline.jsonl" ] && python3 bench/gpu/frontend.py "$R" "$OUT/timeline.jsonl" | tee -a "$SUM"
# the systematic part, pair by pair (the decode interval; tok/s moves with the extends' launch speed run to run)
[ -s "$OUT/timeline.jsonl" ] && python3 bench/gpu/timeline_summary.py "$OUT/timeline.jsonl" --pairs | tee -a "$SUM"
# what a decode batch costs each engine: the launch CPU before the target's forward, the launch, the result processing
[ -s "$OUT/timeline.jsonl" ] && python3 bench/gpu/timeline_summary.py "$OUT/timeline.jsonl" --decode-cost | tee -a "$SUM"
# each label at equal host speed (the extends' target CPU as the host's speed, fitted over the call's runs; with
# earlier calls' timelines it narrows further: host_adjusted.py A B ...)
[ -s "$OUT/timeline.jsonl" ] && python3 bench/gpu/host_adjusted.py "$OUT/timeline.jsonl" 2>&1 | tee -a "$SUM"
say "total $(($(date +%s) - T0)) s"
