"""Issue 12 item 3's GPU test, on the CPU: the analysis of bench/gpu/draft_consistency.py on hand-made verify
rows (a draft whose KV was kept consistent through off -> on proposes what the always-on run proposed at the
same position; a stale one does not, for as far as its lookback reaches), the recorder bench/gpu/proposals.py
with fake batches and tensors, and the driver end to end against a stand-in server that drafts from its own
(possibly stale) KV."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))
import draft_consistency as dc  # noqa: E402
import proposals  # noqa: E402

L, OUT, W, K = 160, 320, 96, 64          # prompt, output, window, the stale draft's lookback


def tok(i: int, p: int) -> int:
    """The greedy token at position p of prompt i's sequence."""
    return 1000 * (i + 1) + p


def row(mode: str, i: int, p: int, right: bool = True) -> dict:
    """A verify at seq_len p: bonus tok(p), first draft right (tok(p + 1)) or not, two wrong ones."""
    return {"rid": f"{mode}-{i}", "seq_len": p, "steps": 3,
            "draft": [tok(i, p), tok(i, p + 1) if right else 0, 5, 6], "accept": 2 if right else 1}


def always(i: int, shift: int = 0, mode: str = "always") -> list[dict]:
    """Every draft right: two tokens a verify, from seq_len L (+ shift)."""
    return [row(mode, i, p) for p in range(L + shift, L + OUT - 1, 2)]


def offon(mode: str, i: int, s: int, stale: int = 0) -> list[dict]:
    """Off up to s (no verify rows: the fast path; a steps-0 row where SGLang's path took it), then on; the
    first `stale` positions after s draft wrong (one token a verify), then right."""
    rows = [{"rid": f"{mode}-{i}", "seq_len": s - 1, "steps": 0, "draft": [tok(i, s - 1)], "accept": 1}]
    p = s
    while p < L + OUT - 1:
        right = p >= s + stale
        rows.append(row(mode, i, p, right))
        p += 2 if right else 1
    return rows


def reference(i: int) -> list[dict]:
    return always(i) + always(i, 1, "always1")


@pytest.mark.parametrize("s", [L + 130, L + 131])     # the switch lands on always's parity, or between
def test_a_consistent_offon_run_proposes_what_always_proposed(s):
    out = dc.analyse(reference(0) + offon("offon-kv", 0, s), W, prompt_len=L)
    m = out["modes"]["offon-kv"]
    assert m["switch_seq_lens"] == [s] and m["off_tokens"] == [s - L + 1]
    assert m["requests"][0]["steps0_rows"] == 1
    for name in dc.RANGES:
        r = m[name]
        assert r["counterparts"] == r["steps"] > 0, name
        assert r["match"] == 1.0 and r["first_match"] == 1.0 and r["match_all"] == 1.0, name
        assert r["accept"] == r["ref_accept"] == 2.0, name
    # at always1's parity every counterpart is always1's; the mean accept is always's over the positions
    assert m["window"]["counterparts_shifted"] == (m["window"]["steps"] if (s - L) % 2 else 0)
    assert m["window"]["steps"] == W // 2
    assert out["reference"]["always"]["accept"] == 2.0 and out["reference"]["overlap"]["steps"] == 0


def test_without_the_shifted_reference_an_odd_switch_has_no_counterpart():
    out = dc.analyse(always(0) + offon("offon-kv", 0, L + 131), W)
    w = out["modes"]["offon-kv"]["window"]
    assert w["steps"] == 48 and w["counterparts"] == 0 and w["match"] is None and w["match_all"] == 0.0


def test_a_stale_offon_run_matches_only_past_its_lookback():
    s = L + 130
    out = dc.analyse(reference(0) + offon("offon-fast", 0, s, stale=K), W)
    m = out["modes"]["offon-fast"]
    w, x, a = m["window"], m["window_after_first"], m["after"]
    # [s, s + 64): 64 wrong drafts, one position each; [s + 64, s + 96): 16 right ones, two positions each
    assert (w["steps"], w["counterparts"], w["matched"]) == (80, 80, 16)
    assert w["match"] == 0.2 and w["first_match"] == 0.2
    assert w["accept"] == pytest.approx((64 + 2 * 16) / 80) and w["ref_accept"] == 2.0
    assert (x["steps"], x["matched"]) == (79, 16) and m["first"]["match"] == 0.0
    assert a["match"] == 1.0 and a["accept"] == a["ref_accept"] == 2.0
    assert w["counterparts_shifted"] == 32           # the wrong drafts at odd offsets from the prompt


def test_only_the_first_on_step_stubbed_is_told_apart():
    s = L + 130
    rows = reference(0) + offon("offon-synced", 0, s, stale=1)
    m = dc.analyse(rows, W)["modes"]["offon-synced"]
    assert m["first"]["matched"] == 0 and m["first"]["steps"] == 1 and m["first"]["accept"] == 1.0
    assert m["window_after_first"]["match"] == 1.0 and m["window_after_first"]["steps"] == 48
    assert m["window"]["matched"] == 48 and m["window"]["steps"] == 49
    assert m["window"]["match"] == pytest.approx(48 / 49, abs=1e-4)


def test_the_table_says_when_the_references_never_met_the_on_steps():
    """12-02: the lost first on-step put kv's later steps on the other parity than both references' (always1
    lands on always's positions once both accept 2): 0 counterparts must not read as 0 identical proposals."""
    s = L + 130
    same_parity = always(0) + always(0, 0, "always1")
    out = dc.analyse(same_parity + offon("offon-kv", 0, s, stale=1), W)
    x = out["modes"]["offon-kv"]["window_after_first"]
    assert x["counterparts"] == 0 and x["steps"] == 48
    assert "NOTE offon-kv: proposals compared at 0 of its 48 on-steps" in dc.table(out)
    met = dc.analyse(reference(0) + offon("offon-kv", 0, s, stale=1), W)
    assert met["modes"]["offon-kv"]["window_after_first"]["match"] == 1.0 and "NOTE" not in dc.table(met)


def test_modes_pool_their_requests_and_keep_them_apart():
    rows = reference(0) + reference(1) + offon("offon-fast", 0, L + 130, K) + offon("offon-fast", 1, L + 131, K)
    rows += offon("offon-kv", 0, L + 128) + offon("offon-kv", 1, L + 133)
    rows.append({"rid": "offon-kv-2", "seq_len": L, "steps": 0, "draft": [1], "accept": 1})   # never switched
    rows.append({"rid": "not-ours", "seq_len": 3, "steps": 3, "draft": [1, 2, 3, 4], "accept": 4})
    out = dc.analyse(rows, W)
    fast, kv = out["modes"]["offon-fast"], out["modes"]["offon-kv"]
    assert set(out["modes"]) == {"offon-fast", "offon-kv"}     # "not-ours" is no "<mode>-<i>"
    assert fast["switch_seq_lens"] == [L + 130, L + 131] and kv["switch_seq_lens"] == [L + 128, L + 133, None]
    assert kv["no_switch"] == 1 and kv["window"]["match"] == 1.0
    assert fast["window"]["matched"] == 32 and fast["window"]["counterparts"] == 160
    assert fast["window"]["match"] == 0.2 and fast["after"]["match"] == 1.0
    assert [r["window"]["match"] for r in fast["requests"]] == [0.2, 0.2]


def test_greedy_compares_every_mode_with_always():
    ref = [[1, 2, 3, 4], [5, 6, 7, 8]]
    eq = dc.greedy({"always": ref, "always1": [[2, 3, 4], [6, 7, 8]], "offon-kv": [[1, 2, 3, 4], [5, 6, 9, 8]]})
    assert eq["always1"]["mismatching"] == 0
    assert eq["offon-kv"]["mismatching"] == 1
    assert eq["offon-kv"]["first_mismatch"] == {"prompt": 1, "position": 2, "got": [9, 8], "expected": [7, 8]}


# --- the recorder --------------------------------------------------------------------------------------------
class T:
    """A tensor as far as the recorder reads one."""
    def __init__(self, values):
        self.values = list(values)

    def tolist(self):
        return list(self.values)


class Mode:
    def __init__(self, idle=False):
        self.idle = idle

    def is_idle(self):
        return self.idle


def fake_batch(rids, seq_lens, draft):
    return types.SimpleNamespace(forward_mode=Mode(), reqs=[types.SimpleNamespace(rid=r) for r in rids],
                                 seq_lens=T(seq_lens), spec_info=types.SimpleNamespace(draft_token=T(draft)))


def fake_verify(accept, predict):
    def verify(worker, batch, grammar_barrier=None):
        batch.spec_info = types.SimpleNamespace(bonus_tokens=T([0]))   # SGLang rebinds the batch's fields
        batch.seq_lens = T([-1] * len(batch.reqs))
        return types.SimpleNamespace(accept_lens=T(accept), next_token_ids=T(predict), grammar_barrier=grammar_barrier)
    return verify


def rows_in(tmp_path):
    return [json.loads(line) for p in sorted(tmp_path.glob("pp.*.jsonl")) for line in p.read_text().splitlines()]


def test_recorder_writes_one_row_per_request_per_verify_at_once(tmp_path):
    rec = proposals.Recorder(str(tmp_path / "pp"))
    worker = types.SimpleNamespace(speculative_num_steps=3, ps=types.SimpleNamespace(tp_rank=0))
    batch = fake_batch(["a-0", "b-1"], [160, 200], [5, 6, 7, 8, 9, 10, 11, 12])
    result = rec.verify(fake_verify([2, 1], [6, 70, 71, 72, 90, 91, 92, 93]), worker, batch, grammar_barrier="g")
    assert result.grammar_barrier == "g"                  # arguments passed on, the result handed back
    assert rows_in(tmp_path) == [                          # written without a flush or a close
        {"rid": "a-0", "seq_len": 160, "steps": 3, "draft": [5, 6, 7, 8], "accept": 2, "target": [6, 70, 71, 72]},
        {"rid": "b-1", "seq_len": 200, "steps": 3, "draft": [9, 10, 11, 12], "accept": 1, "target": [90, 91, 92, 93]}]
    worker.speculative_num_steps = 0                       # SGLang's steps-0 path: a 1-token verify
    rec.verify(fake_verify([1], [44, 45, 46, 47]), worker, fake_batch(["a-0"], [162], [8]))
    last = rows_in(tmp_path)[-1]
    assert last == {"rid": "a-0", "seq_len": 162, "steps": 0, "draft": [8], "accept": 1}   # predict does not fit
    rec.close()
    assert rows_in(tmp_path)[0]["rid"] == "a-0" and len(rows_in(tmp_path)) == 3
    assert dc.read_rows(str(tmp_path / "pp")) == rows_in(tmp_path)


def test_recorder_skips_idle_batches_and_other_ranks_and_never_breaks_the_verify(tmp_path):
    rec = proposals.Recorder(str(tmp_path / "pp"))
    worker = types.SimpleNamespace(speculative_num_steps=3)
    idle = fake_batch([], [], [])
    idle.forward_mode = Mode(idle=True)
    assert rec.verify(fake_verify([], []), worker, idle).accept_lens.values == []
    rank1 = types.SimpleNamespace(speculative_num_steps=3, ps=types.SimpleNamespace(tp_rank=1))
    rec.verify(fake_verify([2], [1, 2, 3, 4]), rank1, fake_batch(["x-0"], [10], [1, 2, 3, 4]))
    assert rows_in(tmp_path) == []
    broken = fake_batch(["x-0"], [10], [1, 2, 3, 4])
    del broken.seq_lens
    calls = []
    out = rec.verify(lambda w, b: calls.append(b) or "result", worker, broken)
    assert out == "result" and calls == [broken] and rec.failed
    rec.verify(fake_verify([2], [1, 2, 3, 4]), worker, fake_batch(["x-0"], [10], [1, 2, 3, 4]))
    assert rows_in(tmp_path) == []                         # stopped recording after a failure, the engine runs on


def test_load_registers_one_around_hook_on_verify_only_where_asked(tmp_path, monkeypatch):
    registered = []
    registry = types.SimpleNamespace(register=lambda target, hook, kind: registered.append((target, hook, kind)))
    hook_module = types.SimpleNamespace(HookRegistry=registry, HookType=types.SimpleNamespace(AROUND="around"))
    for name in ("sglang", "sglang.srt", "sglang.srt.plugins"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "sglang.srt.plugins.hook_registry", hook_module)
    monkeypatch.setattr(proposals, "_loaded", [])
    monkeypatch.delenv("SPEC_PROPOSALS", raising=False)
    proposals.load()
    assert registered == []
    monkeypatch.setenv("SPEC_PROPOSALS", str(tmp_path / "pp"))
    proposals.load()
    proposals.load()                                       # idempotent
    assert [(t, k) for t, _, k in registered] == [
        ("sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2.verify", "around")]
    assert registered[0][1].__self__.prefix == str(tmp_path / "pp")


# --- the driver against a stand-in server --------------------------------------------------------------------
LOOKBACK = 8


def succ(t: int) -> int:
    return (t * 31 + 7) % 31997 + 3


def engine(pp: Path, known=("speculative_disable_batch_threshold", "spec_controller_sync_draft",
                            "spec_controller_draft_kv", "spec_controller_lean_prefill"),
           refuse_churn: bool = False, hold: tuple = (("offon-fast-", 36), ("offon-kv-", 52))) -> ThreadingHTTPServer:
    """Greedy successor tokens; every batch speculates iff threshold >= 1; an on-step's first draft token is
    right iff the draft's KV LOOKBACK positions back was written; off steps write it only with sync_draft or
    draft_kv. Verify rows as the recorder writes them, in pp.<port>.jsonl; a stream chunk per step.
    refuse_churn: requests with rid churn-* get HTTP 400 (as a server refuses what does not fit its pool).
    hold: (rid part, tokens): such an off stream waits there for the driver's switch (up to 30 s) instead of running
    on: on a loaded machine the client read the stream late and its switch landed past the bounds asserted below."""
    state = {"speculative_disable_batch_threshold": 0}
    lock = threading.Condition()
    changes = [0]          # set_internal_state calls so far

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, obj):
            out = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/set_internal_state":
                values = body["server_args"]
                if set(values) - set(known):
                    return self.reply({"updated": False, "message": f"unknown {sorted(set(values) - set(known))}"})
                with lock:
                    state.update(values)
                    changes[0] += 1
                    lock.notify_all()
                return self.reply([{"updated": True}])
            assert body["stream"] and body["sampling_params"]["temperature"] == 0
            if refuse_churn and body["rid"].startswith("churn-"):
                self.send_response(400)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            prompt, n = body["input_ids"], body["sampling_params"]["max_new_tokens"]
            held_at = next((tokens for part, tokens in hold if part in body["rid"]), None)
            with lock:
                began = changes[0]
            written = set(range(len(prompt)))            # the prefill wrote the prompt's draft KV
            out = [succ(prompt[-1])]
            f = open(pp / f"pp.{self.server.server_port}.jsonl", "a", buffering=1)
            self.chunk(out)
            while len(out) < n:
                p = len(prompt) + len(out) - 1          # seq_len: the bonus token out[-1] sits at p
                with lock:
                    if held_at is not None and len(out) >= held_at:
                        lock.wait_for(lambda: changes[0] != began, timeout=30)
                    on = state["speculative_disable_batch_threshold"] >= 1
                    keep = bool(state.get("spec_controller_sync_draft") or state.get("spec_controller_draft_kv"))
                if on:
                    right = p - LOOKBACK in written
                    accept = min(2 if right else 1, n - len(out))
                    f.write(json.dumps({"rid": body["rid"], "seq_len": p, "steps": 3, "accept": accept,
                                        "draft": [out[-1], succ(out[-1]) if right else 0, 5, 6]}) + "\n")
                    written.update(range(p, p + accept))
                else:
                    accept = 1
                    if keep:
                        written.add(p)
                    time.sleep(0.003)
                for _ in range(accept):
                    out.append(succ(out[-1]))
                self.chunk(out)
            f.close()
            self.wfile.write(b"data: [DONE]\n\n")

        def chunk(self, out):
            msg = {"text": None, "output_ids": out, "meta_info": {"completion_tokens": len(out)}}
            self.wfile.write(b"data: " + json.dumps(msg).encode() + b"\n\n")
            self.wfile.flush()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def driver(port: int, pp: Path, out: Path, *offon: str, extra: tuple = ()) -> subprocess.CompletedProcess:
    args = ["--port", str(port), "--pp", str(pp / "pp"), "--maxbs", "8", "--prompts", "3", "--prompt-len", "20",
            "--output-len", "80", "--off-tokens", "24", "--window", "16", "--out", str(out), *extra]
    for spec in offon:
        args += ["--offon", spec]
    return subprocess.run([sys.executable, str(ROOT / "bench/gpu/draft_consistency.py"), *args],
                          capture_output=True, text=True, timeout=120)


def test_driver_end_to_end_tells_a_stale_draft_from_a_kept_one(tmp_path):
    server = engine(tmp_path)
    try:
        res = driver(server.server_port, tmp_path, tmp_path / "c.json",
                     'fast={"spec_controller_sync_draft": false, "spec_controller_draft_kv": false}',
                     'kv={"spec_controller_sync_draft": false, "spec_controller_draft_kv": true, "off_tokens": 40}')
    finally:
        server.shutdown()
    assert res.returncode == 0, res.stdout + res.stderr
    # (the stand-in refuses keys it does not know: "off_tokens" is the driver's, never sent to the engine)
    got = json.loads((tmp_path / "c.json").read_text())
    lines = {json.loads(line[8:])["mode"]: json.loads(line[8:]) for line in res.stdout.splitlines()
             if line.startswith("CONSIST ")}
    assert set(lines) == {"offon-fast", "offon-kv", "reference"}
    fast, kv = got["modes"]["offon-fast"], got["modes"]["offon-kv"]
    assert all(r["switch_seq_len"] is not None for r in fast["requests"] + kv["requests"])
    assert all(24 <= n < 60 for n in got["switched_at_tokens"].values())
    assert all(24 <= n < 40 for n in fast["off_tokens"]) and all(40 <= n < 60 for n in kv["off_tokens"])
    assert kv["window"]["match"] == 1.0 and kv["window"]["counterparts"] == kv["window"]["steps"]
    assert kv["window"]["accept"] == kv["window"]["ref_accept"] == 2.0
    assert fast["window"]["match"] < 0.7 and fast["window"]["accept"] < fast["window"]["ref_accept"]
    assert fast["after"]["match"] == 1.0
    assert all(g["mismatching"] == 0 for g in got["greedy"].values())   # the target verifies every draft
    assert lines["offon-kv"]["window"]["match"] == 1.0
    assert "offon-fast" in res.stdout.split("mode ", 1)[1]              # the table


def test_driver_stops_with_one_error_line_when_a_switch_is_refused(tmp_path):
    server = engine(tmp_path)
    try:
        res = driver(server.server_port, tmp_path, tmp_path / "c.json", 'bad={"spec_controller_nonsense": true}')
    finally:
        server.shutdown()
    assert res.returncode == 2
    errors = [line for line in res.stdout.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and "spec_controller_nonsense" in errors[0] and "not updated" in errors[0]
    assert not (tmp_path / "c.json").exists()


@pytest.mark.parametrize("bad", ['"x"', "0", "true", "2.5"])
def test_a_modes_own_off_tokens_must_be_a_positive_integer(bad):
    with pytest.raises(SystemExit, match="off_tokens must be an integer >= 1"):
        dc.parse_offon([f'kv={{"spec_controller_draft_kv": true, "off_tokens": {bad}}}'])
    assert dc.parse_offon(['kv={"off_tokens": 129}']) == [("kv", {"off_tokens": 129})]


KV_MODE = 'kv={"spec_controller_sync_draft": false, "spec_controller_draft_kv": true, "off_tokens": 40}'


def test_driver_runs_churn_beside_every_measured_request_and_leaves_it_out_of_the_analysis(tmp_path):
    server = engine(tmp_path)
    try:
        res = driver(server.server_port, tmp_path, tmp_path / "c.json", KV_MODE,
                     extra=("--churn", "2", "--churn-tokens", "2-4", "--churn-prompt-len", "5"))
    finally:
        server.shutdown()
    assert res.returncode == 0, res.stdout + res.stderr
    got = json.loads((tmp_path / "c.json").read_text())
    recorded = [json.loads(line) for line in (tmp_path / f"pp.{server.server_port}.jsonl").read_text().splitlines()]
    churned = {r["rid"] for r in recorded if r["rid"].startswith("churn-")}
    assert got["churn_requests"] >= 2 and churned                 # they ran, and speculated while the threshold was on
    assert set(got["modes"]) == {"offon-kv"} and got["config"]["churn"] == 2
    kv = got["modes"]["offon-kv"]
    assert kv["window"]["match"] == 1.0 and kv["window"]["counterparts"] == kv["window"]["steps"]
    assert all(g["mismatching"] == 0 for g in got["greedy"].values())
    assert "churn: " in res.stdout and "requests finished beside" in res.stdout


def test_driver_stops_with_one_error_line_when_a_churn_request_fails(tmp_path):
    server = engine(tmp_path, refuse_churn=True)
    try:
        res = driver(server.server_port, tmp_path, tmp_path / "c.json", KV_MODE, extra=("--churn", "1"))
    finally:
        server.shutdown()
    assert res.returncode == 2, res.stdout + res.stderr
    errors = [line for line in res.stdout.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and "churn request failed" in errors[0] and "400" in errors[0]
    assert not (tmp_path / "c.json").exists()


@pytest.mark.parametrize("text, ok", [("2-12", (2, 12)), ("3-3", (3, 3)), ("0-4", None), ("5-2", None), ("7", None),
                                      ("a-b", None)])
def test_churn_lengths_are_a_span(text, ok):
    import argparse
    if ok is None:
        with pytest.raises(argparse.ArgumentTypeError):
            dc.span(text)
    else:
        assert dc.span(text) == ok
