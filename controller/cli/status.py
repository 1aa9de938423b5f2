"""`specctl status`: the live status document from the daemon, or the same document built from
the database when the daemon is down or still starting."""
from __future__ import annotations

import time

import click

from ..contract import MAX_BATCH
from ..numtext import one_line, plain
from ..paths import present
from ..status import build_status, summarise
from .client import DaemonUnreachable
from .common import (UNREADABLE, Ctx, ago, alias_note, call, emit, fail, full_params, json_option, lock_holder,
                     not_running, trial_note)
from .holder import find_holder
from .offline import no_database, offline_read
from .options import EXIT_NOT_RUNNING, EXIT_STARTING, EXIT_USAGE
from .pluginlines import plugin_lines


def _fmt(value, spec: str = "", none: str = "-") -> str:
    return none if value is None else format(value, spec)


def _acceptance(st: dict, window: str) -> str:
    if st.get("mean_accept_length") is None and st.get("last_accept_length") is not None:
        return (f"no speculative batch in the live window; the last one's accept length "
                f"{st['last_accept_length']:.2f}, {ago(st.get('last_accept_age_s') or 0)} ago")
    if st.get("mean_accept_length") is None:    # (it read "mean accept length -, rate -", which said not why)
        return ("no speculative batch yet this run: nothing to measure acceptance by" if st["daemon"]["running"]
                else "no speculative batch among the last stored samples")
    return (f"mean accept length {_fmt(st.get('mean_accept_length'), '.2f')}, "
            f"rate {_fmt(st.get('acceptance_rate'), '.1%')}{window}")


NO_POLICY = "- (none saved: a start runs the config's [policy] name, bandit unless set)"     # (it read '-')


def _throughput(st: dict, per: str, window: str) -> str:
    if st.get("tok_per_s") is None:     # (it read '- tok/s, speculating - of batches')
        return "no decode batch yet this run" if st["daemon"]["running"] else "no sample stored"
    return f"{st['tok_per_s']:,.0f} tok/s{per}, speculating {_fmt(st.get('spec_share'), '.0%')} of batches{window}"


def _rejected(samples: dict) -> str:
    kinds = {k: v for k, v in (samples.get("rejected") or {}).items() if v}
    if not kinds:
        return ""
    return f", {sum(kinds.values()):,} rejected ({', '.join(f'{k} {v:,}' for k, v in kinds.items())})"


def _aged(st: dict) -> str:
    """' (as of 3 min ago)' when the figures are not fresh (daemon down, engine idle)."""
    age = st.get("figures_age_s")
    return "" if age is None or age < 5 else f" (as of {ago(age)} ago)"


def _head(st: dict) -> list[str]:
    d, eng = st["daemon"], st.get("engine") or {}
    if not d["running"]:
        if d.get("starting"):
            return [f"daemon:      STARTING, pid {d['pid']}: control socket not open yet (read from {d['db']})",
                    "engine:      - (loading)"]
        return [f"daemon:      NOT RUNNING (read from {d['db']})", *[f"problem:     {p}" for p in d["problems"]],
                "engine:      - (daemon not running)"]
    load = [f"profile {eng['profile']}", f"load now {eng.get('load')}"] if eng.get("profile") else []
    if eng.get("speed") not in (None, 1, 1.0):
        load.append(f"clock x{plain(eng['speed'])}")
    return [f"daemon:      running, pid {d['pid']}, up {ago(d['uptime_s'] or 0)}, "
            f"{'healthy' if d['healthy'] else 'UNHEALTHY'}",
            *[f"problem:     {p}" for p in d.get("problems") or []],
            f"engine:      {eng.get('engine', '?')} - {eng.get('detail', '')}" + (f" ({', '.join(load)})" if load else "")]


def threshold_line(st: dict) -> str:
    """The status's threshold line: the value, pinned or a trial, and what it means (also `specctl threshold`)."""
    t, best = st.get("threshold"), st.get("exploit_threshold")
    note = "pinned" if st.get("pinned") else trial_note(t, best, st.get("trial"))
    notes = [note] if note else []
    last = st.get("last_decision") or {}
    if not st["daemon"]["running"] and last.get("new") not in (None, t):
        # set while the daemon was down: the last change line below is what the engine last ran
        notes.append(f"at next start; last run at {_fmt(last['new'])}")
    note = f" ({', '.join(notes)})" if notes else ""
    largest = (st.get("engine") or {}).get("max_batch_size")
    meaning = "never speculate" if t == 0 else \
        f"always speculate (every batch: the engine's largest is {largest})" if largest and t is not None and t >= largest \
        else f"speculate iff batch size <= {_fmt(t)}" if t is not None else \
        "none saved yet (a start runs the config's [policy] initial_threshold)"      # (a database no start served)
    return f"threshold:   {_fmt(t)}{note}   {meaning}"


def _samples(st: dict, simulated: bool) -> str:
    samples = st.get("samples") or {}
    if not st["daemon"]["running"]:
        return f"samples:     {samples.get('total') or 0:,} stored"
    bad = (st.get("engine") or {}).get("bad_telemetry")      # (messages that are no samples at all: the engine's)
    # per_s is None until the first batch (it read '-/s real time, 0 this run')
    rate = "no decode batch yet this run" if samples.get("per_s") is None else \
        f"{samples['per_s']:,.1f}/s{' real time' if simulated else ''}, {samples.get('total') or 0:,} this run"
    return (f"samples:     {rate}, {samples.get('dropped') or 0:,} dropped{_rejected(samples)}"
            + (f", {bad:,} undecodable telemetry messages" if bad else ""))


def _window(st: dict, simulated: bool) -> str:
    """Which time the figures cover (a newcomer read them against the load line, which is the current phase)."""
    window = st.get("window_s")
    return f", in the last {window:g}{' simulated' if simulated else ''} s" if window and st["daemon"]["running"] else ""


def _last_change(st: dict) -> list[str]:
    last = st.get("last_decision")
    if not last:
        return []
    when = f"{ago(time.time() - last['wall'])} ago: " if last.get("wall") else ""
    if last["old"] == last["new"]:      # the start re-applies the restored threshold: no change
        return [f"last applied: {when}{last['new']}, {one_line(last['reason'])}"]
    return [f"last change: {when}{last['old']} -> {last['new']}, {one_line(last['reason'])}"]


def render_status(st: dict) -> str:
    eng = st.get("engine") or {}
    pol = st.get("policy") or {}
    speed = st.get("clock_speed") or eng.get("speed")      # (engine's: a daemon from before clock_speed)
    simulated = speed not in (None, 1, 1.0)
    per = " (simulated time)" if simulated else ""
    samples = st.get("samples") or {}
    lines = _head(st) + [
        threshold_line(st),
        f"policy:      {pol.get('name') or NO_POLICY}{alias_note(pol)}"     # (set while the daemon was down: as threshold's)
        + (f" (at next start; last run ran {pol['last_run']})" if pol.get("last_run") else ""),
        f"acceptance:  {_acceptance(st, _window(st, simulated))}{_aged(st)}",
        f"throughput:  {_throughput(st, per, _window(st, simulated))}{_aged(st)}",
        _samples(st, simulated),
    ]
    if samples.get("write_errors") or samples.get("write_dropped"):
        lines.append(f"database:    {samples.get('write_errors') or 0:,} failed writes, {samples.get('write_dropped') or 0:,} "
                     "samples not written (queue full, a failed write or no room on disk): see the daemon's log")
    lines += plugin_lines(eng.get("plugin") or {}) + _last_change(st)
    return "\n".join(lines)


def offline_status(ctx: Ctx, down: bool = False) -> dict:
    """The status document from the database alone (the daemon is down, down=True, or not serving yet)."""
    return offline_read(ctx, lambda db: _from_db(ctx, db, down))


def _from_db(ctx: Ctx, db, down: bool) -> dict:
    from state import queries
    saved = queries.settings(db)
    sums = queries.sample_sums(db)
    last = queries.recent_decisions(db, 1)
    pol = saved.get("policy") or {}
    window = summarise(sums, sums.get("span_s"))
    last_write = queries.last_wall(db)      # the daemon's last checkpoint or decision
    window.update(window_s=60.0, figures_age_s=round(time.time() - last_write, 1) if last_write else None,
                  clock_speed=(saved.get("clock") or {}).get("speed"))     # (absent: a database from before 12-04f)
    rule = None if saved.get("pinned") is not None else _rule_sets(pol, queries.started_max_batch(db))
    ran = queries.last_run_policy(db) if down else None     # (a start under way has recorded its own)
    control = {"threshold": saved["pinned"] if saved.get("pinned") is not None else rule if rule is not None
               else saved.get("threshold"),
               "pinned": saved.get("pinned") is not None,
               "policy": {"name": pol.get("name"), "policy": queries.latest_policy(db), "params": full_params(pol),
                          "last_run": ran if ran != pol.get("name") else None},
               "last_decision": {k: last[0][k] for k in ("t", "wall", "old", "new", "reason", "exploratory")}
               if last else None}                                                                  # (the live shape)
    error = queries.last_run_error(db)
    gone = queries.unstopped_run(db) if down and not error else None   # (a SIGKILL or the OOM killer leaves no word)
    problems = [f"the last run met an error {ago(time.time() - error['wall'])} ago: {one_line(error['detail'])}"] \
        if error else [f"the last run (pid {gone}) ended without a stop on record: killed (SIGKILL, the OOM "
                       "killer), crashed or its final writes lost; a start resumes from its last checkpoint"] \
        if gone else []
    return build_status({"running": False, "db": str(ctx.db), "socket": str(ctx.socket), "problems": problems}, None,
                        control, window, {"total": db["samples"].count})


def _rule_sets(pol: dict, largest: int | None) -> int | None:
    """The threshold a saved rule (fixed, always, never: its decision a command, applied at once) sets at the daemon's
    next start; None for a learner, or a rule that no longer builds. (newcomer-146: with `policy set fixed --param
    threshold=17` saved offline, status showed the last run's 256, and the start ran 17.)"""
    from policies import PolicyError, make_policy
    from policies.fixed import FixedPolicy
    from policies.types import Snapshot
    top = largest or MAX_BATCH
    try:
        policy = make_policy(pol["name"], pol.get("params") or {}, max_batch_size=top)
    except (PolicyError, KeyError, TypeError, ValueError):
        return None
    if not isinstance(policy, FixedPolicy):
        return None
    return policy.decide(Snapshot(now=0.0, exploit_threshold=0, max_batch_size=top)).threshold


def current_status(ctx: Ctx, explain: bool) -> tuple[dict, int]:
    """The daemon's live status document, or the database's while it is down or still starting, with the exit code
    status ends with (0; EXIT_STARTING: a daemon holds the database but does not serve yet; EXIT_NOT_RUNNING).
    explain: say on stderr why the document is the database's."""
    try:
        return call(ctx, "GET", "/status"), 0
    except DaemonUnreachable as e:
        holder, down, why = unanswered(ctx, e)
        st = offline_status(ctx, down=down)
        if holder:      # alive but not serving: the engine is still loading (or the daemon is wedged)
            st["daemon"].update(starting=True, pid=int(holder) if holder.isdigit() else holder)
        if explain:
            click.echo(f"specctl: {why}; last state from the database:", err=True)
        return st, EXIT_STARTING if holder else EXIT_NOT_RUNNING


def unanswered(ctx: Ctx, e: DaemonUnreachable) -> tuple[str | None, bool, str]:
    """Where no daemon answered (e): the pid holding the database (None: none, or the lock unreadable), whether none
    holds it, and why the database is read, in words; no_database's line where there is none, and a daemon serving
    another socket than the one given is a usage error (its mismatch). status's and `policy show`'s one reading (policy
    show said 'daemon is not running' of a daemon holding the database, its engine loading)."""
    holder = lock_holder(ctx.db)
    # (an unreadable lock, the service user's 0600 to its group's operators, cannot say that no daemon holds it:
    # a start still loading its engine was said to have ended without a stop)
    down = holder is None
    holder = None if holder == UNREADABLE else holder
    if not present(ctx.db):
        no_database(ctx, str(e))
    found = find_holder(ctx.db, ctx.socket, holder) if holder else None
    if found and found.elsewhere:       # a healthy daemon, and a mistyped --socket: say so, nothing else
        fail(found.mismatch(), EXIT_USAGE)
    if found is None:
        return holder, down, not_running(ctx, e)
    if found.socket is not None:        # its own socket, as recorded: not open yet
        return holder, down, (f"daemon pid {holder} holds the database but its control socket is not open (engine "
                               "starting, or the daemon stopping?)")
    return holder, down, (f"daemon pid {holder} holds the database but does not answer on {ctx.socket} (engine "
                          "starting, the daemon stopping, or is its socket another one? see --socket)")


@click.command()
@json_option
@click.pass_obj
def status(ctx: Ctx, as_json: bool) -> None:
    """Current threshold, policy, acceptance, throughput and health (exit 3: daemon not running; 4: starting)."""
    st, code = current_status(ctx, explain=not as_json)
    emit(st, as_json, render_status)
    if code:
        raise SystemExit(code)
