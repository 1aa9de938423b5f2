"""bench/gpu/loads.py against a stand-in HTTP server on a real socket (the GPU calls are too scarce to find a
broken load generator there): two resident engines measured alternately with the same seeds, and the
closed loop's share of logprob requests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def engine(seen: list, delay=lambda body: 0.0) -> ThreadingHTTPServer:
    """Answers /generate with the requested number of tokens at once (after delay(body) seconds),
    /set_internal_state with updated, and /flush_cache with 200."""
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.server.server_port, body))
            if self.path == "/set_internal_state":
                out = json.dumps({"updated": True}).encode()
            else:
                time.sleep(delay(body))
                n = body["sampling_params"]["max_new_tokens"]
                batch = body["input_ids"] and isinstance(body["input_ids"][0], list)     # (SGLang's batched form)
                out = json.dumps([{"output_ids": [7] * n, "meta_info": {"e2e_latency": 0.5 + i / 100}}
                                  for i in range(len(body["input_ids"]))] if batch else {"output_ids": [7] * n}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def run_loads(*args: str, out: Path) -> list[dict]:
    res = subprocess.run([sys.executable, str(ROOT / "bench/gpu/loads.py"), *args, "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_resident_engines_alternate_with_the_same_seeds(tmp_path):
    seen: list = []
    a, b = engine(seen), engine(seen)
    try:
        rows = run_loads("--shape", "steady", "--levels", "2", "--steady-len", "3", "--repeats", "2", "--flush",
                         "--no-steady-batched", "--engines", f"nospec={a.server_port},off={b.server_port}", out=tmp_path / "r.jsonl")
    finally:
        a.shutdown(), b.shutdown()
    assert [(r["label"], r["repeat"]) for r in rows] == [("nospec", 0), ("off", 0), ("off", 1), ("nospec", 1)]
    assert all(r["engines_resident"] and r["mono_end"] >= r["mono_start"] for r in rows)
    by_port = {}
    for port, body in seen:
        by_port.setdefault(port, []).append(tuple(body["input_ids"]))
    # each engine got the same prompts, repeat by repeat (the seed is the repeat's, not the engine's)
    assert sorted(by_port[a.server_port]) == sorted(by_port[b.server_port])
    assert len(set(by_port[a.server_port])) == 4          # 2 requests a repeat, other prompts per repeat


def test_two_states_of_one_engine_rotate_with_a_third_engine_and_are_switched_before_each_run(tmp_path):
    seen: list = []
    a, b = engine(seen), engine(seen)
    kv, fast = {"spec_controller_draft_kv": True}, {"spec_controller_draft_kv": False}
    try:
        rows = run_loads("--shape", "steady", "--levels", "2", "--steady-len", "3", "--repeats", "3", "--engines",
                         f"nospec={a.server_port};off={b.server_port}:{json.dumps(kv)};"
                         f"fast={b.server_port}:{json.dumps(fast)}", out=tmp_path / "r.jsonl")
    finally:
        a.shutdown(), b.shutdown()
    # reversed in odd repeats, rotated every two: off runs both before and after fast
    assert [r["label"] for r in rows] == ["nospec", "off", "fast", "fast", "off", "nospec", "off", "fast", "nospec"]
    # what engine b was told before each of its runs, and that engine a was never switched
    events = [(port, body.get("server_args")) for port, body in seen if "server_args" in body or "input_ids" in body]
    b_runs = []
    for i, (port, state) in enumerate(events):
        if port == b.server_port and state is None and (i == 0 or events[i - 1][1] is not None):
            b_runs.append(events[i - 1][1])
    assert b_runs == [kv, fast, fast, kv, kv, fast]
    assert all(state is None for port, state in events if port == a.server_port)
    prompts = {}
    for port, body in seen:
        if "input_ids" in body:
            prompts.setdefault(port, []).append(tuple(body["input_ids"]))
    assert sorted(prompts[b.server_port]) == sorted(prompts[a.server_port] * 2)   # the same seeds for all three


def test_closed_loop_asks_for_logprobs_on_its_share_and_keeps_its_requests(tmp_path):
    def closed(share: str) -> list:
        seen: list = []
        server = engine(seen)
        try:
            rows = run_loads("--shape", "closed", "--levels", "2", "--seconds", "0.4", "--warmup", "0.1",
                             "--repeats", "1", "--port", str(server.server_port),
                             "--label", "x", "--logprob-share", share, out=tmp_path / f"c{share}.jsonl")
        finally:
            server.shutdown()
        return rows, [body for _, body in seen]
    rows, bodies = closed("0.5")
    assert rows[0]["shape"] == "closed-logprob0.5"
    asked = sum(bool(b.get("return_logprob")) for b in bodies)
    assert 0.25 * len(bodies) < asked < 0.75 * len(bodies) and len(bodies) >= 20
    rows0, bodies0 = closed("0")
    assert rows0[0]["shape"] == "closed" and not any(b.get("return_logprob") for b in bodies0)
    # the share draws from its own stream: each client's first prompts are those of a run without logprobs
    firsts = lambda bs: {tuple(b["input_ids"]) for b in bs}
    assert len(firsts(bodies) & firsts(bodies0)) >= 4


def test_closed_loop_constrains_its_grammar_share_with_its_own_stream(tmp_path):
    """--grammar-share: that share carries the regex (sampling_params "regex"), drawn from a stream of its own:
    the prompts, the lengths and the logprob share are those of a run without."""
    def closed(*extra: str) -> tuple[list, list]:
        seen: list = []
        server = engine(seen)
        try:
            rows = run_loads("--shape", "closed", "--levels", "2", "--seconds", "1.0", "--warmup", "0.1",
                             "--repeats", "1", "--port", str(server.server_port), "--label", "x", *extra,
                             out=tmp_path / f"g{len(extra)}{extra[-1] if extra else ''}.jsonl")
        finally:
            server.shutdown()
        return rows, [body for _, body in seen]
    rows, bodies = closed("--grammar-share", "0.5", "--logprob-share", "0.5")
    assert rows[0]["shape"] == "closed-logprob0.5-grammar0.5" and len(bodies) >= 20
    regexes = {b["sampling_params"].get("regex") for b in bodies}
    assert regexes == {None, "((w[0-9]+){3}w1[0-9])+"}
    constrained = [bool(b["sampling_params"].get("regex")) for b in bodies]
    asked = [bool(b.get("return_logprob")) for b in bodies]
    assert 0.25 * len(bodies) < sum(constrained) < 0.75 * len(bodies)
    assert constrained != asked                              # two streams, not one coin
    rows_g, bodies_g = closed("--grammar-share", "0.5", "--grammar-regex", "(w1[0-9])+")
    assert rows_g[0]["shape"] == "closed-grammar0.5"
    assert {b["sampling_params"].get("regex") for b in bodies_g} == {None, "(w1[0-9])+"}
    rows0, bodies0 = closed()
    assert not any("regex" in b["sampling_params"] for b in bodies0)
    firsts = lambda bs: {tuple(b["input_ids"]) for b in bs}
    assert len(firsts(bodies) & firsts(bodies0)) >= 4 and len(firsts(bodies_g) & firsts(bodies0)) >= 4


def test_cpu_seconds_are_counted_for_the_named_process_group_only(tmp_path):
    """proccpu: a process in its own session burns 0.2 s of CPU (by its own clock) between two snapshots;
    the group's row has it, the test's own process (another group) is not in the row."""
    sys.path.insert(0, str(ROOT / "bench/gpu"))
    from proccpu import snapshot, usage
    burner = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nsys.stdin.readline()\nt = time.process_time()\n"
         "while time.process_time() - t < 0.2:\n    pass\nprint('done', flush=True)\ntime.sleep(60)"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        groups = {"burner": burner.pid}
        before = snapshot(groups)
        burner.stdin.write("go\n")
        burner.stdin.flush()
        assert burner.stdout.readline().strip() == "done"
        spent = usage(before, snapshot(groups))
    finally:
        burner.kill()
        burner.wait()
    assert set(spent) - {"steal_cpus"} == {"host_busy", "host_steal", "burner", "preempted", "minflt"}
    (name, seconds), = spent["burner"].items()
    assert name.startswith("python") and 0.18 <= seconds <= 0.5
    assert 0 < spent["host_busy"] <= 1


def test_a_run_row_counts_the_main_threads_preemptions_and_the_page_faults_of_each_process():
    """Two processes of one group spin on the same core for 0.3 s (each its own clock): the scheduler takes the
    core from each many times (involuntary switches of its main thread); a third touches 64 MiB (minor faults,
    one per 4 KiB page at least unless huge pages back it). Per group and process name, as cpu seconds are."""
    sys.path.insert(0, str(ROOT / "bench/gpu"))
    from proccpu import involuntary_switches, snapshot, usage
    cpu = min(os.sched_getaffinity(0))
    spin = ("import os, sys, time\nos.sched_setaffinity(0, {%d})\nsys.stdin.readline()\nt = time.process_time()\n"
            "while time.process_time() - t < 0.3:\n    pass\nprint('done', flush=True)\ntime.sleep(60)" % cpu)
    touch = ("import sys, time\nsys.stdin.readline()\nb = bytearray(64 << 20)\nfor i in range(0, len(b), 4096):\n"
             "    b[i] = 1\nprint('done', flush=True)\ntime.sleep(60)")
    first = subprocess.Popen([sys.executable, "-c", spin], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             process_group=0)
    procs = [first] + [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, process_group=first.pid) for code in (spin, touch)]
    try:
        before = snapshot({"g": first.pid})
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        assert [p.stdout.readline().strip() for p in procs] == ["done"] * 3
        spent = usage(before, snapshot({"g": first.pid}))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    (name, preempted), = spent["preempted"]["g"].items()      # all three are "python..."
    assert name.startswith("python") and preempted >= 10
    assert spent["minflt"]["g"][name] >= (64 << 20) // (2 << 20)     # a fault per huge page at the very least
    assert involuntary_switches("Name:\tx\nvoluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t12\n") == 12
    assert involuntary_switches("Name:\tx\n") == 0


STAT_BEFORE = """cpu  1000 0 500 8000 100 0 0 400 0 0
cpu0 500 0 250 4000 50 0 0 0 0 0
cpu1 500 0 250 4000 50 0 0 400 0 0
intr 12345 0 0
ctxt 999
"""
STAT_AFTER = """cpu  1600 0 600 8600 100 0 0 700 0 0
cpu0 800 0 300 4300 50 0 0 2 0 0
cpu1 800 0 300 4300 50 0 0 698 0 0

intr 12400 0 0
"""


def test_a_run_row_says_how_much_of_the_host_the_hypervisor_stole_and_on_which_cores():
    """/proc/stat's steal column (the eighth): the host's share over the run and every core whose share reached
    STEAL_SHOWN; idle and iowait are not busy, steal is. cpu0 stole 2 of 652 jiffies (< 1 %): not named."""
    sys.path.insert(0, str(ROOT / "bench/gpu"))
    from proccpu import parse_proc_stat, usage
    before, after = parse_proc_stat(STAT_BEFORE), parse_proc_stat(STAT_AFTER)
    assert before["cpu1"] == (1150, 5200, 400) and set(before) == {"cpu", "cpu0", "cpu1"}
    got = usage({"procs": {}, "host": before}, {"procs": {}, "host": after})
    # all cores: 1,600 jiffies in the run, 600 of them idle, busy 600 user + 100 system + 300 steal
    assert got == {"host_busy": round(1000 / 1600, 3), "host_steal": round(300 / 1600, 3),
                   "steal_cpus": {"1": round(298 / 948, 3)}}
    quiet = usage({"procs": {}, "host": before}, {"procs": {}, "host": before})
    assert quiet == {"host_busy": None, "host_steal": None}
    online = parse_proc_stat(STAT_AFTER + "cpu2 100 0 50 1000 0 0 0 900 0 0\n")     # a core new since the first look
    assert usage({"procs": {}, "host": before}, {"procs": {}, "host": online}) == got


def test_a_run_row_carries_the_groups_cpu_and_a_bad_group_is_refused(tmp_path):
    seen: list = []
    a = engine(seen)
    try:
        rows = run_loads("--shape", "steady", "--levels", "2", "--steady-len", "3", "--repeats", "1", "--port",
                         str(a.server_port), "--label", "nospec", "--cpu-groups", f"me={os.getpgid(0)}",
                         out=tmp_path / "r.jsonl")
        bad = subprocess.run([sys.executable, str(ROOT / "bench/gpu/loads.py"), "--shape", "steady", "--port",
                              str(a.server_port), "--cpu-groups", "nospec=abc"], capture_output=True, text=True)
    finally:
        a.shutdown()
    assert "python" in " ".join(rows[0]["cpu_s"]["me"]) and "host_busy" in rows[0]["cpu_s"]
    assert bad.returncode != 0 and bad.stderr.strip() == "--cpu-groups: 'nospec=abc' is not label=PGID"
    # the refused call sent nothing: the one request is the first run's (its 2 prompts batched)
    assert not (tmp_path / "bad.jsonl").exists() and [len(body["input_ids"]) for _, body in seen] == [2]


def test_steady_runs_say_how_far_apart_their_requests_ended(tmp_path):
    seen: list = []
    late = {}

    def delay(body):                       # every prompt 0.2 s, the first one seen 0.5 s
        late.setdefault("ids", body["input_ids"])
        return 0.5 if body["input_ids"] == late["ids"] else 0.2
    server = engine(seen, delay)
    try:
        (row,) = run_loads("--shape", "steady", "--levels", "4", "--steady-len", "3", "--repeats", "1",
                           "--port", str(server.server_port), "--no-steady-batched",
                           "--label", "off", out=tmp_path / "r.jsonl")
    finally:
        server.shutdown()
    assert 250 <= row["end_spread_ms"] <= row["wall_ms"] - 150 and row["wall_ms"] >= 500   # ends apart, not the wall


def test_a_batched_steady_run_sends_the_same_prompts_in_one_request(tmp_path):
    """Steady decode by default: the C prompts of the same seed as one /generate (SGLang admits them together), its tok/s
    over the C outputs, its end spread from SGLang's e2e_latency; traffic_table reads its rows."""
    seen: list = []
    server = engine(seen, lambda body: 1.0 if isinstance(body["input_ids"][0], list) else 0.0)
    try:
        rows = [run_loads("--shape", "steady", "--levels", "4", "--steady-len", "3", "--repeats", "1", "--port",
                          str(server.server_port), "--label", "off", *extra, out=tmp_path / f"r{len(extra)}.jsonl")[0]
                for extra in (["--no-steady-batched"], [])]
    finally:
        server.shutdown()
    singles, (batched,) = [b for _, b in seen[:4]], [b for _, b in seen[4:]]
    assert len(seen) == 5 and [b["input_ids"] for b in singles] != [] and \
        sorted(map(tuple, batched["input_ids"])) == sorted(tuple(b["input_ids"]) for b in singles)
    assert batched["sampling_params"] == singles[0]["sampling_params"]
    assert rows[1]["batched"] is True and rows[1]["end_spread_ms"] == 30.0 and "batched" not in rows[0]
    assert rows[1]["tok_s"] == pytest.approx(12 / (rows[1]["wall_ms"] / 1e3), rel=0.05)
    sys.path.insert(0, str(ROOT / "bench/gpu"))
    import traffic_table
    assert not traffic_table.not_steady(rows[1]) and not traffic_table.not_steady({**rows[1], "end_spread_ms": None})
    assert traffic_table.not_steady({**rows[1], "end_spread_ms": 0.06 * rows[1]["wall_ms"]})


def sleeper_group() -> subprocess.Popen:
    """A process in its own session (its own group) with a second thread, as an engine's scheduler has."""
    return subprocess.Popen([sys.executable, "-c", "import threading, time\n"
                             "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
                             "print('up', flush=True)\ntime.sleep(60)"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)


def two_cpus() -> list[int]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    return cpus[:2]


def affinity(p: subprocess.Popen) -> set:
    return {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{p.pid}/task")}


def loads_with_pins(tmp_path, rotate: str, *extra: str) -> tuple[list[dict], str]:
    seen: list = []
    a, b = engine(seen), engine(seen)
    try:
        res = subprocess.run([sys.executable, str(ROOT / "bench/gpu/loads.py"), "--shape", "steady", "--levels", "2",
                              "--steady-len", "3", "--engines", f"nospec={a.server_port},off={b.server_port}",
                              "--pin-rotate", rotate, *extra, "--out", str(tmp_path / "r.jsonl")],
                             capture_output=True, text=True, timeout=120)
    finally:
        a.shutdown(), b.shutdown()
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()], res.stdout


def test_pin_rotation_swaps_the_engines_core_sets_every_repeat_for_all_their_threads(tmp_path):
    one, two = two_cpus()
    ga, gb = sleeper_group(), sleeper_group()
    try:
        assert ga.stdout.readline().strip() == "up" and gb.stdout.readline().strip() == "up"
        rows, out = loads_with_pins(tmp_path, f"nospec={ga.pid}:{one};off={gb.pid}:{two}", "--repeats", "2")
        after = {"a": affinity(ga), "b": affinity(gb)}
    finally:
        for p in (ga, gb):
            p.kill()
            p.wait()
    first, second = {"nospec": str(one), "off": str(two)}, {"nospec": str(two), "off": str(one)}
    assert [(r["label"], r["repeat"], r["cpus_by_group"]) for r in rows] == [
        ("nospec", 0, first), ("off", 0, first), ("off", 1, second), ("nospec", 1, second)]
    # each repin reached both threads of each group (main + one more)
    assert f"LOAD pinned nospec (2 threads) on {two}" in out and f"LOAD pinned off (2 threads) on {one}" in out
    # and at the end every thread is back on the sets as given
    assert after == {"a": {frozenset({one})}, "b": {frozenset({two})}}


def test_a_later_repeat_index_starts_on_the_swapped_sets(tmp_path):
    one, two = two_cpus()
    ga, gb = sleeper_group(), sleeper_group()
    try:
        assert ga.stdout.readline().strip() == "up" and gb.stdout.readline().strip() == "up"
        rows, _ = loads_with_pins(tmp_path, f"nospec={ga.pid}:{one};off={gb.pid}:{two}", "--repeats", "1",
                                  "--repeat-index", "1")
    finally:
        for p in (ga, gb):
            p.kill()
            p.wait()
    assert {r["repeat"] for r in rows} == {1}
    assert all(r["cpus_by_group"] == {"nospec": str(two), "off": str(one)} for r in rows)


def test_a_group_that_cannot_be_pinned_is_said_and_the_runs_go_on_without_claiming_its_cores(tmp_path):
    one, two = two_cpus()
    ga = sleeper_group()
    gone = sleeper_group()
    gone.kill()
    gone.wait()
    try:
        assert ga.stdout.readline().strip() == "up"
        rows, out = loads_with_pins(tmp_path, f"nospec={ga.pid}:{one};off={gone.pid}:{two}", "--repeats", "1")
    finally:
        ga.kill()
        ga.wait()
    assert f"LOAD pin failed: off (group {gone.pid}) on {two}: 0 threads pinned" in out
    assert len(rows) == 2 and all(r["cpus_by_group"] == {"nospec": str(one)} for r in rows)


def test_the_pin_command_pins_a_group_and_refuses_what_it_cannot_pin(tmp_path):
    one, _ = two_cpus()
    g = sleeper_group()
    try:
        assert g.stdout.readline().strip() == "up"
        ok = subprocess.run([sys.executable, str(ROOT / "bench/gpu/cpusets.py"), "pin", str(g.pid), str(one)],
                            capture_output=True, text=True)
        pinned = affinity(g)
        bad = subprocess.run([sys.executable, str(ROOT / "bench/gpu/cpusets.py"), "pin", str(g.pid), "100000"],
                             capture_output=True, text=True)
        init = subprocess.run([sys.executable, str(ROOT / "bench/gpu/cpusets.py"), "pin", "1", str(one)],
                              capture_output=True, text=True)
        kept = affinity(g)
    finally:
        g.kill()
        g.wait()
    assert ok.returncode == 0 and ok.stdout.strip() == "2" and pinned == {frozenset({one})}
    assert bad.returncode == 1
    assert bad.stderr.strip() == f"cpusets.py pin: 0 threads of group {g.pid} pinned on 100000, 2 refused"
    assert kept == {frozenset({one})}                     # the refused pin changed nothing
    assert init.returncode == 1 and len(init.stderr.strip().splitlines()) == 1 and "process group 1" in init.stderr


def test_a_bad_pin_rotation_is_refused_before_any_request(tmp_path):
    seen: list = []
    a = engine(seen)
    try:
        bad = subprocess.run([sys.executable, str(ROOT / "bench/gpu/loads.py"), "--shape", "steady", "--port",
                              str(a.server_port), "--pin-rotate", "nospec=12"], capture_output=True, text=True)
    finally:
        a.shutdown()
    assert bad.returncode != 0 and bad.stderr.strip().startswith("--pin-rotate: 'nospec=12' is not label=PGID:CPULIST")
    assert seen == []


def test_show_pairs_each_repeat_with_the_nospec_run_of_the_same_seed(tmp_path):
    def row(label, repeat, tok_s, t, tpot=None, e2e=None):
        return {"label": label, "shape": "open", "level": 24.0, "repeat": repeat, "t_start": t, "tok_s": tok_s,
                "tpot_ms": tpot, "e2e_ms": e2e}
    rows = [row("nospec", 0, 1000.0, 0, 8.0, 400.0), row("off", 0, 900.0, 1, 8.8, 500.0),
            row("off", 1, 1100.0, 2, 7.7, 600.0), row("nospec", 1, 1000.0, 3, 7.0, 500.0),
            # a later block of the same seeds: each run pairs with the no-spec run nearest in time
            row("nospec", 0, 2000.0, 10, 8.0, 500.0), row("off", 0, 2000.0, 11, 9.0, 700.0),
            # another variant's block against the same no-spec engine: not part of off's comparison
            row("nospec", 0, 3000.0, 20, 1.0, 100.0), row("fast", 0, 1500.0, 21, 2.0, 300.0)]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = subprocess.run([sys.executable, str(ROOT / "bench/gpu/loads.py"), "--show", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    table, _, ratios = res.stdout.partition("label / nospec")
    ratio = [line for line in ratios.splitlines() if line.startswith("| open | 24.0 |")]
    # off: medians 1100 / 1000 (its own no-spec runs 1000, 1000, 2000), pairs 900/1000, 1100/1000, 2000/2000,
    # TPOT 8.8 / 8.0, E2E 600 / 500; fast: its one block, 1500 / 3000, 2 / 1, 300 / 100
    assert ratio == ["| open | 24.0 | fast | 0.500 | 0.500 | 0.500 [0.500-0.500, 0%] | 2.000 | 3.000 |",
                     "| open | 24.0 | off | 1.100 | 0.900, 1.100, 1.000 | 1.000 [0.900-1.100, 75%] | 1.100 | 1.200 |"]
    assert "| open | 24.0 | off | 1,100 | 900-2,000 | 3 | 8.8 | 600.0 |" in table.splitlines()


def test_show_of_a_call_that_measured_nothing_says_so_in_one_line(tmp_path):
    """A run_pair call whose phases all skipped for time writes no results file: --show says so (exit 1), no traceback."""
    missing = tmp_path / "results.jsonl"
    got = subprocess.run([sys.executable, str(ROOT / "bench/gpu/loads.py"), "--show", str(missing)],
                         capture_output=True, text=True)
    assert got.returncode == 1 and got.stdout == ""
    assert got.stderr.strip() == f"loads.py --show: {missing}: no such file (no run wrote a row)"


@pytest.mark.parametrize("ratios, expected", [
    ([0.95, 0.97], (0.96, 0.95, 0.97, 0.5)),                           # too few: the range, 50 %
    ([1.0, 0.9, 0.95, 0.99, 0.97], (0.97, 0.9, 1.0, 1 - 2 / 32)),      # 5: still the range, 93.75 %
    # 8 pairs: x(2)..x(7) holds the median with 1 - 2 * 9 / 256 = 93.0 % (x(3)..x(6): 71 %, under 90 %)
    ([0.84, 0.95, 0.96, 0.97, 0.97, 0.98, 0.99, 1.06], (0.97, 0.95, 0.99, 1 - 2 * 9 / 256)),
])
def test_the_pairs_median_interval_is_distribution_free_and_narrows_with_more_pairs(ratios, expected):
    """traffic_table.median_interval: the order statistics' interval for the median at >= 90 % coverage (binomial),
    so one slow-host pair (0.84, 1.06 above) moves an end by one rank, not by its size."""
    sys.path.insert(0, str(ROOT / "bench/gpu"))
    from traffic_table import median_interval
    got = median_interval(ratios)
    assert got == pytest.approx(expected)
    with pytest.raises(ValueError):
        median_interval([])


@pytest.mark.parametrize("args, env, expect", [((), {}, False), (("--b-first",), {}, True),
                                               ((), {"LOAD_B_FIRST": "1"}, True), ((), {"LOAD_B_FIRST": "0"}, False)])
def test_rows_say_whether_the_engine_beside_no_spec_started_first(tmp_path, monkeypatch, args, env, expect):
    monkeypatch.delenv("LOAD_B_FIRST", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    a = engine([])
    try:
        rows = run_loads("--shape", "steady", "--levels", "2", "--steady-len", "3", "--repeats", "1",
                         "--engines", f"nospec={a.server_port}", *args, out=tmp_path / "r.jsonl")
    finally:
        a.shutdown()
    assert rows and all(r.get("b_first", False) is expect for r in rows)


def test_show_gives_each_label_its_serving_engines_scheduler_counts(tmp_path):
    """Rows with proccpu's counts: no-spec rows read the `nospec` group, the others the one other group (daemon or
    twin); the scheduler's processes only (the daemon's own process is not the engine's); medians over the runs.
    Rows without counts (older calls) add no table."""
    def row(label, repeat, t, nospec, daemon):
        def counts(i):
            return {"nospec": {"sglang::schedul": nospec[i], "python3": 1000}, "daemon": {"sglang::schedul": daemon[i],
                                                                                          "specctl-daemon": 500}}
        return {"label": label, "shape": "closed", "level": 128, "repeat": repeat, "t_start": t, "tok_s": 1.0,
                "cpu_s": {"host_busy": 0.5, **counts(0), "preempted": counts(1), "minflt": counts(2)}}
    rows = [row("nospec", 0, 0, (5.0, 10, 100), (0.5, 1, 1)), row("off", 0, 1, (0.4, 2, 2), (6.0, 40, 300)),
            row("off", 1, 2, (0.4, 2, 2), (7.0, 60, 500)), row("nospec", 1, 3, (6.0, 30, 200), (0.5, 1, 1)),
            row("off", 2, 4, (0.4, 2, 2), (8.0, 90, 900))]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps({**r, "cpu_s": {"host_busy": 0.5}}) + "\n" for r in rows))
    show = [subprocess.run([sys.executable, str(ROOT / "bench/gpu/loads.py"), "--show", str(p)], capture_output=True,
                           text=True, timeout=60) for p in (path, old)]
    assert [r.returncode for r in show] == [0, 0], show[0].stderr
    table = show[0].stdout.partition("scheduler CPU s")[2].splitlines()
    assert [line for line in table if line.startswith("| closed")] == [
        "| closed | 128 | nospec | 5.50 | 20 | 150 |", "| closed | 128 | off | 7.00 | 60 | 500 |"]
    assert "scheduler CPU s" not in show[1].stdout


def test_a_group_named_like_a_rows_own_figure_is_refused():
    """cpu_s holds the groups beside its own keys: a group called `preempted` would be overwritten."""
    sys.path.insert(0, str(ROOT / "bench/gpu"))
    from proccpu import parse_groups
    with pytest.raises(ValueError, match="'preempted' is a name of the row's own figures"):
        parse_groups("nospec=12,preempted=13")
    assert parse_groups("nospec=12,daemon=13") == {"nospec": 12, "daemon": 13}


def test_a_daemon_state_in_the_rotation_is_specctl_at_its_socket_before_each_of_its_runs(tmp_path):
    """ROTATION=product (run_pair.sh): no-spec, always-on (the daemon pinned at its max) and the bandit (unpinned) of
    one engine in one rotation; each '@' state reaches the real daemon before its label's run, in the rotation's order."""
    import tempfile
    from tests.daemon_proc import DaemonProc
    d = Path(tempfile.mkdtemp(prefix="sc-loads-", dir="/tmp"))
    proc = DaemonProc(d, "--concurrency", "4")
    seen: list = []
    a, b = engine(seen), engine(seen)
    try:
        proc.wait_socket()
        rows = run_loads("--shape", "steady", "--levels", "2", "--steady-len", "3", "--repeats", "2",
                         "--socket", str(proc.socket), "--engines",
                         f"nospec={a.server_port};always={b.server_port}:@threshold pin 7;"
                         f"bandit={b.server_port}:@threshold unpin", out=tmp_path / "r.jsonl")
        history = proc.call("GET", "/history?limit=50")
        status = proc.call("GET", "/status")
    finally:
        a.shutdown(), b.shutdown()
        assert proc.stop() == 0
    assert [r["label"] for r in rows] == ["nospec", "always", "bandit", "bandit", "always", "nospec"]
    # the daemon was pinned for each always run and unpinned for each bandit run: twice each way, ending pinned
    changes = [(h["new"], "unpinned" in h["reason"]) for h in sorted(history, key=lambda h: h["id"])
               if "pinned" in h["reason"]]
    assert [unpin for _, unpin in changes] == [False, True, False], [h["reason"] for h in history]
    assert [new for new, unpin in changes if not unpin] == [7, 7]
    assert status["pinned"] is True and status["threshold"] == 7
    # no state was posted to either engine (the daemon took them), and the engines got the same prompts
    assert not any("server_args" in body for _, body in seen)


def test_a_daemon_state_without_a_socket_is_refused_before_any_request(tmp_path):
    seen: list = []
    a = engine(seen)
    try:
        res = subprocess.run([sys.executable, str(ROOT / "bench/gpu/loads.py"), "--shape", "steady", "--levels", "2",
                              "--engines", f"nospec={a.server_port};always={a.server_port}:@threshold pin 7",
                              "--out", str(tmp_path / "r.jsonl")], capture_output=True, text=True, timeout=60)
    finally:
        a.shutdown()
    assert res.returncode != 0 and "give its --socket" in res.stderr and not seen
