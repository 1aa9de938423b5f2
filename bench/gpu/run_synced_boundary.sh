#!/bin/bash
# Does the off path `synced` pay at the boundary load? (12-06g: with `kv` the first speculative step after an off one
# accepts ~1 token a request; `synced`'s off batches run SGLang's 1-token draft extend, which leaves the next proposal
# ready, at a cost per off batch.) One daemon from an empty database, the bandit unpinned, a closed loop of CONST_C
# clients; the engine switched at run time before each run between kv (its default) and synced, rotated per repeat.
#   DEADLINE_S=330 bash bench/gpu/run_synced_boundary.sh          (carry .whl, .jitcache)
# Then: python3 bench/gpu/loads.py --show $OUT/results.jsonl; spec_share.py on state.db for each run's mode mix.
source bench/gpu/common.sh
MAXBS=128 ACC=natural
CONST_C=${CONST_C:-24}; RUN_S=${RUN_S:-40}; REPEATS=${REPEATS:-2}
make_model $M --crafted $MODEL7B
if start_daemon; then
  specctl threshold unpin >/dev/null
  python3 bench/gpu/loads.py --port 30000 --configs \
    'kv={"spec_controller_sync_draft": false};synced={"spec_controller_sync_draft": true}' \
    --shape closed --levels "$CONST_C" --seconds "$RUN_S" --warmup 3 --repeats "$REPEATS" --tokenizer $TOK --out "$R" \
    2>&1 | grep -E "LOAD|Error|refused|Traceback" | cut -c1-220 >>"$SUM"
  specctl status 2>&1 | grep -E "threshold|acceptance|off path" | tee -a "$SUM"
  specctl history --limit 2000 --json >"$OUT/history.json" 2>/dev/null
  stop_daemon
  save_db
fi
show_and_total
