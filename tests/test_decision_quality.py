"""Decision quality in virtual time, seeded: the bandit against the oracle on every shipped profile and
trace, the oracle never beaten by more than the simulator's noise allows, static thresholds against
their closed form (tests/expected.py), and a policy that picks the worse arm failing the same bar.

Rate traces (the open loop) are held to the same bar per segment through openeval.evaluate_open. The
oracle's upper envelope is checked on the closed loop only: in the open loop a segment's tokens/s
includes the backlog of the one before ('always' drains its queue from the busy segments at 1.6 x the
oracle's rate on rate-steps' evening), so a ratio above 1 there says nothing about the oracle. The
open loop's bandit against the better fixed mode at each profile's middle rate: tests/test_steady.py."""
from __future__ import annotations

import pytest

import policies
from controller.sim.evaluate import evaluate, policy_runner, run_segments, sweep_segments
from controller.sim.openeval import evaluate_open
from controller.sim.profile import TRACE_DIR, Segment, builtin_names, load_profile, load_trace
from policies.base import OFF, SPEC
from policies.thompson import ThompsonPolicy
from tests.expected import noise_eps, static_throughput, static_tolerance

PROFILES = builtin_names()
TRACES = builtin_names(TRACE_DIR)
CLOSED_TRACES = [t for t in TRACES if not load_trace(t).segments[0].open_loop]
SECONDS = 60.0          # per level; at 20 s the bandit's lowest level falls to 0.970 on crossover-b
PROFILE_BAR, TRACE_BAR = 0.98, 0.95


def test_every_shipped_profile_and_trace_is_covered():
    assert {"seed", "crossover-a", "crossover-b", "h200-2b6"} <= set(PROFILES)
    assert {"load-steps", "coding-to-chat", "mixed-shift"} <= set(CLOSED_TRACES)
    assert "rate-steps" in TRACES and "rate-steps" not in CLOSED_TRACES


def sweep(profile) -> list[Segment]:
    return sweep_segments(profile.concurrency, SECONDS)


@pytest.fixture(scope="session")
def results():
    """Evaluations shared by the tests of one pytest session (a fixture, not a module-level cache: a
    mutation-testing child forked from a process that ran the suite must not inherit old results)."""
    cache: dict[tuple, dict] = {}

    def get(kind: str, name: str, policy: str = "bandit") -> dict:
        if (kind, name, policy) not in cache:
            if kind == "profile":
                prof = load_profile(name)
                segments = sweep(prof)
            else:
                trace = load_trace(name)
                prof, segments = load_profile(trace.profile), trace.segments
            run = evaluate_open if segments[0].open_loop else evaluate
            cache[kind, name, policy] = run(prof, segments, policy, seed=0)
        return cache[kind, name, policy]
    return get


def lowest(result: dict) -> float:
    return min(r["ratio"] for r in result["rows"])


def above_the_oracle(result: dict, profile, segments) -> list[str]:
    """Rows whose ratio exceeds 1 + eps (tests/expected.noise_eps): each one a failure of the oracle."""
    out = []
    for row, seg in zip(result["rows"], segments):
        eps = noise_eps(profile, seg.concurrency, row["seconds"], seg.mean_accept_length)
        if row["ratio"] > 1.0 + eps:
            out.append(f"{row['segment']}: {row['ratio']:.4f} > 1 + {eps:.4f}")
    return out


@pytest.mark.parametrize("name", PROFILES)
def test_bandit_stays_within_2_percent_of_the_oracle_on_every_level(results, name):
    assert lowest(results("profile", name)) >= PROFILE_BAR, results("profile", name)["rows"]


@pytest.mark.parametrize("name", TRACES)
def test_bandit_stays_within_5_percent_of_the_oracle_on_every_trace_segment(results, name):
    assert lowest(results("trace", name)) >= TRACE_BAR, results("trace", name)["rows"]


@pytest.mark.parametrize("name", PROFILES)
def test_no_level_beats_the_oracle_beyond_the_noise(results, name):
    prof = load_profile(name)
    assert above_the_oracle(results("profile", name), prof, sweep(prof)) == []


@pytest.mark.parametrize("policy", ["bandit", "always", "never"])
@pytest.mark.parametrize("name", CLOSED_TRACES)
def test_no_trace_segment_beats_the_oracle_beyond_the_noise(results, name, policy):
    """Acceptance shifts on the traces: an oracle that ignored the live accept length is beaten here."""
    trace = load_trace(name)
    assert above_the_oracle(results("trace", name, policy), load_profile(trace.profile), trace.segments) == []


# --- static thresholds against their closed form ------------------------------------------------
def static_run(prof, policy: str, params: dict, threshold: int, concurrency: int, seconds: float) -> float:
    """One fresh level through the real loop and guard, started at the policy's own threshold."""
    make = policy_runner(policy, params, prof, 0, initial_threshold=threshold)
    return run_segments(prof, [Segment(seconds, concurrency)], make, seed=0)[0].throughput


STATIC_SECONDS = 40.0


@pytest.mark.parametrize("name", PROFILES)
@pytest.mark.parametrize("policy", ["never", "always"])
def test_never_and_always_deliver_their_closed_form(name, policy):
    prof = load_profile(name)
    spec = policy == "always"
    for c in prof.concurrency:
        got = static_run(prof, policy, {}, prof.max_batch_size if spec else 0, c, STATIC_SECONDS)
        want = static_throughput(prof, c, spec, STATIC_SECONDS)
        assert abs(got / want - 1) <= static_tolerance(prof, c, spec, STATIC_SECONDS), (c, got, want)


@pytest.mark.parametrize("name", PROFILES)
def test_static_threshold_5_speculates_up_to_and_including_5(name):
    prof = load_profile(name)
    for c in (4, 5, 6):
        spec = c <= 5
        got = static_run(prof, "fixed", {"threshold": 5}, 5, c, STATIC_SECONDS)
        want = static_throughput(prof, c, spec, STATIC_SECONDS)
        other = static_throughput(prof, c, not spec, STATIC_SECONDS)
        tol = static_tolerance(prof, c, spec, STATIC_SECONDS)
        assert abs(other / want - 1) > 2 * tol        # the two modes are told apart at this level
        assert abs(got / want - 1) <= tol, (c, got, want)


# --- the bar catches a policy that picks the worse arm --------------------------------------------
class AlwaysAllows:
    """No TrialHold: the mutant below explores the worse arm at will."""

    def allows(self, *args) -> bool:
        return True

    def start_over(self, b: int) -> None:
        pass


class WorseArmThompson(ThompsonPolicy):
    """Thompson sampling with its comparison flipped: it explores the arm its draws rank lower. Without the spacing
    of trials of a clear loss (policies.staleness.TrialHold), which would limit what this costs and hide it from the
    bar: the control is of the bar, not of the hold (the flipped draw itself is caught by the learner's own tests,
    test_policy_learning and test_stale_accept_probe)."""

    name = "worse-arm-thompson"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.hold = AlwaysAllows()

    def choose_arm(self, b: int, now: float, incumbent: int) -> int:
        draws = [self.draw(OFF, b, now), self.draw(SPEC, b, now)]
        draws[incumbent] *= 1.0 + self.params["indifference"]
        return SPEC if draws[SPEC] < draws[OFF] else OFF


@pytest.mark.parametrize("name", ["seed", "crossover-a", "crossover-b"])
def test_a_policy_that_picks_the_worse_arm_falls_below_the_bar(name, monkeypatch):
    monkeypatch.setitem(policies.POLICIES, WorseArmThompson.name, WorseArmThompson)
    prof = load_profile(name)
    assert lowest(evaluate(prof, sweep(prof), WorseArmThompson.name, seed=0)) < PROFILE_BAR


@pytest.mark.parametrize("trace, seed", [("mixed-shift", 3), ("coding-to-chat", 3), ("coding-to-chat", 4)])
def test_bandit_reconverges_within_20_s_on_the_seeds_that_went_slow(trace, seed):
    """Issue 13: re-convergence after a real shift <= 20 s. A guard change of 2026-12-01 (a trial kept on while
    the move to its threshold stabilised) took these to 50.5 / 22.9 / 23.0 s (they were 6.0 / 8.0 / 6.5)."""
    from controller.sim.evaluate import evaluate
    from controller.sim.profile import load_profile, load_trace
    tr = load_trace(trace)
    res = evaluate(load_profile(tr.profile or "seed"), tr.segments, "bandit", seed=seed)
    got = [r["reconverge_s"] for r in res["rows"]]
    assert None not in got and max(got) <= 20.0, got       # None: not re-converged within the segment


@pytest.mark.parametrize("seed", range(5))
def test_bandit_reconverges_within_20_s_on_every_pass_of_the_looped_mixed_shift_trace(seed):
    """The daemon loops its trace. On the later passes through mixed-shift's C=96 phase the acceptance estimate
    is stale (nothing speculated at 96 since the C=8 phase at accept 2.0) and only the stale-acceptance trial
    shows that speculation pays there again; on the third pass the guard's change budget, spent by the
    exploratory trials of the passes before, held that trial back: 43.9 / 50.9 / never / 55.9 / never
    engine s on seeds 0-4 (the second pass 5.9 s). Three passes, engine time."""
    tr = load_trace("mixed-shift")
    res = evaluate(load_profile(tr.profile), list(tr.segments) * 3, "bandit", seed=seed)
    slow = {(f"pass {i // len(tr.segments) + 1}", r["segment"]): r["reconverge_s"] for i, r in enumerate(res["rows"])
            if r["reconverge_s"] is None or r["reconverge_s"] > 20.0}
    assert not slow, slow


@pytest.mark.parametrize("seed", [5, 11, 14, 18])
def test_bandit_reconverges_within_20_s_on_coding_to_chat_where_the_probe_ended_too_soon(seed):
    """chat C=2 -> coding C=12: the probe of speculation at batch 12 ran one tick, the accept estimate only
    went 1.68 -> 2.19 (mostly chat's 1.7), speculation read -5 % where at coding's 2.6 it pays, and with nothing
    speculating any more the estimate froze: 25.5 / 20.4 s on seeds 5 / 11, never on 14 / 18 (at 8193841)."""
    tr = load_trace("coding-to-chat")
    got = [r["reconverge_s"] for r in evaluate(load_profile(tr.profile), tr.segments, "bandit", seed=seed)["rows"]]
    assert None not in got and max(got) <= 20.0, got
