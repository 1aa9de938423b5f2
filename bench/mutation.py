"""Mutation testing (mutmut 3) of the decision code, within a 2-core machine's limits.

    python bench/mutation.py [--groups speculates,guard,writer,policies,prefill-cost,oracle-profile,oracle-eval,offpath,offlogprob,lean-resolve]
                             [--workdir DIR] [--out FILE]
                             [--mode full|survivors|collect]

Each group runs on its own scratch copy of the working tree (tracked and untracked, not ignored, files),
one mutant at a time (--max-children 1), and runs only its focused test files; mutmut picks, per
mutated function, the tests among them that call it (fastest first, stopping at the first failure).
Not part of CI's test command: a full run takes about an hour. Results: a table of scores per file,
and the diff of every surviving mutant, in --out (default: bench/results/mutation.md). Mutants
listed in bench/mutation_equivalent.toml (name -> why) count as equivalent and leave the score.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTMUT = "mutmut==3.8.1"

# The cheap decision-quality checks (the full file takes ~25 s; these ~4 s): a mutant that survives pays
# for every selected test, and a policy mutant's tests are run hundreds of times.
DQ = "tests/test_decision_quality.py::"
QUALITY = [DQ + "test_bandit_stays_within_2_percent_of_the_oracle_on_every_level[seed]",
           DQ + "test_bandit_stays_within_2_percent_of_the_oracle_on_every_level[crossover-a]",
           DQ + "test_bandit_stays_within_5_percent_of_the_oracle_on_every_trace_segment[coding-to-chat]",
           DQ + "test_no_level_beats_the_oracle_beyond_the_noise[seed]",
           DQ + "test_no_trace_segment_beats_the_oracle_beyond_the_noise[coding-to-chat-bandit]",
           DQ + "test_no_trace_segment_beats_the_oracle_beyond_the_noise[coding-to-chat-always]",
           DQ + "test_never_and_always_deliver_their_closed_form[never-seed]",
           DQ + "test_never_and_always_deliver_their_closed_form[always-seed]",
           DQ + "test_static_threshold_5_speculates_up_to_and_including_5[seed]",
           DQ + "test_bandit_stays_within_5_percent_of_the_oracle_on_every_trace_segment[rate-steps]",
           DQ + "test_a_policy_that_picks_the_worse_arm_falls_below_the_bar[seed]"]
ST = "tests/test_steady.py::"
STEADY_POLICY = [ST + t for t in ("test_prefill_intervals_dropped_measured_or_corrected",
                                  "test_indifference_margin_keeps_the_incumbent_on_near_ties",
                                  "test_stale_acceptance_is_bounded_by_the_highest_seen_lately",
                                  "test_decision_gain_is_the_traffic_weighted_gain_of_the_move")]
# test_openloop.py but its bench/gpu script test (bench/ is not in mutmut's copy)
OPENLOOP = ["tests/test_openloop.py::" + t for t in (
            "test_poisson_arrivals_follow_a_piecewise_rate_schedule",
            "test_batch_sizes_fluctuate_and_stay_under_max_batch_size",
            "test_prefill_lengthens_the_interval_of_the_batch_it_joins",
            "test_latencies_are_counted_as_bench_serving_does",
            "test_arrivals_do_not_depend_on_the_decisions",
            "test_profile_and_trace_open_loop_keys_are_checked",
            "test_evaluate_open_reports_policy_next_to_never_always_and_oracle",
            "test_closed_loop_results_did_not_move",
            "test_simulate_arrival_rate_json_table_and_plot",
            "test_simulate_rate_trace",
            "test_simulate_arrival_rate_bad_input_exit_2",
            "test_daemon_sim_engine_runs_an_open_loop",
            "test_open_loop_reconvergence_judges_the_batch_sizes_of_the_last_seconds")]
CLI = "tests/test_cli_simulate.py::"
CLI_FAST = ("test_simulate_json_rows_have_the_documented_keys", "test_oracle_beats_or_ties_static_extremes",
            "test_simulate_bad_input_one_line_exit_2", "test_shell_completion_script_is_generated",
            "test_status_text_falls_back_to_last_known_acceptance")
# test_finite.py but its prefill fit (it runs bench/gpu, not in mutmut's copy): finite.py reads openeval's
# mode_makers and latency_figures
FINITE = ["tests/test_finite.py::" + t for t in (
          "test_throughput_counts_the_drain_and_tpot_is_bench_servings",
          "test_bench_serving_requests_are_the_measured_ones",
          "test_evaluate_finite_runs_rate_x_seconds_requests_per_seed",
          "test_finite_option_is_validated",
          "test_finite_option_reports_each_rate_and_mode")]
STEADY_SIM = [ST + "test_bandit_within_3_percent_of_the_better_fixed_mode_at_the_middle_rate[crossover-a]",
              ST + "test_reconverges_within_20_s_after_each_shift[coding-to-chat]"]

# group -> (files mutated, mutant-name patterns (None: all), focused test files or node ids)
GROUPS: dict[str, tuple[list[str], list[str] | None, list[str]]] = {
    "speculates": (["controller/contract.py"], ["controller.contract.x_speculates*"],
                 ["tests/test_boundaries.py", "tests/test_plugin_cpu.py"]),
    "guard": (["controller/control/guard.py", "controller/control/guard_config.py", "controller/control/changes.py"], None,
              ["tests/test_guard.py", "tests/test_guard_budget.py", "tests/test_boundaries.py", "tests/test_config_notify.py",
               "tests/test_guard_history.py", "tests/test_steady.py"]),   # all of test_steady: the shift / flap tests
    "writer": (["state/writer.py", "state/items.py"], None,
               ["tests/test_state.py", "tests/test_actuation.py", "tests/test_writer.py", "tests/test_writer_durable.py"]),
    "policies": (["policies/*.py"], None,
                 ["tests/test_policies.py", "tests/test_policy_api.py", "tests/test_policy_learning.py", "tests/test_idle_gap.py",
                  "tests/test_model_policy.py", "tests/test_sglang_ema_policy.py", "tests/test_dominance.py",
                  "tests/test_decide_reasons.py", "tests/test_policy_edges.py", "tests/test_learner_main.py",
                  "tests/test_boundaries.py",
                  "tests/test_guard.py", *STEADY_POLICY, *QUALITY]),
    "oracle-profile": (["controller/sim/profile.py"], None,
                       ["tests/test_oracle.py", "tests/test_profile_format.py", "tests/test_profile_load.py",
                        "tests/test_evaluate.py", "tests/test_evaluate_main.py",
                        "tests/test_simulator.py", "tests/test_boundaries.py", "tests/test_cli_simulate.py",
                        *OPENLOOP, *STEADY_SIM, *QUALITY]),
    # The evaluation's own tests (each under ~2 s; the whole list ~15 s): a surviving mutant of run_segments
    # pays for every one of them. The decision-quality, steady, trace and open-loop re-convergence checks
    # (1.5-6 s each, ~30 s) leave this list: they judge the policies, and what they read of evaluate.py and
    # openeval.py the tests here pin down directly (tests/test_evaluate_units.py).
    "oracle-eval": (["controller/sim/evaluate.py", "controller/sim/openeval.py"], None,
                    ["tests/test_evaluate_units.py", "tests/test_evaluate.py", "tests/test_evaluate_main.py",
                     "tests/test_oracle.py", "tests/test_boundaries.py", "tests/test_simulator.py",
                     "tests/test_sim_prefill_chain.py",      # run_segments hands the runner's threshold to the core
                     *[t for t in OPENLOOP if "reconvergence" not in t],
                     "tests/test_openloop.py::test_one_token_requests_finish_at_their_prefill_and_the_clock_moves_on",
                     *[CLI + t for t in CLI_FAST], *FINITE]),
    # The bandit's move to threshold 0 where every prefill pays the draft's pass above 0 (prefill_cost.py, every
    # function): its own tests, and the learner's cheap ones (state saved and loaded, decide's reasons and edges),
    # which call observe / verdict on every sample and decision (~6 s in all).
    "prefill-cost": (["policies/prefill_cost.py"], None,
                     ["tests/test_prefill_cost.py", "tests/test_prefill_cost_units.py", "tests/test_learner_main.py", "tests/test_policy_edges.py",
                      "tests/test_decide_reasons.py"]),
    # What an interval is worth and which evidence settles a bucket (reward.py, the learner's dominance), the
    # plugin's idle pass that ends an interval, and the prefill cost's saved state: the 2026-12-03 change after the
    # H200 kept a fresh daemon at threshold 0 (bench/results/mutation-idle-gap-2026-12-03.md).
    "idle-gap": (["policies/learner.py", "policies/reward.py", "controller/plugin/telemetry.py", "policies/prefill_cost.py"],
                 ["policies.learner.xǁBucketLearnerǁreward__mutmut_*",
                  "policies.learner.xǁBucketLearnerǁdominated__mutmut_*", "policies.reward.x_*",
                  "controller.plugin.telemetry.xǁTelemetrySenderǁflush__mutmut_*",
                  "policies.prefill_cost.xǁPrefillCostǁstate__mutmut_*", "policies.prefill_cost.xǁPrefillCostǁload_state__mutmut_*"],
                 ["tests/test_idle_gap.py", "tests/test_dominance.py", "tests/test_learner_main.py", "tests/test_decide_reasons.py",
                  "tests/test_policy_learning.py", "tests/test_plugin_cpu.py", "tests/test_prefill_cost.py",
                  "tests/test_prefill_cost_units.py"]),
    # The off path's choices (offpath.py, every function) and the draft KV writer's support check and
    # build (draftkv.py). DraftKVWriter.write, write_prefill and _cat run torch, which the CPU test venv
    # lacks: their mutants are left out here (bench/gpu/run_consistency.sh checks them on a GPU, the
    # draft's KV against SGLang's own draft extend).
    "offpath": (["controller/plugin/offpath.py", "controller/plugin/draftkv.py"],
                ["controller.plugin.offpath.*", "controller.plugin.draftkv.x_unsupported_reason__mutmut_*",
                 "controller.plugin.draftkv.x_build__mutmut_*"],
                ["tests/test_offpath_cpu.py", "tests/test_plugin_cpu.py", "tests/test_fastoff_cpu.py"]),
    # The fast off path's logprobs (offlogprob.py, every function: unsupported_reason, keeping_logits and
    # fill). Nothing is left out: fill takes torch as an argument (the tests' numpy stand-in) and calls the
    # release's logprob function through _fns / _resolve (the tests' numpy port of it), so all of its logic
    # runs on CPU. What needs a GPU is SGLang's own function on real logits, outside this file:
    # bench/gpu/logprob_check.py compares the off path's logprobs with an engine without speculation.
    "offlogprob": (["controller/plugin/offlogprob.py"], ["controller.plugin.offlogprob.*"],
                   ["tests/test_fastoff_cpu.py", "tests/test_offlogprob_cpu.py"]),
    # what the engine starts at from its environment, and how a trial reads in status / unpin
    "startup-trial": (["controller/plugin/instance.py", "controller/cli/common.py"],
                      ["controller.plugin.instance.x_initial_threshold__mutmut_*",
                       "controller.plugin.instance.x_coalesce_batches__mutmut_*", "controller.plugin.instance.x_env_int__mutmut_*",
                       "controller.plugin.instance.x_shown__mutmut_*", "controller.cli.common.x_trial_note__mutmut_*"],
                      ["tests/test_plugin_cpu.py", "tests/test_draftkv_coalesce.py", "tests/test_cli_daemon.py"]),
    # The lean resolve (offresolve.py, every function: the future map's gather skipped for a batch the fast off path
    # takes, SGLang's gather redone where its path takes that batch after all) and the off path's choices it rests on:
    # which batch is an off decode batch, which the fast path takes (at the forward, and at the resolve before it),
    # and SGLang's own path restoring the skipped gather first.
    "lean-resolve": (["controller/plugin/offresolve.py", "controller/plugin/offpath.py"],
                     ["controller.plugin.offresolve.*", "controller.plugin.offpath.xǁOffPathǁ_off_decode__mutmut_*",
                      "controller.plugin.offpath.xǁOffPathǁ_ours__mutmut_*",
                      "controller.plugin.offpath.xǁOffPathǁtakes_resolved__mutmut_*",
                      "controller.plugin.offpath.xǁOffPathǁ_sglangs__mutmut_*"],
                     ["tests/test_offresolve.py", "tests/test_offpath_cpu.py", "tests/test_plugin_cpu.py",
                      "tests/test_draftkv_coalesce.py"]),    # _sglangs flushes the coalesced rows, in the draft's context
}
# mutmut 3 leaves every decorated function unmutated (but @staticmethod / @classmethod). In the group's
# scratch copy these decorators are applied after the module's last line instead (name = decorator(name):
# the same object once imported, as nothing in the module calls them at import), so that their bodies are
# mutated too: offlogprob's keeping_logits is a @contextmanager.
UNDECORATE: dict[str, dict[str, list[tuple[str, str]]]] = {
    "offlogprob": {"controller/plugin/offlogprob.py": [("contextmanager", "keeping_logits")]}}
# mutmut's CPU-time limit per mutant is (its tests' time + 1 s) x timeout_multiplier x 2 (default 15): for
# run_segments' mutants that loop forever (next_tick no longer advancing; its tests take ~16 s) that is
# ~8 min each. Here 3: six times the tests' time, far above what a mutant that only changes the numbers takes.
TIMEOUT_MULTIPLIER = {"oracle-eval": 3.0}
# Diagnostics only: mutating a log line changes no decision and no stored row.
DO_NOT_MUTATE_PATTERNS = [r"^\s*log\.(debug|info|warning|error|exception)\("]


def scratch_copy(dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.splitlines()
    for name in files:
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def undecorate(dest: Path, group: str) -> None:
    for path, pairs in UNDECORATE.get(group, {}).items():
        text = (dest / path).read_text()
        for decorator, name in pairs:
            defined = f"@{decorator}\ndef {name}("
            if text.count(defined) != 1:
                raise SystemExit(f"{path}: expected one @{decorator} def {name}(, to undecorate for mutmut")
            text = text.replace(defined, f"def {name}(") + f"\n\n{name} = {decorator}({name})\n"
        (dest / path).write_text(text)


def write_config(dest: Path, files: list[str], tests: list[str], timeout_multiplier: float | None = None) -> None:
    def lines(values):
        return "".join(f"\n    {v}" for v in values)
    (dest / "setup.cfg").write_text(
        "[mutmut]\n"
        f"source_paths ={lines(['controller', 'policies', 'state'])}\n"
        f"only_mutate ={lines(files)}\n"
        f"pytest_add_cli_args_test_selection ={lines(tests)}\n"
        f"pytest_add_cli_args ={lines(['-p', 'no:cacheprovider', '-m', 'not gpu'])}\n"
        f"do_not_mutate_patterns ={lines(DO_NOT_MUTATE_PATTERNS)}\n"
        "use_git_change_detection = false\n"
        + (f"timeout_multiplier = {timeout_multiplier}\n" if timeout_multiplier else ""))


def ensure_mutmut() -> None:
    if subprocess.run([sys.executable, "-c", "import mutmut"], capture_output=True).returncode:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", MUTMUT], check=True)


# mutmut's exit codes; -9 is a child killed for its memory (a mutant stuck in a loop that allocates,
# stopped by MEMORY_LIMIT): like a timeout, a mutant that ran away was detected.
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped",
          36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", -9: "timeout"}
MEMORY_LIMIT = 6 << 30      # address space of mutmut and its children: a runaway mutant must not starve the machine


def limit_memory() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def collect(dest: Path, patterns: list[str] | None) -> dict[str, dict[str, str]]:
    """{source file: {mutant name: status}} from mutmut's .meta files."""
    import fnmatch
    out: dict[str, dict[str, str]] = {}
    for meta in sorted((dest / "mutants").rglob("*.py.meta")):
        source = str(meta.relative_to(dest / "mutants"))[:-len(".meta")]
        codes = json.loads(meta.read_text()).get("exit_code_by_key", {})
        for name, code in codes.items():
            if patterns and not any(fnmatch.fnmatch(name, p) for p in patterns):
                continue
            out.setdefault(source, {})[name] = "not checked" if code is None else STATUS.get(code, "suspicious")
    return out


def run_group(group: str, workdir: Path, mode: str = "full") -> dict:
    """mode: full (a fresh copy, every mutant), survivors (the last run's copy with today's tests, only
    the mutants it did not kill), collect (report on the last run)."""
    files, patterns, tests = GROUPS[group]
    dest = workdir / group
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    t0 = time.time()
    names = patterns or []
    if mode == "survivors":
        names = [n for by_name in collect(dest, patterns).values() for n, v in by_name.items() if v != "killed"]
        shutil.rmtree(dest / "tests")
        shutil.copytree(ROOT / "tests", dest / "tests", ignore=shutil.ignore_patterns("__pycache__"))
        write_config(dest, files, tests, TIMEOUT_MULTIPLIER.get(group))
        (dest / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)    # re-map tests to functions
    elif mode == "full":
        scratch_copy(dest)
        undecorate(dest, group)
        write_config(dest, files, tests, TIMEOUT_MULTIPLIER.get(group))
    if mode != "collect" and (mode == "full" or names):
        with open(dest / "mutmut.log", "a" if mode == "survivors" else "w") as log:
            subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", "1", *names],
                           cwd=dest, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=limit_memory)
    results = collect(dest, patterns)
    known = json.loads((dest / "summary.json").read_text())["diffs"] if (dest / "summary.json").exists() else {}
    diffs = {}
    for by_name in results.values():
        for name, status in by_name.items():
            if status == "not checked":
                continue
            if status not in ("killed", "timeout") and name in known:
                diffs[name] = known[name]
            elif status not in ("killed", "timeout"):
                shown = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=dest, env=env,
                                       capture_output=True, text=True)
                diffs[name] = shown.stdout.strip()
    seconds = round(time.time() - t0)
    if mode == "collect" and (dest / "summary.json").exists():
        seconds = json.loads((dest / "summary.json").read_text())["seconds"]      # the run's, not this report's
    summary = {"group": group, "seconds": seconds, "results": results, "diffs": diffs}
    (dest / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def changed_lines(diff: str) -> str:
    return " / ".join(line[1:].strip() for line in diff.splitlines()
                      if line[:1] in "+-" and not line.startswith(("---", "+++")))


def counts(by_name: dict[str, str], equivalent: dict[str, str]) -> tuple[int, int, int, int, int]:
    """(mutants, killed, equivalent, not killed, not checked); a timeout counts as killed (the mutant was
    detected); "not checked" are the mutants a run stopped before reaching (a partial run)."""
    killed = sum(v in ("killed", "timeout") for v in by_name.values())
    unchecked = sum(v == "not checked" for v in by_name.values())
    equiv = sum(v not in ("killed", "timeout", "not checked") and k in equivalent for k, v in by_name.items())
    return len(by_name), killed, equiv, len(by_name) - killed - equiv - unchecked, unchecked


def score_rows(summaries: list[dict], equivalent: dict[str, str]) -> list[str]:
    rows = ["| group | file | mutants | killed | equivalent | not killed | not checked | "
            "score (killed / checked non-equivalent) |",
            "|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        total = [0, 0, 0, 0, 0]
        for source, by_name in s["results"].items():
            c = counts(by_name, equivalent)
            total = [a + b for a, b in zip(total, c)]
            rows.append(f"| {s['group']} | {source} | {c[0]} | {c[1]} | {c[2]} | {c[3]} | {c[4]} | "
                        f"{100 * c[1] / max(c[0] - c[2] - c[4], 1):.1f} % |")
        if len(s["results"]) > 1:
            rows.append(f"| **{s['group']}** | all | {total[0]} | {total[1]} | {total[2]} | {total[3]} | {total[4]} | "
                        f"**{100 * total[1] / max(total[0] - total[2] - total[4], 1):.1f} %** |")
    return rows


PREAMBLE = """Mutation testing with mutmut 3.8.1 (mutmut's own operators: comparison and arithmetic operators,
numbers, strings, keywords, arguments removed or set to None). Each group runs on a scratch copy, one
mutant at a time, against its focused tests (bench/mutation.py GROUPS); a mutant is killed when one of
them fails, when it runs past mutmut's timeout, or when it runs out of its 6 GiB of address space (a
mutant looping and allocating). Lines that only log are not mutated. Equivalent
mutants (no test can tell them from the original) are listed in bench/mutation_equivalent.toml with
the reason, and leave the score. Regenerate: `python bench/mutation.py` (about an hour of one core),
or `--mode survivors` to re-check only what the last run did not kill."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", default=",".join(GROUPS))
    ap.add_argument("--workdir", default="/tmp/spec-controller-mutation")
    ap.add_argument("--out", default=str(ROOT / "bench/results/mutation.md"))
    ap.add_argument("--mode", choices=("full", "survivors", "collect"), default="full",
                    help="full: every mutant on a fresh copy; survivors: re-run what the last run did not kill, "
                         "with the current tests; collect: only report on the last runs in --workdir")
    args = ap.parse_args()
    ensure_mutmut()
    equivalent = tomllib.loads((ROOT / "bench/mutation_equivalent.toml").read_text()).get("equivalent", {})
    workdir = Path(args.workdir)
    summaries = []
    for group in args.groups.split(","):
        summaries.append(run_group(group, workdir, args.mode))
        print(f"{group}: done in {summaries[-1]['seconds']} s", flush=True)
    lines = ["# Mutation testing of the decision code", "", PREAMBLE, "",
             *score_rows(summaries, equivalent), "",
             "Wall time of each group's last run (2 cores, shared with other work): "
             + ", ".join(f"{s['group']} {s['seconds']} s" for s in summaries) + ".", ""]
    for title, pick in (("Not killed", lambda n: n not in equivalent), ("Equivalent", lambda n: n in equivalent)):
        names = [(n, d) for s in summaries for n, d in sorted(s["diffs"].items())
                 if pick(n) and s["results"].get(next((f for f in s["results"] if n in s["results"][f]), ""),
                                                  {}).get(n) not in ("killed", "timeout", "not checked")]
        lines += [f"## {title} ({len(names)})", ""]
        for n, d in names:
            lines.append(f"- `{n}`: `{changed_lines(d)}`" + (f" — {equivalent[n]}" if n in equivalent else ""))
        lines.append("")
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(score_rows(summaries, equivalent)))


if __name__ == "__main__":
    main()
