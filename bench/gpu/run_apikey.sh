#!/bin/bash
# An operator's --api-key on a real SGLang, one device call (~260 s cold):   DEADLINE_S=330 bash bench/gpu/run_apikey.sh
# The daemon ([sglang] api_key, as from-launch writes it) must change the threshold through SGLang's auth (its
# /set_internal_state is ADMIN_OPTIONAL: the key is asked), and its log, SGLang's relayed lines included (SGLang
# prints its server_args whole), must not show the key. Lines APIKEY in the summary; the daemon's log in $OUT.
source bench/gpu/common.sh
make_model $M --crafted $MODEL7B
export API_KEY="sk-spec-controller-check-$RANDOM$RANDOM"
start_daemon || exit 1
for t in 0 8 3; do specctl threshold pin "$t" >/dev/null && sleep 1; done
refused=$(python3 - "$SC/state.db" <<'PY'
import sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute("SELECT detail FROM events WHERE detail LIKE '%set_threshold%'").fetchall()
print(len(rows), *(r[0][:120] for r in rows[:3]))
PY
)
say "APIKEY threshold changes refused by SGLang: $refused (0 expected)"
say "APIKEY $(specctl status | grep -E '^threshold:')"
body='{"text": "hello", "sampling_params": {"max_new_tokens": 4}}'
# (JSON: curl -d alone sends a form, which SGLang answered 400 past the auth check; 12-05b call 3)
json=(-H "Content-Type: application/json" -d "$body")
with=$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/generate -H "Authorization: Bearer $API_KEY" "${json[@]}")
without=$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/generate "${json[@]}")
say "APIKEY /generate with the key: HTTP $with (200 expected), without: HTTP $without (401 expected)"
# the plugin's telemetry reaches the daemon through its socket, the daemon's user's alone (0600 since 12-07)
say "APIKEY telemetry socket: $(find "$SC" /tmp /run "${XDG_STATE_HOME:-$HOME/.local/state}" -name telemetry.ipc -printf '%m %u %p' 2>/dev/null | head -1) (600 expected)"
say "APIKEY $(specctl status | grep -E '^samples:') (> 0 this run expected)"
stop_daemon
say "APIKEY the key in the daemon's log: $(grep -c -- "$API_KEY" "$OUT/daemon.log") line(s) (0 expected); masked: $(grep -c -- "api_key='\*\*\*'" "$OUT/daemon.log") server_args line(s) (>= 1 expected)"
xz -f "$OUT/daemon.log"
