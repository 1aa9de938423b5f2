# shellcheck shell=bash
# run_pair.sh's phases (sourced by it): run_phase NAME runs one phase of SHAPES with the engines up, if its time is
# left (phase_need, in run_pair.sh); what each measures: run_pair.sh's head.
fit_repeats() { # phase: with FIT_REPEATS=1, an ab phase that cannot fit REPEATS whole runs the repeats that fit (at
  # least 1; REPEATS is run_phase's local): a cold call whose engines took longer than planned (12-05d: 295 s on an
  # H100) still measures
  [ "${FIT_REPEATS:-0}" = 1 ] || return 0
  local want=${REPEATS:-2} need per fit
  need=$(phase_need "$1"); [ "$(left)" -gt "$need" ] && return 0
  per=$(( (need - 30) / want )); fit=$(( ($(left) - 31) / per ))
  [ "$fit" -ge 1 ] && [ "$fit" -lt "$want" ] || return 0
  REPEATS=$fit; say "$1: $want repeats need $need s, $(left) left: $fit repeats (FIT_REPEATS=1)"
}
run_phase() {
  local phase=$1 REPEATS=${REPEATS:-2}
    case $phase in
    open) fits "$(phase_need open)" open || return 0
      load_sum --shape open --rates "$RATES" --seconds "$OPEN_S" --tokenizer $TOK "${PAIR[@]}"; say "open done" ;;
    closed) fits "$(phase_need closed)" closed || return 0
      load_sum --shape closed --levels "$CLOSED" --seconds "$CLOSED_S" --warmup "$CLOSED_WARMUP" "${PAIR[@]}"
      say "closed done" ;;
    warm)      # both engines under the closed loop at 128 clients for WARM_S (120) s each, nothing recorded: the phases
      # after it measure engines that have served a while (12-05c: one pair's closed 128 read 0.90, 0.93, 0.98 at 0-20
      # minutes; bench/gpu/age_trend.py)
      fits "$(phase_need warm)" warm || return 0
      load_sum --shape closed --levels 128 --seconds "${WARM_S:-120}" --warmup 0 --engines "nospec=30001,$B=30000" \
        --repeats 1 --out /tmp/tl/warm.jsonl
      say "warm done (${WARM_S:-120} s each)" ;;
    closedfast)  # the same closed loop with the kv writes switched off at run time (label "fast"): what kv costs
      closed_as fast "$KV_OFF" "$KV_ON" ;;
    closedab)    # kv (label off) and the writes switched off (label fast) in ONE rotation with the no-spec engine,
      # switched before each run, so that the host's drift between phases (12-02b) cannot decide kv against fast
      # with KV_GRAPH=1 a fourth in the rotation: the writes eager (label kveager), each state set in full
      ab_rotation; fit_repeats closedab
      fits "$(phase_need closedab)" closedab || return 0
      load_sum --shape closed --levels "$CLOSED" --seconds "$CLOSED_S" --warmup "$CLOSED_WARMUP" \
        --engines "$AB" --socket $SC/ctl.sock --repeats "${REPEATS:-2}" --flush --out "$R"
      restore_ab
      say "closedab done" ;;
    openab)      # the same rotation on the open loop (Poisson arrivals at OPEN_RATES)
      ab_rotation; fit_repeats openab
      fits "$(phase_need openab)" openab || return 0
      load_sum --shape open --rates "$RATES" --seconds "$OPEN_S" --tokenizer $TOK \
        --engines "$AB" --socket $SC/ctl.sock --repeats "${REPEATS:-2}" --flush --out "$R"
      restore_ab
      say "openab done" ;;
    steadyab)    # closedab's rotation on steady decode: graphs / eager / no writes against no-spec, one engine switched
      ab_rotation; fit_repeats steadyab
      fits "$(phase_need steadyab)" steadyab || return 0
      load_sum --shape steady --levels 1,16,48,128 --steady-len 192 --engines "$AB" --socket $SC/ctl.sock --repeats "${REPEATS:-2}" --flush --out "$R"
      restore_ab
      say "steadyab done" ;;
    openfast)    # the same for the open loop and steady decode (item 3's trade-off on every load shape)
      load_as fast "$KV_OFF" "$KV_ON" $((RUNS * nrates * (OPEN_S + 8))) \
        --shape open --rates "$RATES" --seconds "$OPEN_S" --tokenizer $TOK ;;
    steadyfast) load_as fast "$KV_OFF" "$KV_ON" 40 --shape steady --levels 1,16,48,128 --steady-len 192 ;;
    closedpb)   # the same closed loop / steady decode with the kv writes per batch (label perbatch)
      kv_coalesced || { say "skip closedpb (the writes are not coalesced: nothing to compare)"; return 0; }
      closed_as perbatch "$PB_OFF" "$PB_ON" ;;
    steadypb) kv_coalesced || { say "skip steadypb (the writes are not coalesced: nothing to compare)"; return 0; }
      load_as perbatch "$PB_OFF" "$PB_ON" 40 --shape steady --levels 1,16,48,128 --steady-len 192 ;;
    closedkveager)  # with KV_GRAPH=1 (the kv writes from CUDA graphs): the same with them eager (label "kveager")
      closed_as kveager '{"spec_controller_draft_kv_graph": false}' '{"spec_controller_draft_kv_graph": true}' ;;
    closedpinned)  # the closed loop with the threshold pinned at PIN_T (8), label pinned: batches above it run off,
      # and with kv their prefills skip the draft's pass (contract.prefill_skips_draft); status counts the lean prefills
      fits "$(phase_need closedpinned)" closedpinned || return 0
      specctl threshold pin "${PIN_T:-8}" | tee -a "$SUM"
      load_sum --shape closed --levels "$CLOSED" --seconds "$CLOSED_S" --warmup "$CLOSED_WARMUP" \
        --engines nospec=30001,pinned=30000 --repeats "${REPEATS:-2}" --flush --out "$R"
      specctl status 2>&1 | grep -E "off path" | tee -a "$SUM"
      specctl threshold pin 0 | tee -a "$SUM"; say "closedpinned done" ;;
    profile)   # issue 12 item 1: the kernels of a steady decode step at PROFILE_BS, no-spec vs kv vs fast (kernel_profile.py)
      fits "$(phase_need profile)" profile || return 0
      python3 bench/gpu/kernel_profile.py --engines nospec=30001,off=30000 --batch "${PROFILE_BS:-48}" --out "$OUT" \
        2>&1 | cut -c1-900 | tee -a "$SUM"
      internal_state 30000 '{"spec_controller_draft_kv": false}' >/dev/null
      python3 bench/gpu/kernel_profile.py --engines fast=30000 --batch "${PROFILE_BS:-48}" --out "$OUT" \
        2>&1 | cut -c1-900 | tee -a "$SUM"
      internal_state 30000 '{"spec_controller_draft_kv": true}' | tee -a "$SUM"; say "profile done" ;;
    logprob)   # issue 12 item 4: a share of the requests ask for logprobs; status says how many off batches fell back
      fits "$(phase_need logprob)" logprob || return 0
      load_sum --shape closed --levels "${LOGPROB_LEVELS:-48}" --logprob-share "${LOGPROB_SHARE:-0.1}" \
        --seconds "$CLOSED_S" --warmup "$CLOSED_WARMUP" "${PAIR[@]}"
      specctl status 2>&1 | grep -E "off path" | tee -a "$SUM"; say "logprob done" ;;
    syncdebug) # where the scheduler thread waits on the GPU: torch's sync debug mode switched on in both engines
      # (timeline.py, once the flag file exists), a short closed loop on each, the call sites into $OUT/syncs.txt
      fits "$(phase_need syncdebug)" syncdebug || return 0
      touch "$SPEC_SYNC_DEBUG"
      load_sum --shape closed --levels "${SYNC_LEVELS:-16}" --seconds 3 --warmup 2 \
        --engines nospec=30001,$B=30000 --repeats 1 --out /tmp/tl/syncdebug.jsonl
      for f in nospec $GROUP_B; do echo "== $f"; call_log $f | grep -A14 "^SYNC" | cut -c1-240; done >"$OUT/syncs.txt"
      for f in nospec $GROUP_B; do echo "$f: $(call_log $f | grep -c "^SYNC pid")"; done | tee -a "$SUM"
      rm -f "$SPEC_SYNC_DEBUG"; say "syncdebug done (switched off at each engine's next flush)" ;;
    cprofile)  # where the decode launch's CPU goes: cProfile around each decode batch's run_batch in both engines
      # (timeline.py; SPEC_CPROFILE_KINDS=extend for the prefills' instead) under a closed loop at CPROFILE_LEVELS
      # (128), the top functions by own time into $OUT/cprofile.txt. Twice, the engines' core sets swapped between
      # (loads.py --repeat-index; with PIN_CPUS=1): a factor that follows the engine is its process, one that flips
      # with the swap is the cores (each profile alone could not tell: 12-04i, 12-05c ran the off engine on one set)
      fits "$(phase_need cprofile)" cprofile || return 0
      : >"$OUT/cprofile.txt"
      for rep in 0 1; do
        touch "$SPEC_CPROFILE"
        load_sum --shape closed --levels "${CPROFILE_LEVELS:-128}" --seconds 4 --warmup 3 \
          --engines nospec=30001,$B=30000 --repeats 1 --repeat-index "$rep" --out /tmp/tl/cprofile.jsonl
        printed=$(engine_lines '^CPROFILE pid')
        rm -f "$SPEC_CPROFILE"; wait_engine_lines '^CPROFILE pid' "$printed" 30    # each prints its stats then
        mkdir -p "/tmp/tl/rep$rep"; mv /tmp/tl/*.prof "/tmp/tl/rep$rep/" 2>/dev/null
        sets=$(tail -1 /tmp/tl/cprofile.jsonl | python3 -c "import sys, json; print(json.load(sys.stdin).get('cpus_by_group', {}))" 2>/dev/null)
        # uniform slowdown (the process or its host) or a few functions (a code path)? bench/gpu/prof_compare.py
        for prof in /tmp/tl/rep$rep/off.*.prof; do     # (the engine beside no-spec writes under /tmp/tl/off, the twin too)
          [ -e "$prof" ] || continue
          { echo "== prof_compare nospec $B, profile $((rep + 1)) of 2, core sets $sets"
            python3 bench/gpu/prof_compare.py "$(ls /tmp/tl/rep$rep/nospec.*.prof | head -1)" "$prof" 2>&1; } \
            | tee -a "$OUT/cprofile.txt" | grep -E "^(==|per-call|excess|verdict)" | tee -a "$SUM"
        done
      done
      # both pairs together: the engine's own factor (follows it onto either set) against the cores' (prof_compare --swapped)
      profs=(/tmp/tl/rep0/nospec.*.prof /tmp/tl/rep0/off.*.prof /tmp/tl/rep1/nospec.*.prof /tmp/tl/rep1/off.*.prof)
      [ ${#profs[@]} = 4 ] && [ -e "${profs[0]}" ] && [ -e "${profs[1]}" ] && [ -e "${profs[2]}" ] && [ -e "${profs[3]}" ] \
        && python3 bench/gpu/prof_compare.py "${profs[0]}" "${profs[1]}" --swapped "${profs[2]}" "${profs[3]}" 2>&1 \
        | tee -a "$OUT/cprofile.txt" | tee -a "$SUM"
      for f in nospec $GROUP_B; do echo "== $f"; call_log $f | grep "^CPROFILE" | cut -c1-220; done >>"$OUT/cprofile.txt"
      # whole stats (callers, cumulative times: python3 -m pstats), one file: a call brings back 8 files at most
      (cd /tmp/tl && tar cJf "$OUT/cprofile-stats.tar.xz" rep0 rep1 2>/dev/null && rm -rf rep0 rep1)
      say "cprofile done ($(grep -c 'CPROFILE pid' "$OUT/cprofile.txt") profiles)" ;;
    calibrate) # the same pure-Python loop timed in both idle schedulers, once a second for 6 s (timeline.py): one
      # engine's process slower as a whole (12-03f: its extends' model runner +2.4 ms with no code to explain it)
      fits "$(phase_need calibrate)" calibrate || return 0
      declare -A seen procs; for f in nospec $GROUP_B; do seen[$f]=$(grep -c '^CALIBRATE' "$LOGS/$f.log")
        procs[$f]=$(grep -c '^PROC' "$LOGS/$f.log"); done
      touch "$SPEC_CALIBRATE"; sleep 6; rm -f "$SPEC_CALIBRATE"
      # the host's cores (sibling threads together): a slow look's cpu against its neighbours' (procspeed.py)
      { python3 bench/gpu/cpusets.py 1 2>&1 >/dev/null || true; } | sed 's/^/calibrate host: /' | tee -a "$SUM"
      for f in nospec $GROUP_B; do     # this phase's lines only (it may run twice: before and after gcfreeze)
        echo "calibrate $f${SUFFIX:-}: $(grep '^CALIBRATE' "$LOGS/$f.log" | tail -n +$((seen[$f] + 1)) \
          | python3 bench/gpu/procspeed.py) us (every look)"
        echo "proc $f${SUFFIX:-}: $(grep '^PROC' "$LOGS/$f.log" | tail -n +$((procs[$f] + 1)) | tail -1 | cut -c1-900)"
      done | tee -a "$SUM" ;;
    gcfreeze)  # both engines' scheduler processes frozen out of garbage collection (timeline.py, gc.freeze) for the
      # phases after it, which label their rows NAME-gcf (SHAPES=openab,gcfreeze,openab: both ways, one call)
      fits "$(phase_need gcfreeze)" gcfreeze || return 0
      frozen=$(engine_lines '^GCFREEZE pid [0-9]* on')
      touch "$SPEC_GC_FREEZE"; SUFFIX=-gcf; pair_labels; wait_engine_lines '^GCFREEZE pid [0-9]* on' "$frozen" 20
      say "gcfreeze: $({ call_log nospec; call_log $GROUP_B; } | grep '^GCFREEZE' | cut -c1-100 | tr '\n' ';')" ;;
    spin)      # CPU spun on the scheduler thread before each launch of the kinds SPIN_DOSES names, per engine (timeline.py
      # SPEC_SPIN), for the phases after it, which label their rows NAME-spin: the no-spec engine given the
      # off engine's extra decode-launch CPU (12-04f: ~0.6 ms) says whether that CPU is the closed-128 gap. Labels
      # change only once every engine named confirmed the dose ("SPIN pid" lines; idle engines look once a second)
      fits "$(phase_need spin)" spin || return 0
      spun=$(engine_lines '^SPIN pid')
      echo "$SPIN_JSON" >"$SPEC_SPIN.tmp" && mv "$SPEC_SPIN.tmp" "$SPEC_SPIN"
      wait_engine_lines '^SPIN pid' $((spun + spin_engines - 2)) 20
      got=$(($(engine_lines '^SPIN pid') - spun))
      if [ "$got" -lt "$spin_engines" ]; then
        rm -f "$SPEC_SPIN"; say "spin: $got of $spin_engines engine(s) confirmed $SPIN_JSON in 20 s: dose removed, labels unchanged"
        return 0
      fi
      SUFFIX=-spin; pair_labels
      say "spin $SPIN_JSON: $(cat "$LOGS/nospec.log" "$LOGS/$GROUP_B.log" | grep '^SPIN pid' | tail -"$got" | tr '\n' ';')" ;;
    grammar)   # issue 12 item 4: a share of the requests carry a regex; status says how many off batches fell back
      fits "$(phase_need grammar)" grammar || return 0
      load_sum --shape closed --levels "${GRAMMAR_LEVELS:-48}" --grammar-share "${GRAMMAR_SHARE:-0.1}" \
        ${GRAMMAR_REGEX:+--grammar-regex "$GRAMMAR_REGEX"} --seconds "$CLOSED_S" --warmup "$CLOSED_WARMUP" "${PAIR[@]}"
      specctl status 2>&1 | grep -E "off path" | tee -a "$SUM"; say "grammar done" ;;
    grcheck)   # grammar-constrained outputs: the off engine against the no-spec engine and the forced sequence;
      # GRCHECK_ARGS=--no-logprobs: no request asks for logprobs, so that the off batches may take the lean step
      # (a batch holding one logprob request does not; the status lines before and after count the lean ones)
      fits "$(phase_need grcheck)" grcheck || return 0
      specctl status 2>&1 | grep -E "off path" | sed 's/^/before grcheck: /' | tee -a "$SUM"
      python3 bench/gpu/grammar_check.py --port-a 30001 --port-b 30000 --chain $M/target/next.json --prompts 48 \
        --concurrency 16 --output-len 64 --temperatures 0,0.8 ${GRCHECK_ARGS:-} --out "$OUT/grammar.jsonl" 2>&1 \
        | grep -E "GRAMMAR|Error|MALFORMED" | cut -c1-500 | tee -a "$SUM"
      specctl status 2>&1 | grep -E "off path" | tee -a "$SUM"; say "grcheck done" ;;
    lpcheck)   # the off engine's output logprobs against the no-spec engine's, greedy and sampled
      fits "$(phase_need lpcheck)" lpcheck || return 0
      python3 bench/gpu/logprob_check.py --port-a 30001 --port-b 30000 --prompts 64 --concurrency 16 \
        --output-len 64 --temperatures 0,0.8 --out "$OUT/logprob.jsonl" 2>&1 | grep -E "LOGPROB|Error|Malformed" | cut -c1-400 | tee -a "$SUM" ;;
    penalty)   # sampling penalties on the off engine against the no-spec engine, greedy and sampled (exit 3: no effect)
      fits "$(phase_need penalty)" penalty || return 0
      python3 bench/gpu/penalty_check.py --port-a 30001 --port-b 30000 --chain $M/target/next.json --prompts 48 \
        --batch 16 --output-len 64 --temperatures 0,0.8 --out "$OUT/logprob.jsonl" 2>&1 \
        | grep -E "PENALTY|Error|MALFORMED" | cut -c1-400 | tee -a "$SUM"; say "penalty done" ;;
    greedy)    # issue 12 item 5: outputs identical to the crafted chain while the threshold flips 0 <-> MAXBS every 5 ms
      fits "$(phase_need greedy)" greedy || return 0
      GREEDY=(--prompts 200 --concurrency 32 --input-len 32 --output-len 96 --output-len-min 16 --chain $M/target/next.json)
      [ "${PLAIN:-0}" = 1 ] && greedy 30000 "never-${OFF_PATH:-default}-plain" "${GREEDY[@]}"   # pinned 0: every decode off
      greedy 30000 "switching-${OFF_PATH:-default}" "${GREEDY[@]}" --toggle 0,$MAXBS --toggle-ms 5
      internal_state 30000 '{"speculative_disable_batch_threshold": 0}' >/dev/null; specctl threshold pin 0 >/dev/null ;;
    steady) fits "$(phase_need steady)" steady || return 0
      load_sum --shape steady --levels 1,16,48,128 --steady-len 192 "${PAIR[@]}"; say "steady done" ;;
    *) say "unknown phase $phase" ;;
    esac
}
