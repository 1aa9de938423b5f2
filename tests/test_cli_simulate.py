import json

import pytest
from click.testing import CliRunner

from controller.cli.main import cli


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_simulate_json_rows_have_the_documented_keys():
    res = run("simulate", "--profile", "crossover-a", "--policy", "bandit", "--concurrency", "1,32",
              "--seconds", "20", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [r["concurrency"] for r in out["rows"]] == [1, 32]
    for r in out["rows"]:
        assert {"throughput_tok_s", "oracle_tok_s", "ratio", "spec_share", "final_threshold"} <= set(r)
        assert r["ratio"] == pytest.approx(r["throughput_tok_s"] / r["oracle_tok_s"], abs=1e-3)


def test_oracle_beats_or_ties_static_extremes():
    rows = {}
    for pol in ("always", "never"):
        res = run("simulate", "--profile", "crossover-a", "--policy", pol, "--concurrency", "1,64",
                  "--seconds", "20", "--json")
        rows[pol] = json.loads(res.output)["rows"]
    for a, n in zip(rows["always"], rows["never"]):
        assert a["oracle_tok_s"] >= 0.99 * max(a["throughput_tok_s"], n["throughput_tok_s"])
    assert rows["always"][0]["ratio"] > rows["never"][0]["ratio"]      # C=1: spec wins
    assert rows["always"][1]["ratio"] < rows["never"][1]["ratio"]      # C=64: spec loses


def test_simulate_trace_reports_segments_and_best_static():
    res = run("simulate", "--trace", "coding-to-chat", "--json")
    out = json.loads(res.output)
    assert res.exit_code == 0 and out["trace"] == "coding-to-chat" and out["profile"] == "crossover-a"
    assert [r["segment"] for r in out["rows"]][:2] == ["coding C=8", "chat C=8"]
    assert "threshold" in out["best_static"]


def test_simulate_table_and_plot(tmp_path):
    png = tmp_path / "p.png"
    res = run("simulate", "--profile", "seed", "--concurrency", "1,4", "--seconds", "10", "--plot", str(png))
    assert res.exit_code == 0
    assert "oracle tok/s" in res.output and png.read_bytes()[:4] == b"\x89PNG"
    assert res.stderr.splitlines() == [f"wrote {png}"]            # said, as `specctl plot` says it (helper-56)


@pytest.mark.parametrize("args,needle", [
    (["--profile", "nope"], "unknown profile 'nope'"),
    (["--policy", "nope"], "unknown policy 'nope'"),
    (["--param", "c=-3", "--policy", "ucb"], "parameter c='-3' out of range"),
    (["--param", "novalue"], "expected NAME=VALUE"),
    (["--concurrency", "1,x"], "--concurrency"),
    (["--trace", "nope"], "unknown trace 'nope'"),
    (["--seed", "99999999999"], "--seed 99999999999 out of range (allowed 0 .. 4294967295)"),
])
def test_simulate_bad_input_one_line_exit_2(args, needle):
    res = run("simulate", "--seconds", "5", *args)
    assert res.exit_code == 2
    lines = [l for l in res.output.splitlines() if l.strip()]
    assert len(lines) == 1 and needle in lines[0], res.output


def test_shell_completion_script_is_generated():
    res = CliRunner().invoke(cli, [], prog_name="specctl", env={"_SPECCTL_COMPLETE": "bash_source"})
    assert res.exit_code == 0 and "_specctl_completion" in res.output and "complete " in res.output


def test_shell_completion_offers_the_policy_names_after_policy_set():
    """helper-142: `specctl policy set <TAB>` offered nothing; the completion bash runs (COMP_WORDS, COMP_CWORD)."""
    env = {"_SPECCTL_COMPLETE": "bash_complete", "COMP_WORDS": "specctl policy set b", "COMP_CWORD": "3"}
    res = CliRunner().invoke(cli, [], prog_name="specctl", env=env)
    assert res.exit_code == 0 and res.output.split() == ["plain,bandit"], res.output
    env.update(COMP_WORDS="specctl policy set ", COMP_CWORD="3")
    offered = {w.split(",", 1)[1] for w in CliRunner().invoke(cli, [], prog_name="specctl", env=env).output.split()}
    from policies import ALIASES, POLICIES
    assert offered == {*POLICIES, *ALIASES}


def test_status_text_falls_back_to_last_known_acceptance():
    from controller.cli.status import render_status
    st = {"daemon": {"running": True, "pid": 1, "uptime_s": 5, "healthy": True}, "engine": {"engine": "sim"},
          "threshold": 0, "pinned": False, "policy": {"name": "bandit", "policy": "thompson"},
          "mean_accept_length": None, "acceptance_rate": None, "last_accept_length": 2.5, "last_accept_age_s": 42.0,
          "tok_per_s": 100.0, "spec_share": 0.0, "samples": {"per_s": 1.0, "total": 9, "dropped": 0}}
    assert "the last one's accept length 2.50, 42 s ago" in render_status(st)
    st["mean_accept_length"], st["acceptance_rate"] = 2.25, 0.4
    assert "mean accept length 2.25, rate 40.0%" in render_status(st)


@pytest.mark.parametrize("flag", ["--profile", "--trace", "--concurrency", "--arrival-rate"])
@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_value_is_refused_not_taken_for_the_default(flag, value):
    """`--trace "$TRACE"` with the variable unset ran the default concurrency sweep on the seed profile (an empty
    --arrival-rate: the closed loop), with nothing said: a table of some other simulation, exit 0."""
    res = run("simulate", "--seconds", "1", flag, value)
    assert res.exit_code == 2 and res.stdout == "", res.output
    assert res.stderr.splitlines() == [f"specctl: {flag} is empty: give a value, or leave {flag} out for the default"]
