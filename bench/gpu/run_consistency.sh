#!/bin/bash
# Issue 12 item 3, one device call: does a request that lives through off -> on draft exactly as one that was
# always on?   DEADLINE_S=480 bash bench/gpu/run_consistency.sh          (carry .whl, .jitcache)
# Model: the crafted 7.2B target + an EAGLE3 head whose first draft token is right only if its own KV 64
# positions back is consistent (mkmodel.py --lookback 64): a draft KV left stale while off shows as other
# proposals and shorter accepts for ~64 positions after speculation resumes.
# One engine (plugin + the proposals recorder bench/gpu/proposals.py, radix cache off so that no prompt's KV
# is shared across modes), batch size 1, 12 prompts of 160 tokens, 320 new tokens: `always` (and `always1`,
# the same one position later), then per prompt the off -> on modes (threshold 0 for the first 128 tokens,
# then every batch speculates), prefills always running the draft (lean prefill off):
#   fast:   off batches skip the draft (its KV for the off positions is never written)
#   kv:     spec_controller_draft_kv (the plugin's draft-KV mode)
#   synced: spec_controller_sync_draft (the draft's 1-token extend on every off batch)
# CONSIST lines + a table in the summary; consistency.json, the recorder's rows, the server log in $OUT.
MAXBS=${MAXBS:-32}    # batch size 1 only: fewer CUDA graphs to capture (set before common.sh reads it)
source bench/gpu/common.sh
make_model $M --crafted --lookback 64 $MODEL7B
proposals_plugin
# The look-back draft's later steps are ambiguous (lookback_draft.py): one draft step, 2 draft tokens;
# STEPS=3 gives run_offpath_traffic.sh's flags (3 steps, 4 draft tokens, candidate steps {0, 3}).
K=${STEPS:-1}
SPECK=(--speculative-algorithm EAGLE3 --speculative-draft-model-path $M/eagle3 --speculative-num-steps "$K"
  --speculative-eagle-topk 1 --speculative-num-draft-tokens $((K + 1)))
echo "{\"1\": {\"candidate_steps\": [0, $K]}}" >$SC/adaptive.json
KEEP='"spec_controller_lean_prefill": false'
FAST="fast={\"spec_controller_sync_draft\": false, \"spec_controller_draft_kv\": false, $KEEP}"
# kv loses its first on-step to the stub (accept 1), synced does not: the references verify at odd positions
# from 223 on (both always and always1 accept 2 from there), so kv switches one token later than the others
# (off_tokens, the driver's own key) to land its later steps on them (12-02: all 480 on the other parity)
KV="kv={\"spec_controller_sync_draft\": false, \"spec_controller_draft_kv\": true, \"spec_controller_draft_kv_side\": false, \"off_tokens\": 129, $KEEP}"
# the kv mode coalesces its graphed writes (8 a replay, the default since 12-04b; SPEC_CONTROLLER_DRAFT_KV_COALESCE=N
# other counts, =0 or 1 none: then no kvpb); kvpb: the same per batch
# (a mode's switches stay set for the modes after it: the lean kv mode sets the coalescing back on)
KVPB=(); CO=""; kv_coalesced && CO='"spec_controller_draft_kv_coalesce": true, ' && KVPB=(--offon "kvpb={\"spec_controller_sync_draft\": false, \"spec_controller_draft_kv\": true, \"spec_controller_draft_kv_coalesce\": false, \"off_tokens\": 129, $KEEP}")
# SIDE=1: kvside, the kv mode with its graphs replayed on a side stream (draftkv_graph.SideStream, the default since
# 12-03i; kv sets it off), after kv (and kvpb: coalesced again when kv is); it stays set, so the lean modes below
# write from the side stream too
KVSIDE=(); [ "${SIDE:-0}" = 1 ] && KVSIDE=(--offon "kvside={\"spec_controller_sync_draft\": false, \"spec_controller_draft_kv\": true, \"spec_controller_draft_kv_side\": true, $CO\"off_tokens\": 129, $KEEP}")
# CHURN=N (with POOL=T): N short requests in flight beside every measured one, on an engine whose KV pool holds T
# tokens (--max-total-tokens): slots freed by the finished ones come back within a few batches, while the coalesced
# writes still hold their rows (the dedupe; draft_consistency.py --churn). ~T = 520 for CHURN=4 (the measured
# request's 480 tokens fit; while off ~400 are in use, so the free list turns over in ~7 batches): an estimate,
# not yet run on a GPU.
CHURNED=(); [ "${CHURN:-0}" -gt 0 ] && CHURNED=(--churn "$CHURN")
POOLED=(); [ -n "${POOL:-}" ] && POOLED=(--max-total-tokens "$POOL")
SYNCED="synced={\"spec_controller_sync_draft\": true, \"spec_controller_draft_kv\": false, $KEEP}"

if start_server spec 30000 SPEC_PROPOSALS=/tmp/pp/spec SPEC_CONTROLLER_INITIAL_THRESHOLD=0 \
    SPEC_CONTROLLER_DRAFT_KV=1 SPEC_CONTROLLER_SYNC_DRAFT=1 -- "${SPECK[@]}" \
    --speculative-adaptive --speculative-adaptive-config $SC/adaptive.json --disable-radix-cache "${POOLED[@]}"; then
  save_caches
  say "draft steps $K, adaptive $(cat $SC/adaptive.json), kv writes coalesced over ${SPEC_CONTROLLER_DRAFT_KV_COALESCE:-8} batch(es), churn ${CHURN:-0}, pool ${POOL:-default}"
  grep -E "spec-controller|spec_proposals|Traceback" $OUT/spec.log | head -6 | cut -c1-300 | tee -a "$SUM"
  [ "$(left)" -lt 120 ] && say "only $(left) s left: fewer prompts than asked"
  timeout $(($(left) > 60 ? $(left) - 25 : 35)) python3 bench/gpu/draft_consistency.py --port 30000 \
    --pp /tmp/pp/spec --maxbs $MAXBS --prompts "${PROMPTS:-10}" --prompt-len 160 --output-len 320 --off-tokens 128 --window 96 "${CHURNED[@]}" \
    --offon "$FAST" --offon "$KV" "${KVPB[@]}" "${KVSIDE[@]}" --offon "$SYNCED" --deadline-s $(($(left) > 100 ? $(left) - 70 : 30)) \
    --out $OUT/consistency.json >$OUT/consistency.log 2>&1
  say "draft_consistency exit code $?"
  grep -E "^(CONSIST|ERROR|deadline|churn)|Traceback|Error" $OUT/consistency.log | cut -c1-2500 | tee -a "$SUM"
  sed -n '/^mode /,$p' $OUT/consistency.log | tee -a "$SUM"
  # lean prefill (the default): the prompt's draft KV is skipped while nothing speculates; with draft_kv the
  # plugin writes it instead. Speculation resumes after 24 tokens, so the first on-steps look back into
  # the prompt (their proposals are wrong by construction but must MATCH always-on's).
  LEAN='"spec_controller_lean_prefill": true'
  if [ "$(left)" -gt 110 ]; then
    timeout $(($(left) - 20)) python3 bench/gpu/draft_consistency.py --port 30000 \
      --pp /tmp/pp/spec --maxbs $MAXBS --prompts "${LEAN_PROMPTS:-6}" --prompt-len 160 --output-len 200 --off-tokens 24 \
      --window 64 --tag lean: --seed 12 "${CHURNED[@]}" --offon "kvlean={\"spec_controller_sync_draft\": false, \"spec_controller_draft_kv\": true, $CO$LEAN}" \
      --offon "fastlean={\"spec_controller_sync_draft\": false, \"spec_controller_draft_kv\": false, $LEAN}" \
      --deadline-s $(($(left) - 45)) --out $OUT/consistency-lean.json >$OUT/consistency-lean.log 2>&1
    say "draft_consistency (lean prefill) exit code $?"
    grep -E "^(CONSIST|ERROR|deadline|churn)|Traceback|Error" $OUT/consistency-lean.log | cut -c1-2500 | tee -a "$SUM"
    sed -n '/^mode /,$p' $OUT/consistency-lean.log | tee -a "$SUM"
  fi
  say "recorder: $(cat /tmp/pp/spec.*.jsonl 2>/dev/null | wc -l) rows in $(ls /tmp/pp | wc -l) file(s)"
  # SPEC_CONTROLLER_LEAN_RESOLVE=1 in the environment: its line once the first off batch took it (none: it never did)
  say "lean resolve: $(grep -c 'fast-path batches get their bonus tokens alone' "$OUT/spec.log") engaged line(s)"
  # the prompts' rows straight into the draft-KV graphs' inputs (write_prompt, 12-04j): its line at the first one
  say "direct prompt writes: $(grep -c "prompts' draft-KV rows written straight into the graphs' inputs" "$OUT/spec.log") engaged line(s)"
  # SPEC_CONTROLLER_DEFER_PROMPT_KV=1: its line once the first prompt was held (none: none was)
  say "held prompts: $(grep -c "prompts' draft-KV writes held until the next decode" "$OUT/spec.log") engaged line(s)"
  cat /tmp/pp/spec.*.jsonl 2>/dev/null | gzip >$OUT/proposals.jsonl.gz
  grep -E "spec-controller|Traceback|Error" $OUT/spec.log | grep -v "^benchmark_args" | tail -6 | cut -c1-300 \
    | tee -a "$SUM"
  stop_server
fi
say "total $(($(date +%s) - T0)) s"
