#!/bin/bash
# The off path and greedy equality on the H200 (device tool, carry .whl .jitcache):
#   bash bench/gpu/run_offpath.sh [--random]
# Model: the crafted clear-margin target + EAGLE3 head (mkmodel.py --crafted): every greedy output
# must follow the model's successor table exactly; `--random` uses random weights instead (then
# only the comparison with the no-speculation engine's outputs is meaningful, at one request at a time).
# 1. SGLang without speculation: decode throughput at fixed batch sizes (steady.py) and the
#    bench_serving sweep.
# 2. SGLang with EAGLE3 + the plugin, one engine start, switched at run time (set_internal_state):
#    greedy equality with speculation never (fast off path), always, switching every 5 ms, and never
#    on SGLang's steps-0 state; then steady throughput for steps-0, fast off and always.
source bench/gpu/common.sh
if [ "${1:-}" = "--random" ]; then make_model $M; CHECK=(--reference /tmp/nospec.json); EQN=48; EQC=1
else make_model $M --crafted; CHECK=(--chain $M/target/next.json); EQN=200; EQC=32; fi
echo '{"1": {"candidate_steps": [0, 3]}}' >$SC/adaptive.json
EQ=(--prompts $EQN --concurrency $EQC --input-len 32 --output-len 64)

if start_server nospec 30001 X=1 --; then
  greedy 30001 nospec "${EQ[@]}" "${CHECK[@]/--reference/--save}"
  steady 30001 nospec $OUT/steady.log
  sweep 30001 nospec $OUT/nospec.log
  stop_server
fi

if start_server spec 30000 SPEC_CONTROLLER_INITIAL_THRESHOLD=0 SPEC_CONTROLLER_EXPERIMENTS=1 -- "${SPEC[@]}" \
    --speculative-adaptive --speculative-adaptive-config $SC/adaptive.json; then
  grep -E "spec-controller|Traceback" $OUT/spec.log | head -5 | tee -a "$SUM"
  greedy 30000 never-fastoff "${EQ[@]}" "${CHECK[@]}"
  say "always: $(internal_state 30000 '{"speculative_disable_batch_threshold": 1024}')"
  greedy 30000 always "${EQ[@]}" "${CHECK[@]}"
  greedy 30000 switching-5ms "${EQ[@]}" "${CHECK[@]}" --toggle 0,1024 --toggle-ms 5
  say "steps-0: $(internal_state 30000 '{"speculative_disable_batch_threshold": 0, "spec_controller_fast_off": false}')"
  greedy 30000 never-steps0 "${EQ[@]}" "${CHECK[@]}"
  steady 30000 steps0 $OUT/steady.log
  say "fast off: $(internal_state 30000 '{"spec_controller_fast_off": true}')"
  steady 30000 fastoff $OUT/steady.log
  say "always: $(internal_state 30000 '{"speculative_disable_batch_threshold": 1024}')"
  steady 30000 always $OUT/steady.log
  [ "$(left)" -gt 60 ] && { internal_state 30000 '{"speculative_disable_batch_threshold": 0}' >/dev/null; sweep 30000 fastoff $OUT/spec.log; }
  say "refused as it should: $(internal_state 30000 '{"speculative_disable_batch_threshold": -3}')"
  grep -E "spec-controller|Traceback|Error" $OUT/spec.log | grep -v "^benchmark_args" | tail -6 | tee -a "$SUM"
  stop_server
fi
save_caches
say "total $(($(date +%s) - T0)) s"
