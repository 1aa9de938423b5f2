#!/bin/bash
# Is an off batch as fast as plain decoding, and token-identical to it? (device tool, carry .whl .jitcache)
#   bash bench/gpu/run_offpath.sh
# 1. SGLang without speculation: greedy reference outputs (one request at a time, so every step has the
#    same batch and kernels) and the throughput sweep.
# 2. SGLang with EAGLE3 + the plugin, one engine start, switched at run time through set_internal_state:
#    threshold 0 with the fast off path (greedy must equal the reference bit for bit: same decode
#    kernels, and the KV cache it reads was written by the fast path), threshold 0 on SGLang's steps-0
#    state, always (acceptance 2.5 via the plugin's experiment knob) and static 5.
source bench/gpu/common.sh
make_model $M
R=$OUT/results.jsonl
SPEC_ADAPTIVE=(--speculative-adaptive --speculative-adaptive-config $SC/adaptive.json)
echo '{"1": {"candidate_steps": [0, 3]}}' >$SC/adaptive.json
GREEDY=(--prompts 48 --concurrency 1 --input-len 64 --output-len 64 --out $R)

if start_server nospec 30001 X=1 --; then
  python3 bench/gpu/greedy.py --port 30001 --label nospec-greedy "${GREEDY[@]}" --save /tmp/nospec.json >>$OUT/nospec.log 2>&1
  sweep 30001 nospec $OUT/nospec.log
  stop_server
fi

if start_server spec 30000 SPEC_CONTROLLER_INITIAL_THRESHOLD=0 SPEC_CONTROLLER_EXPERIMENTS=1 -- "${SPEC[@]}" "${SPEC_ADAPTIVE[@]}"; then
  grep -E "spec-controller|Capture cuda graph|Traceback" $OUT/spec.log | head -8 | tee -a "$SUM"
  python3 bench/gpu/greedy.py --port 30000 --label fastoff-greedy "${GREEDY[@]}" --reference /tmp/nospec.json >>$OUT/spec.log 2>&1
  sweep 30000 fastoff $OUT/spec.log
  say "fast off off: $(internal_state 30000 '{"spec_controller_fast_off": false}')"
  python3 bench/gpu/greedy.py --port 30000 --label steps0-greedy "${GREEDY[@]}" --reference /tmp/nospec.json >>$OUT/spec.log 2>&1
  sweep 30000 steps0 $OUT/spec.log
  say "always, acc 2.5: $(internal_state 30000 '{"spec_controller_fast_off": true, "speculative_disable_batch_threshold": 1024, "spec_controller_simulate_acc_len": 2.5}')"
  sweep 30000 always-acc2.5 $OUT/spec.log
  say "static 5: $(internal_state 30000 '{"speculative_disable_batch_threshold": 5}')"
  [ "$(left)" -gt 60 ] && sweep 30000 static5-acc2.5 $OUT/spec.log
  say "refused as it should: $(internal_state 30000 '{"speculative_disable_batch_threshold": -3}')"
  grep -E "spec-controller|Traceback|Error" $OUT/spec.log | grep -v "^benchmark_args" | tail -8 | tee -a "$SUM"
  stop_server
fi
grep GREEDY $OUT/*.log | cut -c1-400 | tee -a "$SUM"
save_caches
say "total $(($(date +%s) - T0)) s"
