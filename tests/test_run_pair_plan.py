"""bench/gpu/run_pair.sh's plan: a call whose first phase cannot fit after the engines' start is refused before any
engine starts (12-04e's call 2 spent 220 s of device time on "skip closedab"), by the same phase_need that each phase's
own check uses. Runs the script's own functions in bash, sed-extracted (its head installs wheels and needs a GPU)."""
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu" / "run_pair.sh"
HARNESS = r"""
set -u
say() { echo "SAY $*"; }
DEADLINE=${DEADLINE_S:-560}; RUNS=$((2 * ${REPEATS:-2})); SIDE=1; MAXBS=128
eval "$(sed -n '/^KVG=/,/^LEANALLOC=/p;/^BOTH_YES=/,/^SIDE_YES=/p' "$SCRIPT")"
eval "$(sed -n '/^ab_rotation()/,/^}/p' "$SCRIPT")"
eval "$(sed -n '/^OPEN_S=/,/^fi$/p' "$SCRIPT")"
echo "went on: $first needs $need"
"""


def plan(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", HARNESS], env={"PATH": "/usr/bin:/bin", "SCRIPT": str(SCRIPT), **env},
                          capture_output=True, text=True, timeout=30)


CLOSED = {"SHAPES": "closedab", "CLOSED_LEVELS": "48,128", "CLOSED_WARMUP": "5", "CLOSED_S": "12"}


@pytest.mark.parametrize("rotation, repeats, deadline, need, started", [
    ("defer", "3", "585", 408, False),      # 12-04e call 2: three labels, 3 x 3 x 21 x 2 + 30
    ("defer", "2", "590", 282, True),       # its call 3
    ("pair", "3", "585", 282, True),        # two labels
    ("fast", "3", "430", 408, False),
    ("product", "3", "585", 408, False),    # no-spec, always, bandit: three labels
    ("product", "2", "585", 282, True),
])
def test_the_first_phase_must_fit_after_the_engines_start(rotation, repeats, deadline, need, started):
    got = plan(ROTATION=rotation, REPEATS=repeats, DEADLINE_S=deadline, **CLOSED)
    assert got.returncode == (0 if started else 2), got.stderr
    if started:
        assert got.stdout.strip() == f"went on: closedab needs {need}"
    else:
        assert got.stdout.strip() == (f"SAY not started: closedab needs {need} s after the engines are up "
                                      f"(~200 s, ENGINES_UP_S), DEADLINE_S is {deadline}")


def test_with_fit_repeats_the_first_phase_need_fit_only_once():
    """FIT_REPEATS=1: the call starts when one repeat of its first phase fits (12-04e call 2's 408 s at 3 repeats is
    156 s at one), and is still refused when not even that does."""
    got = plan(ROTATION="defer", REPEATS="3", DEADLINE_S="585", FIT_REPEATS="1", **CLOSED)
    assert got.returncode == 0 and got.stdout.strip() == "went on: closedab needs 156", got.stdout + got.stderr
    assert plan(ROTATION="defer", REPEATS="3", DEADLINE_S="350", FIT_REPEATS="1", **CLOSED).returncode == 2


FIT = r"""
set -u
say() { echo "SAY $*"; }; fits() { [ "$(left)" -gt "$1" ] || { echo "SAY skip $2"; return 1; }; }
left() { echo "$LEFT"; }; load_sum() { echo "load repeats ${REPEATS}"; echo "load args $*"; }
internal_state() { echo "internal_state $*"; }; specctl() { echo "specctl $*"; }; MAXBS=128; SC=/sc
DEADLINE=600; SUM=/dev/null; R=/dev/null; AB=x; SIDE=1; RUNS=6
eval "$(sed -n '/^KVG=/,/^LEANALLOC=/p;/^BOTH_YES=/,/^SIDE_YES=/p' "$SCRIPT")"
eval "$(sed -n '/^ab_rotation()/,/^}/p' "$SCRIPT")"
eval "$(sed -n '/^restore_ab()/,/^}/p' "$SCRIPT")"
eval "$(sed -n '/^OPEN_S=/,/^}$/p' "$SCRIPT")"
source "$PHASES_SH"
run_phase closedab; echo "after: REPEATS=$REPEATS"
"""


@pytest.mark.parametrize("fit, left, said", [
    ("1", "289", ["SAY closedab: 3 repeats need 486 s, 289 left: 1 repeats (FIT_REPEATS=1)", "load repeats 1"]),
    ("1", "400", ["SAY closedab: 3 repeats need 486 s, 400 left: 2 repeats (FIT_REPEATS=1)", "load repeats 2"]),
    ("1", "500", ["load repeats 3"]),                           # fits whole: nothing changed
    ("1", "150", ["SAY skip closedab"]),                        # not one repeat (152 s): skipped as before
    ("0", "400", ["SAY skip closedab"]),                        # without it: skipped as before
    ("", "400", ["SAY skip closedab"]),                         # unset (empty): off
    ("1", "486", ["SAY closedab: 3 repeats need 486 s, 486 left: 2 repeats (FIT_REPEATS=1)", "load repeats 2"]),
    ("1", "334", ["SAY closedab: 3 repeats need 486 s, 334 left: 1 repeats (FIT_REPEATS=1)", "load repeats 1"]),
    ("1", "335", ["SAY closedab: 3 repeats need 486 s, 335 left: 2 repeats (FIT_REPEATS=1)", "load repeats 2"]),
    ("1", "182", ["SAY skip closedab"]),                        # one repeat needs 182: fits takes more than that
])
def test_fit_repeats_runs_the_repeats_that_fit_and_leaves_repeats_as_it_was(fit, left, said):
    """PART=b's closed loop (4 levels, 2 labels, 5 + 10 s): 3 repeats need 486 s, one 152 s."""
    env = {"PATH": "/usr/bin:/bin", "SCRIPT": str(SCRIPT), "PHASES_SH": str(PHASES_SH), "LEFT": left, "REPEATS": "3",
           "FIT_REPEATS": fit, "ROTATION": "pair", "SHAPES": "closedab", "CLOSED_LEVELS": "1,16,48,128",
           "CLOSED_WARMUP": "5", "CLOSED_S": "10"}
    got = subprocess.run(["bash", "-c", FIT], env=env, capture_output=True, text=True, timeout=30)
    lines = [x for x in got.stdout.splitlines() if x.startswith(("SAY closedab:", "SAY skip", "load rep", "after"))]
    assert lines == said + ["after: REPEATS=3"], got.stdout + got.stderr


@pytest.mark.parametrize("phase, left, said", [
    ("openab", "200", ["SAY openab: 3 repeats need 354 s, 200 left: 1 repeats (FIT_REPEATS=1)", "load repeats 1"]),
    ("steadyab", "80", ["SAY steadyab: 3 repeats need 102 s, 80 left: 2 repeats (FIT_REPEATS=1)", "load repeats 2"]),
])
def test_fit_repeats_serves_every_ab_phase(phase, left, said):
    """openab (3 rates, 10 + 8 s) and steadyab (4 levels x 3 s) fit their repeats as closedab does."""
    env = {"PATH": "/usr/bin:/bin", "SCRIPT": str(SCRIPT), "PHASES_SH": str(PHASES_SH), "LEFT": left, "REPEATS": "3",
           "FIT_REPEATS": "1", "ROTATION": "pair", "SHAPES": phase, "OPEN_RATES": "2,12,24", "OPEN_S": "10", "TOK": "tok"}
    got = subprocess.run(["bash", "-c", FIT.replace("run_phase closedab", f"run_phase {phase}")], env=env,
                         capture_output=True, text=True, timeout=30)
    lines = [x for x in got.stdout.splitlines() if x.startswith((f"SAY {phase}:", "SAY skip", "load rep", "after"))]
    assert lines == said + ["after: REPEATS=3"], got.stdout + got.stderr


def test_the_start_check_at_one_repeat_leaves_repeats_to_the_phases():
    """FIT_REPEATS=1 reckons the start at one repeat in a subshell: the phases still see REPEATS as given."""
    shown = HARNESS.replace('echo "went on: $first needs $need"', 'echo "went on: $first needs $need; REPEATS=$REPEATS"')
    got = subprocess.run(["bash", "-c", shown], env={"PATH": "/usr/bin:/bin", "SCRIPT": str(SCRIPT), "ROTATION": "defer",
                                                     "REPEATS": "3", "DEADLINE_S": "585", "FIT_REPEATS": "1", **CLOSED},
                         capture_output=True, text=True, timeout=30)
    assert got.stdout.strip() == "went on: closedab needs 156; REPEATS=3", got.stdout + got.stderr


@pytest.mark.parametrize("given, fit", [(None, "1"), ("0", "0")])
def test_issue_12_fits_repeats_unless_told_not_to(given, fit):
    setup = subprocess.run(["bash", "-c", 'source <(sed -n "/^case/,/^export FIT_REPEATS/p" "$ISSUE12"); env'],
                           env={"PATH": "/usr/bin:/bin", "ISSUE12": str(ISSUE12), "PART": "b",
                                **({"FIT_REPEATS": given} if given else {})}, capture_output=True, text=True, timeout=30)
    assert f"FIT_REPEATS={fit}" in setup.stdout.splitlines(), setup.stdout + setup.stderr


def test_the_engines_start_time_is_the_operators_to_say_and_only_the_first_phase_decides():
    assert plan(ROTATION="defer", REPEATS="3", DEADLINE_S="585", ENGINES_UP_S="170", **CLOSED).returncode == 0
    later = plan(ROTATION="pair", REPEATS="2", DEADLINE_S="400", SHAPES="cprofile,closedab,steadyab",
                 CLOSED_LEVELS="1,16,48,128", CLOSED_WARMUP="5", CLOSED_S="15")
    assert later.returncode == 0 and later.stdout.strip() == "went on: cprofile needs 100"


@pytest.mark.parametrize("shape, env, need", [
    ("openab", {"OPEN_RATES": "2,12,24", "OPEN_S": "10", "ROTATION": "pair"}, 2 * 2 * 3 * 18 + 30),
    ("steadyab", {"ROTATION": "fast"}, 3 * 2 * 12 + 30),
    ("open", {"OPEN_RATES": "24", "OPEN_S": "10"}, 4 * 18),
    ("closed", {"CLOSED_LEVELS": "128", "CLOSED_WARMUP": "5", "CLOSED_S": "15"}, 4 * 23 + 30),
    ("warm", {}, 2 * 125),                           # both engines, WARM_S (120) each
    ("warm", {"WARM_S": "300"}, 2 * 305),
])
def test_each_phases_need(shape, env, need):
    got = plan(SHAPES=shape, REPEATS="2", DEADLINE_S="900", **env)
    assert got.stdout.strip() == f"went on: {shape} needs {need}"


ISSUE12 = SCRIPT.parent / "run_issue12.sh"


@pytest.mark.parametrize("part", ["a", "b", "all"])
def test_issue_12s_table_fits_the_calls_it_promises(part):
    """run_issue12.sh: PART=a and PART=b each fit one 600 s device call after a cold start (~250 s); all of it
    fits its own deadline. Every phase's need summed with run_pair's own phase_need."""
    harness = HARNESS.replace('echo "went on: $first needs $need"', """total=0
for phase in ${SHAPES//,/ }; do total=$((total + $(phase_need "$phase"))); done
echo "$total $DEADLINE" """)
    setup = subprocess.run(["bash", "-c", 'source <(sed -n "/^case/,/^export DEADLINE_S/p" "$ISSUE12"); env'],
                           env={"PATH": "/usr/bin:/bin", "ISSUE12": str(ISSUE12), "PART": part},
                           capture_output=True, text=True, timeout=30)
    env = dict(line.split("=", 1) for line in setup.stdout.splitlines() if "=" in line)
    got = subprocess.run(["bash", "-c", harness], env={**env, "SCRIPT": str(SCRIPT)}, capture_output=True, text=True,
                         timeout=30)
    total, deadline = map(int, got.stdout.split())
    assert total + 250 <= deadline and (part == "all" or deadline <= 600), (total, deadline)
    assert set(env["SHAPES"].split(",")) == {"a": {"steadyab", "openab"}, "b": {"closedab"},
                                             "all": {"steadyab", "openab", "closedab"}}[part]


def rotation(name: str) -> tuple[dict[str, str], str, str]:
    """ab_rotation's labels for ROTATION=name ({label: 'port[:state]'}), the state it leaves and its label count."""
    shown = HARNESS.replace('echo "went on', 'ab_rotation; echo "AB=$AB|$AB_RESTORE|$NAB"; echo "went on')
    out = subprocess.run(["bash", "-c", shown], env={"PATH": "/usr/bin:/bin", "SCRIPT": str(SCRIPT), "ROTATION": name,
                                                     "REPEATS": "1", "DEADLINE_S": "590", **CLOSED},
                         capture_output=True, text=True, timeout=30).stdout
    ab, restore, nab = out.split("AB=", 1)[1].splitlines()[0].split("|")
    return dict(part.split("=", 1) for part in ab.split(";")), restore, nab


def test_leanall_rotates_off_against_both_lean_switches_on_and_leaves_them_off():
    """ROTATION=leanall: the label leanall has the lean resolve and the held prompts on, off has both off, and so does
    the state the engine is left in; three labels, so its budget counts three."""
    assert plan(ROTATION="leanall", REPEATS="3", DEADLINE_S="585", **CLOSED).returncode == 2    # 408 s: no fit
    assert plan(ROTATION="leanall", REPEATS="2", DEADLINE_S="590", **CLOSED).stdout.strip() == "went on: closedab needs 282"
    labels, restore, nab = rotation("leanall")
    assert set(labels) == {"nospec", "off", "leanall"} and nab == "3"
    for key in ("spec_controller_lean_resolve", "spec_controller_defer_prompt_kv"):
        assert f'"{key}": true' in labels["leanall"] and f'"{key}": false' in labels["off"]
        assert f'"{key}": false' in restore


def test_writes_rotates_each_write_switch_alone_and_names_every_switch_in_every_label():
    """ROTATION=writes (12-07h's question): off is the default state, fast drops the writes, inline takes them off the
    side stream, perbatch stops coalescing, one switch each; every label names both the side and the coalesce switch
    (a switch a label leaves out keeps the previous label's value: perbatch's coalesce off would carry into the next
    repeat's off), the engine is left in the default state, and five labels count five in the budget."""
    assert plan(ROTATION="writes", REPEATS="2", DEADLINE_S="585", **CLOSED).returncode == 2     # 450 s: no fit
    assert plan(ROTATION="writes", REPEATS="1", DEADLINE_S="585", **CLOSED).stdout.strip() == "went on: closedab needs 240"
    ports, restore, nab = rotation("writes")
    labels = {name: value.partition(":")[2] for name, value in ports.items()}
    assert list(labels) == ["nospec", "off", "fast", "inline", "perbatch"] and nab == "5"
    states = {name: json.loads(value) for name, value in labels.items() if value}
    default = {"spec_controller_draft_kv": True, "spec_controller_draft_kv_side": True,
               "spec_controller_draft_kv_coalesce": True}
    undone = {"off": None, "fast": "spec_controller_draft_kv", "inline": "spec_controller_draft_kv_side",
              "perbatch": "spec_controller_draft_kv_coalesce"}
    for name, key in undone.items():
        want = {k: (v if k != key else False) for k, v in default.items()}
        assert {k: states[name][k] for k in want} == want, name
    assert {k: json.loads(restore)[k] for k in default} == default


@pytest.mark.parametrize("doses, started, says", [
    (None, True, ""),                                             # the default: the no-spec engine's decodes
    ('{"daemon": {"decode": 1000}}', False, "not started: SPIN_DOSES: engine 'daemon'"),
    ('{"nospec": {"decode": 1e400}}', False, "not started: SPIN_DOSES: nospec.decode: inf us"),
    ("{nope", False, "not started: SPIN_DOSES: not JSON"),
])
def test_a_call_with_the_spin_phase_checks_its_doses_before_any_engine_starts(doses, started, says):
    check = 'eval "$(sed -n \'/^DEFAULT_SPIN=/,/^esac$/p\' "$SCRIPT")"; echo "engines $spin_engines"'
    env = {"PATH": "/usr/bin:/bin", "SCRIPT": str(SCRIPT), "SHAPES": "closedab,spin,closedab"}
    if doses is not None:
        env["SPIN_DOSES"] = doses
    got = subprocess.run(["bash", "-c", "say() { echo \"SAY $*\"; }; " + check], env=env, capture_output=True,
                         text=True, timeout=30, cwd=SCRIPT.parents[2])
    assert got.returncode == (0 if started else 2), got.stdout + got.stderr
    assert (got.stdout.strip() == "engines 1") if started else got.stdout.startswith(f"SAY {says}"), got.stdout
    quiet = subprocess.run(["bash", "-c", "say() { echo \"SAY $*\"; }; " + check],
                           env={**env, "SHAPES": "closedab", "SPIN_DOSES": "{nope"}, capture_output=True, text=True,
                           timeout=30, cwd=SCRIPT.parents[2])
    assert quiet.returncode == 0            # without the phase its doses are not read


@pytest.mark.parametrize("shapes, started, says", [
    ("closed", True, "went on: closed needs 122"),
    ("calibrate,closed,spin,closed", True, "went on: calibrate needs 15"),
    ("closed,closedab", False, "SAY not started: TWIN=1 has no daemon for phase closedab"),
    ("greedy", False, "SAY not started: TWIN=1 has no daemon for phase greedy"),
    ("closedfast", False, "SAY not started: TWIN=1 has no daemon for phase closedfast"),
])
def test_the_a_a_call_refuses_a_phase_that_needs_the_daemon_before_any_engine_starts(shapes, started, says):
    """TWIN=1 (a second engine without speculation in the daemon's place) has no daemon and no plugin to switch: a
    phase that needs them is refused with one line and exit 2, before the engines' minutes are spent."""
    got = plan(TWIN="1", SHAPES=shapes, REPEATS="2", DEADLINE_S="590", CLOSED_LEVELS="128", CLOSED_WARMUP="5",
               CLOSED_S="15")
    assert got.returncode == (0 if started else 2), got.stderr
    assert got.stdout.strip().startswith(says), got.stdout
    assert plan(SHAPES="closed,closedab", REPEATS="2", DEADLINE_S="590", CLOSED_LEVELS="128", CLOSED_WARMUP="5",
                CLOSED_S="15").returncode == 0      # without TWIN the daemon's phases are fine


def test_the_a_a_call_starts_a_second_engine_without_speculation_where_the_daemon_would_be():
    """start_b with TWIN=1: start_server twin on the daemon's port with the daemon's mem fraction (no speculative
    flags, no daemon); without TWIN: start_daemon. Labels and the CPU group's name follow."""
    harness = r"""
set -u
say() { echo "SAY $*"; }
start_server() { echo "start_server $*"; SERVER_PID=4242; }
start_daemon() { echo "start_daemon"; DAEMON_PID=77; }
save_caches() { echo "save_caches"; }
R=/tmp/r
eval "$(sed -n '/^B=off;/,/^pair_labels$/p' "$SCRIPT")"
MEMFRAC=0.64 start_b; echo "B=$B GROUP_B=$GROUP_B DAEMON_PID=$DAEMON_PID PAIR=${PAIR[*]}"
SUFFIX=-spin; pair_labels; echo "after a spin phase: ${PAIR[*]}"
"""
    def run(**env: str) -> str:
        return subprocess.run(["bash", "-c", harness], env={"PATH": "/usr/bin:/bin", "SCRIPT": str(SCRIPT), **env},
                              capture_output=True, text=True, timeout=30).stdout
    twin = run(TWIN="1")
    assert "start_server twin 30000 SPEC_CONTROLLER_PLAIN_OFF=0 -- --mem-fraction-static 0.64" in twin and "start_daemon" not in twin
    assert "save_caches" in twin             # a cold TWIN call saves the JIT caches for the next one, as the daemon's
    assert "B=twin GROUP_B=twin DAEMON_PID=4242 PAIR=--engines nospec=30001,twin=30000" in twin
    daemon = run()
    assert "start_daemon" in daemon and "start_server" not in daemon
    assert "B=off GROUP_B=daemon DAEMON_PID=77 PAIR=--engines nospec=30001,off=30000" in daemon
    # the plain phases after a spin (or gcfreeze) phase label their rows as the ab rotations do
    assert "after a spin phase: --engines nospec-spin=30001,twin-spin=30000" in twin
    assert "after a spin phase: --engines nospec-spin=30001,off-spin=30000" in daemon


def test_plain_off_batches_are_the_daemons_engines_alone():
    """PLAIN=1 exports SPEC_CONTROLLER_PLAIN_OFF=1 (the daemon's SGLang child inherits it); the no-spec engine is started
    with it 0, so its scheduler registers none of the plain hooks (their pass-through would be its CPU, not the off
    engine's); MEMCHECK=1 turns on SGLang's strict KV checks."""
    harness = r"""
set -u
say() { echo "SAY $*"; }
start_server() { echo "start_server $*"; SERVER_PID=4242; }
B=off; OFF_PATH=kv; GRAMMAR_BACKEND=none; PREFILL_GRAPH=default; SLEEP_ON_IDLE=1; POOL_TOKENS=230000
eval "$(sed -n '/^beside=/,/^say "prefill graphs/p;/^start_nospec()/,/; }$/p' "$SCRIPT")"
start_nospec 0.30
echo "PLAIN_OFF=${SPEC_CONTROLLER_PLAIN_OFF:-unset} STRICT=${SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY:-unset}"
"""
    def run(**env: str) -> str:
        return subprocess.run(["bash", "-c", harness], env={"PATH": "/usr/bin:/bin", "SCRIPT": str(SCRIPT), **env},
                              capture_output=True, text=True, timeout=30).stdout
    plain = run(PLAIN="1", MEMCHECK="1")
    assert "PLAIN_OFF=1 STRICT=1" in plain and "off batches as plain batches (PLAIN=1)" in plain
    assert "KV pools 230000 tokens" in plain
    assert "start_server nospec 30001 SPEC_TIMELINE=/tmp/tl/nospec SPEC_CONTROLLER_PLAIN_OFF=0 --" in plain
    assert "PLAIN_OFF=unset STRICT=unset" in run()


START = r"""
set -u
say() { echo "SAY $*"; }
start_server() { echo "server $1 port $2 mem ${!#} timeline ${3#SPEC_TIMELINE=}"; SERVER_PID=11; return ${NOSPEC_FAILS:-0}; }
start_b() { echo "b mem $MEMFRAC timeline $SPEC_TIMELINE"; DAEMON_PID=22; return ${B_FAILS:-0}; }
B=off
eval "$(sed -n '/^start_nospec()/,/; }$/p;/^start_engines()/,/^}/p' "$SCRIPT")"
start_engines; echo "rc $? nospec $NOSPEC_PID"
"""


def start(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", START], env={"PATH": "/usr/bin:/bin", "SCRIPT": str(SCRIPT), **env},
                          capture_output=True, text=True, timeout=30)


def test_engines_start_no_spec_first_by_default_and_the_other_way_round_with_b_first():
    # the pools stay the same either way: the second engine's 0.64 holds the first's ~0.30 (SGLang counts every
    # process's memory against the fraction), so only the start order changes between the two calls
    assert start().stdout.splitlines() == [
        "server nospec port 30001 mem 0.30 timeline /tmp/tl/nospec", "b mem 0.64 timeline /tmp/tl/off", "rc 0 nospec 11"]
    assert start(B_FIRST="1").stdout.splitlines() == [
        "SAY started first: off (B_FIRST=1)", "b mem 0.34 timeline /tmp/tl/off",
        "server nospec port 30001 mem 0.64 timeline /tmp/tl/nospec", "rc 0 nospec 11"]


def test_a_b_engine_that_fails_first_still_fails_the_start_and_no_spec_failing_ends_the_call():
    assert start(B_FIRST="1", B_FAILS="1").stdout.splitlines()[-1] == "rc 1 nospec 11"
    assert start(B_FAILS="1").stdout.splitlines()[-1] == "rc 1 nospec 11"
    got = start(B_FIRST="1", NOSPEC_FAILS="1")
    assert got.returncode == 1 and "rc" not in got.stdout


def test_no_spec_failing_first_ends_the_call_before_the_other_starts():
    got = start(NOSPEC_FAILS="1")
    assert got.returncode == 1 and got.stdout.splitlines() == ["server nospec port 30001 mem 0.30 timeline /tmp/tl/nospec"]


def test_b_first_marks_loads_rows():
    def marked(**env):
        return subprocess.run(["bash", "-c", START.replace('echo "rc $?', 'echo "b_first ${LOAD_B_FIRST:-unset} rc $?')],
                              env={"PATH": "/usr/bin:/bin", "SCRIPT": str(SCRIPT), **env},
                              capture_output=True, text=True, timeout=30).stdout.splitlines()[-1]
    assert marked(B_FIRST="1").startswith("b_first 1 ") and marked().startswith("b_first unset ")


def test_the_plain_rotation_switches_the_plain_batches_in_one_engine_and_needs_plain_1():
    harness = r"""
set -u
KVG='"kvg": 1'; LEANALLOC='"lean": 1'; SIDE=1; SIDE_YES=side; INLINE=inline
eval "$(sed -n '/^ab_rotation()/,/^}/p' "$SCRIPT")"
ab_rotation; echo "$NAB|$AB|$AB_RESTORE"
"""
    got = subprocess.run(["bash", "-c", harness], env={"PATH": "/usr/bin:/bin", "SCRIPT": str(SCRIPT), "ROTATION": "plain"},
                         capture_output=True, text=True, timeout=30).stdout.strip()
    assert got == ('3|nospec=30001;off=30000:{"kvg": 1, "lean": 1, "spec_controller_plain_off": false};'
                   'plain=30000:{"kvg": 1, "lean": 1, "spec_controller_plain_off": true}'
                   '|{"kvg": 1, "lean": 1, "spec_controller_plain_off": true}')
    refuse = r"""
set -u
say() { echo "SAY $*"; }
beside=x
eval "$(sed -n '/^\[ "${PLAIN:-0}" = 1 \]/,/exit 2; }$/p' "$SCRIPT")"
echo went on
"""
    run = lambda **env: subprocess.run(["bash", "-c", refuse], env={"PATH": "/usr/bin:/bin", "SCRIPT": str(SCRIPT), **env},
                                       capture_output=True, text=True, timeout=30)
    no = run(ROTATION="plain")
    assert no.returncode == 2 and no.stdout.startswith("SAY not started: ROTATION=plain needs PLAIN=1")
    assert run(ROTATION="plain", PLAIN="1").stdout.strip() == "went on"


COMMON_SH = SCRIPT.parent / "common.sh"
KEEP_SH = SCRIPT.parent / "keep.sh"
PHASES_SH = SCRIPT.parent / "phases.sh"
POOL_HARNESS = r"""
set -u
say() { :; }; save_caches() { :; }; setsid() { :; }; specctl() { echo '"running": true'; }
eval "$(sed -n '/^gpu_mib=/p;/^export POOL_TOKENS=/p' "$SCRIPT")"
M=/m; MAXBS=128; TP=1; DUMMY=; PREFILL_GRAPH=default; PREFILL_FLAG=(); GRAMMAR_BACKEND=none; ACC=natural
SC=$WORK; OUT=$WORK; GROUPS_FILE=$WORK/groups
eval "$(sed -n '/^COMMON=(/,/^\[ "\$POOL_TOKENS" != 0 \]/p;/^start_daemon()/,/^}/p' "$COMMON_SH")"
echo "COMMON: ${COMMON[*]}"
start_daemon
"""


@pytest.mark.parametrize("given, gpu_mib, pool", [(None, None, 230000), ("180000", None, 180000), ("0", None, None),
                                                   (None, 81559, 40000), (None, 143771, 230000), ("0", 81559, None)])
def test_both_engines_get_the_same_kv_pool(tmp_path, given, gpu_mib, pool):
    """run_pair.sh caps both engines' KV pools at POOL_TOKENS (230000 unless set, 40000 on a GPU under 100 GB; 0: SGLang
    sizes each from its memory fraction): the no-spec engine's flags and the daemon's [sglang] alike. Before, the engine started second always got
    the larger pool, confounding the start order with the pool (common.sh's comment)."""
    from controller.daemon.config import load_config
    from controller.daemon.engines.sglang_flags import server_flags
    env = {"PATH": f"{tmp_path}/bin:/usr/bin:/bin", "SCRIPT": str(SCRIPT), "COMMON_SH": str(COMMON_SH),
           "WORK": str(tmp_path)}
    if given is not None:
        env["POOL_TOKENS"] = given
    if gpu_mib is not None:                    # (an H100's 80 GB: both engines' default pools would not fit)
        (tmp_path / "bin").mkdir()
        (tmp_path / "bin/nvidia-smi").write_text(f"#!/bin/sh\necho {gpu_mib}\n")
        (tmp_path / "bin/nvidia-smi").chmod(0o755)
    out = subprocess.run(["bash", "-c", POOL_HARNESS], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    common = out.stdout.split("COMMON: ", 1)[1].splitlines()[0].split()
    daemon_flags = server_flags(load_config(tmp_path / "config.toml")["sglang"])
    for flags in (common, daemon_flags):
        if pool is None:
            assert "--max-total-tokens" not in flags
        else:
            assert flags[flags.index("--max-total-tokens") + 1] == str(pool)


def test_the_gpu_api_key_check_gives_the_daemon_the_key_as_from_launch_would(tmp_path):
    """run_apikey.sh: start_daemon writes API_KEY as [sglang] api_key, which the daemon sends with every threshold."""
    from controller.daemon.config import load_config
    from controller.daemon.engines.sglang_flags import admin_headers
    env = {"PATH": "/usr/bin:/bin", "SCRIPT": str(SCRIPT), "COMMON_SH": str(COMMON_SH), "WORK": str(tmp_path),
           "API_KEY": "sk-check-1"}
    out = subprocess.run(["bash", "-c", POOL_HARNESS], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert admin_headers(load_config(tmp_path / "config.toml")["sglang"]) == {"Authorization": "Bearer sk-check-1"}
    del env["API_KEY"]
    subprocess.run(["bash", "-c", POOL_HARNESS], env=env, capture_output=True, text=True, timeout=30, check=True)
    assert admin_headers(load_config(tmp_path / "config.toml")["sglang"]) == {}


KEEP = r"""
set -u
OUT=$WORK/out; SC=$WORK/sc; KEEP_DIR=$WORK/keep; mkdir -p $OUT $SC; touch $SC/state.db
eval "$(sed -n '/^GROUPS_FILE=/,/^LOGS=\$OUT;/p' "$COMMON_SH" | sed "s#/tmp/#$WORK/#g")"
echo "REUSE=$REUSE LOGS=${LOGS#$WORK/} db=$([ -f $SC/state.db ] && echo kept || echo fresh) groups=$([ -f $GROUPS_FILE ] && echo kept || echo stopped) clean=$([ -f $KEEP_DIR/clean ] && echo left || echo gone)"
"""
SAME = {"KEEPS_ENGINES": "1", "KEEP_ENGINES": "1", "B_FIRST": "1", "OFF_PATH": "kv", "SPEC_CPROFILE_KINDS": "extend"}


@pytest.fixture
def engines(tmp_path):
    """Two real process groups standing in for the kept engines, and a curl that says whether they answer."""
    groups = [Group() for _ in range(2)]
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/curl").write_text(f"#!/bin/sh\nexit $(cat {tmp_path}/curl-rc 2>/dev/null || echo 0)\n")
    (tmp_path / "bin/curl").chmod(0o755)
    yield groups
    for g in groups:
        g.kill()


class Group:
    """A process group leader that is not this process's child (as a kept engine is not the next call's): once
    stopped, something else reaps it, so it is gone rather than a zombie that kill -0 still finds."""
    def __init__(self) -> None:
        self.pid = int(subprocess.run(["bash", "-c", "setsid sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True,
                                      text=True, timeout=10).stdout)

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
            return not open(f"/proc/{self.pid}/stat").read().split(") ")[1].startswith("Z")
        except (OSError, IndexError):
            return False

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass


def keep(tmp_path, **env: str) -> str:
    run_env = {"PATH": f"{tmp_path}/bin:/usr/bin:/bin", "COMMON_SH": str(COMMON_SH), "WORK": str(tmp_path), **env}
    got = subprocess.run(["bash", "-c", KEEP], env=run_env, capture_output=True, text=True, timeout=60,
                         cwd=SCRIPT.parents[2])
    assert got.returncode == 0, got.stderr
    return got.stdout.strip().splitlines()[-1]


def kept_call(tmp_path, groups, clean: bool = True, **env: str) -> None:
    """What a KEEP_ENGINES=1 call leaves when it ends (clean: normally): its engines' groups, ids and signature."""
    sig = subprocess.run(["bash", "-c", 'eval "$(sed -n \'/^keep_signature()/,/^}/p\' "$KEEP_SH")"; keep_signature'],
                         env={"PATH": "/usr/bin:/bin", "KEEP_SH": str(KEEP_SH), **env}, capture_output=True,
                         text=True, timeout=60, cwd=SCRIPT.parents[2]).stdout.strip()
    (tmp_path / "keep").mkdir(exist_ok=True)
    (tmp_path / "keep/pids").write_text(" ".join(str(g.pid) for g in groups) + "\n")
    (tmp_path / "keep/signature").write_text(sig + "\n")
    if clean:
        (tmp_path / "keep/clean").touch()
    (tmp_path / "bench-groups").write_text("".join(f"{g.pid}\n" for g in groups))


def test_a_warm_call_started_the_same_way_reuses_the_kept_engines_and_their_database(tmp_path, engines):
    """KEEP_ENGINES=1: the engines the last such call left up, started with the same settings and code, are measured
    again (no ~250 s start); their database stays (the daemon holds it) and the logs live beside them. Until this call
    ends normally, the next may not take them for clean."""
    kept_call(tmp_path, engines, **SAME)
    assert keep(tmp_path, **SAME, SHAPES="closedab") == "REUSE=1 LOGS=keep/logs db=kept groups=kept clean=gone"
    assert all(g.alive() for g in engines)


@pytest.mark.parametrize("changed", [{"B_FIRST": "0"}, {"POOL_TOKENS": "40000"}, {"SPEC_CPROFILE_KINDS": "decode"},
                                     {"ROTATION": "resolve"}, {"PIN_CPUS": "1"}, {"API_KEY": "k"},
                                     {"KEEP_ENGINES": "0"}, {"KEEPS_ENGINES": "0"}])
def test_engines_started_another_way_are_stopped_and_the_call_starts_afresh(tmp_path, engines, changed):
    """Another start setting, or a script that does not keep engines (only run_pair.sh does: KEEPS_ENGINES)."""
    kept_call(tmp_path, engines, **SAME)
    got = keep(tmp_path, **{**SAME, **changed})
    logs = "keep/logs" if "KEEP_ENGINES" not in changed and "KEEPS_ENGINES" not in changed else "out"
    assert got.startswith(f"REUSE=0 LOGS={logs} db=fresh groups=stopped")
    assert not (tmp_path / "keep/pids").exists()        # the next call cannot take them for kept either
    assert not any(g.alive() for g in engines)          # stopped by their group ids


@pytest.mark.parametrize("how", ["cut", "dead", "silent"])
def test_engines_a_call_did_not_leave_cleanly_or_that_do_not_answer_are_not_reused(tmp_path, engines, how):
    """cut: the last call ended at its limit mid-phase (a state switched, pins swapped); dead: a group is gone;
    silent: an engine does not answer /health."""
    kept_call(tmp_path, engines, clean=how != "cut", **SAME)
    if how == "dead":
        engines[1].kill()
    if how == "silent":
        (tmp_path / "curl-rc").write_text("7")
    assert keep(tmp_path, **SAME).startswith("REUSE=0 LOGS=keep/logs db=fresh groups=stopped")


def test_without_keep_every_call_stops_what_was_left_and_starts_a_fresh_database(tmp_path):
    (tmp_path / "bench-groups").write_text("999999991\n")
    assert keep(tmp_path).startswith("REUSE=0 LOGS=out db=fresh groups=stopped")


def test_reused_engines_leave_the_whole_deadline_to_the_phases():
    """The plan's check reckons ~20 s instead of ~200 s for engines already up."""
    assert plan(ROTATION="pair", REPEATS="2", DEADLINE_S="300", REUSE="1", **CLOSED).stdout.strip() == \
        "went on: closedab needs 198"
    assert plan(ROTATION="pair", REPEATS="2", DEADLINE_S="300", **CLOSED).returncode == 2


UP = r"""
set -u
say() { echo "SAY $*"; }
reuse_engines() { echo reuse; NOSPEC_PID=11; DAEMON_PID=22; [ "${REUSE_FAILS:-0}" = 1 ] && { REUSE=0; return 1; }; return 0; }
start_engines() { echo start; NOSPEC_PID=33; DAEMON_PID=44; }
log_offset() { echo 500; }
KEEP_DIR=$WORK; LOGS=$WORK; GROUP_B=daemon; KEEP_SIG=sig1; KEEP=${KEEP_ENGINES:-0}
eval "$(sed -n '/^engines_up()/,/^}/p' "$SCRIPT")"
engines_up; echo "pids $(cat $WORK/pids 2>/dev/null) sig $(cat $WORK/signature 2>/dev/null) from ${LOG_FROM[nospec]} ${LOG_FROM[daemon]}"
"""


@pytest.mark.parametrize("env, says", [
    ({"REUSE": "1", "KEEP_ENGINES": "1"}, ["reuse", "pids 11 22 sig sig1 from 500 500"]),
    ({"REUSE": "1", "KEEP_ENGINES": "1", "REUSE_FAILS": "1"}, ["reuse", "start", "pids 33 44 sig sig1 from 0 0"]),
    ({"REUSE": "0", "KEEP_ENGINES": "1"}, ["start", "pids 33 44 sig sig1 from 0 0"]),
    ({"REUSE": "0"}, ["start", "pids  sig  from 0 0"]),
])
def test_engines_up_reuses_or_starts_and_records_them_for_the_next_call(tmp_path, env, says):
    """A reused engine's log is read from where this call found it (its earlier calls' lines are not this call's);
    kept engines are recorded only with KEEP_ENGINES=1, and one that failed to answer is started afresh."""
    got = subprocess.run(["bash", "-c", UP], env={"PATH": "/usr/bin:/bin", "SCRIPT": str(SCRIPT), "WORK": str(tmp_path),
                                                  **env}, capture_output=True, text=True, timeout=30)
    assert got.stdout.splitlines() == says, got.stderr


CPROFILE = r"""
set -u
say() { echo "SAY $*"; }; fits() { :; }; engine_lines() { echo 0; }; wait_engine_lines() { :; }
load_sum() { echo "load $*" >>$WORK/calls; touch $WORK/tl/nospec.7.prof $WORK/tl/off.9.prof; }
python3() { if [ "$1" = -c ]; then cat >/dev/null; echo "{'off': '6,7'}"; elif [ "${4:-}" = --swapped ]; then
  echo "swapped: ${2#$WORK/tl/} ${3#$WORK/tl/} ${5#$WORK/tl/} ${6#$WORK/tl/}"; else echo "verdict: ${3#$WORK/tl/} vs ${2#$WORK/tl/}"; fi; }
OUT=$WORK/out; SUM=$WORK/sum; LOGS=$WORK; B=off; GROUP_B=daemon; SPEC_CPROFILE=$WORK/tl/flag
mkdir -p $OUT $WORK/tl; : >$WORK/tl/cprofile.jsonl
printf 'old\nCPROFILE pid 1 an earlier call\n' >$WORK/daemon.log; : >$WORK/nospec.log
declare -A LOG_FROM=([nospec]=0 [daemon]=$(stat -c %s $WORK/daemon.log))
echo 'CPROFILE pid 2 this call' >>$WORK/daemon.log
eval "$(sed -n '/^call_log()/,/^}/p' "$KEEP_SH")"
phase=cprofile
eval "case \$phase in $(sed -n '/^    cprofile)  #/,/profiles)" ;;$/p' "$PHASES_SH" | sed "s#/tmp/tl#$WORK/tl#g") esac"
"""


def test_the_prefills_are_profiled_twice_with_the_core_sets_swapped_between(tmp_path):
    """Each engine's profile on one core set could not tell its process from its cores (12-04i, 12-05c): the phase
    profiles once per set (loads.py --repeat-index 0 and 1 swap them) and compares each pair of profiles apart; a kept
    engine's earlier calls' profile lines are not this call's."""
    got = subprocess.run(["bash", "-c", "shopt -s expand_aliases; " + CPROFILE],
                         env={"PATH": "/usr/bin:/bin", "PHASES_SH": str(PHASES_SH), "KEEP_SH": str(KEEP_SH),
                              "WORK": str(tmp_path)},
                         capture_output=True, text=True, timeout=30)
    assert got.returncode == 0, got.stderr
    loads = (tmp_path / "calls").read_text().splitlines()
    assert [line.split("--repeat-index ")[1].split()[0] for line in loads] == ["0", "1"]
    summary = (tmp_path / "sum").read_text()
    assert "profile 1 of 2, core sets {'off': '6,7'}" in summary and "profile 2 of 2" in summary
    assert "verdict: rep0/off.9.prof vs rep0/nospec.7.prof" in summary
    assert "verdict: rep1/off.9.prof vs rep1/nospec.7.prof" in summary
    assert "swapped: rep0/nospec.7.prof rep0/off.9.prof rep1/nospec.7.prof rep1/off.9.prof" in summary
    text = (tmp_path / "out/cprofile.txt").read_text()
    assert "CPROFILE pid 2 this call" in text and "an earlier call" not in text


FOLLOW = r"""
set -u
OUT=$WORK/out; LOGS=$WORK/keep; GROUP_B=daemon; mkdir -p $OUT $LOGS
printf 'an earlier call\n' >$LOGS/nospec.log
log_offset() { stat -c %s "$1" 2>/dev/null || echo 0; }
eval "$(sed -n '/^follow_logs()/,/^}/p' "$KEEP_SH")"
follow_logs
sleep 0.3; echo 'this call' >>$LOGS/nospec.log; echo 'a daemon started now' >$LOGS/daemon.log; sleep 2.5
kill "${FOLLOWERS[@]}"
"""


def test_a_kept_engines_log_comes_back_from_where_this_call_found_it_as_it_grows(tmp_path):
    """KEEP_ENGINES=1: each engine's log is followed into $OUT by the call's own processes (a call cut at its limit
    still brings back its part): the lines written before the call are not in it, a log that appears later is whole."""
    got = subprocess.run(["bash", "-c", FOLLOW], env={"PATH": "/usr/bin:/bin", "KEEP_SH": str(KEEP_SH), "WORK": str(tmp_path)},
                         capture_output=True, text=True, timeout=30)
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "out/nospec.log").read_text() == "this call\n"
    assert (tmp_path / "out/daemon.log").read_text() == "a daemon started now\n"


def test_the_warm_phase_serves_both_engines_and_records_nothing(tmp_path):
    """`warm`: the closed loop at 128 on both engines for WARM_S each, its rows kept out of the call's results (the
    tables and ratios read $R only), so the phases after it measure engines that have served a while."""
    harness = r"""
set -u
say() { echo "SAY $*"; }; fits() { :; }; load_sum() { echo "load $*"; }
B=off; R=$WORK/results.jsonl; phase=warm
eval "case \$phase in $(sed -n '/^    warm)      #/,/warm done.*;;$/p' "$PHASES_SH") esac"
"""
    got = subprocess.run(["bash", "-c", harness], env={"PATH": "/usr/bin:/bin", "PHASES_SH": str(PHASES_SH),
                                                       "WORK": str(tmp_path), "WARM_S": "200"},
                         capture_output=True, text=True, timeout=30)
    load = got.stdout.splitlines()[0]
    assert load.startswith("load --shape closed --levels 128 --seconds 200 --warmup 0 --engines nospec=30001,off=30000")
    assert str(tmp_path / "results.jsonl") not in load and "--out /tmp/tl/warm.jsonl" in load
    assert got.stdout.splitlines()[-1] == "SAY warm done (200 s each)"


def test_a_phase_whose_time_is_out_is_skipped_and_the_next_runs():
    """run_phase (bench/gpu/phases.sh): a phase that does not fit returns (the loop's old `continue`), the next one
    runs, an unknown one is said; run_pair.sh sources it and calls it once per phase of SHAPES."""
    harness = r"""
set -u
say() { echo "SAY $*"; }; load_sum() { echo "load $1 $2"; }; phase_need() { echo 10; }
fits() { [ "$2" != closed ] || { echo "SAY skip closed"; return 1; }; }
PAIR=(--engines x); CLOSED=128; CLOSED_S=1; CLOSED_WARMUP=1
source "$PHASES_SH"
for phase in closed steady bogus; do run_phase "$phase"; done; echo after
"""
    got = subprocess.run(["bash", "-c", harness], env={"PATH": "/usr/bin:/bin", "PHASES_SH": str(PHASES_SH)},
                         capture_output=True, text=True, timeout=30)
    assert got.stdout.splitlines() == ["SAY skip closed", "load --shape steady", "SAY steady done",
                                       "SAY unknown phase bogus", "after"], got.stdout + got.stderr
    assert 'source bench/gpu/phases.sh' in SCRIPT.read_text() and 'run_phase "$phase"' in SCRIPT.read_text()


@pytest.mark.parametrize("rotation, engines, restore", [
    ("product", "nospec=30001;always=30000:@threshold pin 128;bandit=30000:@threshold unpin",
     "specctl threshold pin 0"),
    ("pair", "nospec=30001;off=30000:", "internal_state 30000 {"),
])
def test_the_product_rotation_tells_the_daemon_and_pins_it_back_at_0_after_the_phase(rotation, engines, restore):
    """ROTATION=product: always-on and the bandit are specctl commands to the daemon (loads.py gets its socket), and
    the phase ends with the daemon pinned at 0 again (the next phase's off engine); the set_internal_state rotations
    as before."""
    env = {"PATH": "/usr/bin:/bin", "SCRIPT": str(SCRIPT), "PHASES_SH": str(PHASES_SH), "LEFT": "900", "REPEATS": "2",
           "FIT_REPEATS": "1", "ROTATION": rotation, "SHAPES": "closedab", "CLOSED_LEVELS": "1,16,48,128",
           "CLOSED_WARMUP": "5", "CLOSED_S": "10"}
    got = subprocess.run(["bash", "-c", FIT], env=env, capture_output=True, text=True, timeout=30)
    lines = got.stdout.splitlines()
    load = next(x for x in lines if x.startswith("load args"))
    assert f"--engines {engines}" in load and "--socket /sc/ctl.sock" in load, got.stdout + got.stderr
    after = lines[lines.index(load) + 1:]
    assert after and after[0].startswith(restore), got.stdout + got.stderr
