"""Commands that steer the daemon: policy list/show/set, threshold pin/unpin, and the decision
history. With the daemon down, reads come from the database and changes are saved there."""
from __future__ import annotations

import sqlite3
import time

import click

from ..contract import MAX_BATCH
from ..numtext import one_line, terminal_text, value_text
from ..paths import present
from .client import DaemonDropped, DaemonError, DaemonUnreachable, request
from .common import (UNREADABLE, Ctx, alias_note, call, emit, fail, full_params, given_db_exists, json_option,
                     lock_holder, refuse_unpaired, trial_note, unpaired)
from .offline import offline_read, read_offline, refuse_held, save_offline
from .options import EXIT_USAGE, NEGATIVE_ARGS, Bounded, say


# --- policy -------------------------------------------------------------------
@click.group()
def policy() -> None:
    """List, show and switch the policy."""


@policy.command("list")
@json_option
@click.pass_obj
def policy_list(ctx: Ctx, as_json: bool) -> None:
    """The available policies and their parameters; the active one marked (as its database says)."""
    from policies import known_name, list_policies
    active = _active_policy(ctx)
    rows = [{**r, "active": r["name"] == known_name(active)} for r in list_policies()]

    def render(rows):
        out = []
        for r in rows:
            alias = f" (alias: {', '.join(r['aliases'])})" if r["aliases"] else ""
            mark = "" if not r["active"] else " [active]" if active == r["name"] else f" [active as {active}]"
            out.append(f"{r['name']}{alias}{mark}: {r['summary']}")
            out += [f"    {p['name']}={value_text(p['default'])}  [{value_text(p['min'])} .. {value_text(p['max'])}] {p['help']}"
                    for p in r["params"]]
        return "\n".join(out)
    emit(rows, as_json, render)


def _active_policy(ctx: Ctx) -> str | None:
    """The active policy's name as saved in the database (the daemon saves it at its first start and before it
    acknowledges a switch), or, with --socket alone, as the daemon there says (none answering: the database only where
    it is that socket's, common.unpaired); None where neither tells (no database yet, one this user may not read, one
    of another daemon's): the list is printed unmarked, a reason on stderr. A --db naming no database stays a usage
    error, as does a daemon holding the database on another socket than the --socket given."""
    given_db_exists(ctx)
    if ctx.socket_given and not ctx.db_given:
        try:
            return request(ctx.socket, "GET", "/policy").get("name")
        except (DaemonUnreachable, DaemonError) as e:   # (its database then, only where it is that socket's: else it
            why = unpaired(ctx)             # marked the default daemon's policy as the one at a mistyped socket, or at
            if why is not None and present(ctx.db):     # another program that answered there; none: quiet)
                asked = f"no daemon answers on {ctx.socket}" if isinstance(e, DaemonUnreachable) else str(e)
                say(f"specctl: the active policy is not marked: {asked}, and {why}", err=True)
                return None
    if not present(ctx.db):
        return None
    from state import queries
    from state.db import StoreError, open_store
    try:
        db = open_store(ctx.db, readonly=True)
        try:
            return (queries.settings(db).get("policy") or {}).get("name")
        finally:
            db.conn.close()
    except (StoreError, OSError, sqlite3.Error) as e:
        click.echo(f"specctl: the active policy is not marked: {e}", err=True)
        return None


@policy.command("show")
@json_option
@click.pass_obj
def policy_show(ctx: Ctx, as_json: bool) -> None:
    """The active policy and its parameters."""
    try:
        info = call(ctx, "GET", "/policy")
    except DaemonUnreachable as e:
        from policies import known_name
        from state import queries

        from .status import unanswered
        _, down, why = unanswered(ctx, e)           # (status's words: a daemon starting is not 'not running')
        settings = offline_read(ctx, queries.settings)
        saved = settings.get("policy") or {}
        info = {"name": saved.get("name"), "policy": known_name(saved.get("name")), "params": full_params(saved),
                "pinned": settings.get("pinned"), "daemon_running": False}     # (pinned: as the daemon's, or null)
        if not as_json:         # (as status says it: the lines below read as the running daemon's policy otherwise)
            # (a next start only where none holds it: an unreadable lock cannot tell, and says so first)
            saved_for = "for its next start, from" if down else "in"
            click.echo(f"specctl: {why}; the policy saved {saved_for} the database:", err=True)
    emit(info, as_json, lambda i: f"{i['name']}{alias_note(i)}" + "".join(f"\n    {k}={value_text(v)}"
                                                                          for k, v in i["params"].items())
         if i["name"] is not None else f"no policy saved in {ctx.db}: the daemon starts with its config's [policy] name "
                                      "(bandit unless set)")


def _policy_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion of `policy set NAME`: the registered policies and their aliases (helper-142: none offered)."""
    from policies import ALIASES, POLICIES
    return sorted(n for n in [*POLICIES, *ALIASES] if n.startswith(incomplete))


@policy.command("set")
@click.argument("name", shell_complete=_policy_names)
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="policy parameter (repeatable)")
@click.pass_obj
def policy_set(ctx: Ctx, name: str, params: tuple[str, ...]) -> None:
    """Switch to policy NAME (validated; persisted; survives restarts)."""
    from policies import PolicyError, make_policy, parse_kv
    try:
        kv = parse_kv(params)
        built = make_policy(name, kv)       # validate here first: a bad one never reaches the daemon
        learns = bool(built.state())
    except PolicyError as e:
        fail(str(e), EXIT_USAGE)
    try:
        info = _change(ctx, "/policy", {"name": name, "params": kv})
        click.echo(f"policy {info['name']} active{_params_note(kv, built.params)}{LEARNED_NOTES.get(info.get('learned'), '')}")
        pinned = info.get("pinned")
    except DaemonUnreachable:
        from state import queries
        save_offline(ctx, "policy", {"name": name, "params": kv})
        # (fixed's threshold, which a running daemon judges by its engine: as an offline pin, said against the last start)
        say(f"daemon is not running: policy {name}{_params_note(kv, built.params)} saved to {ctx.db}, used at next start"
            f"{_above(ctx, built.params.get('threshold'))}")
        pinned = offline_read(ctx, queries.settings).get("pinned")
    if pinned is not None:
        click.echo(f"specctl: note: the threshold is pinned at {pinned}; {name} "     # (fixed, always, never: no state)
                   f"{'learns from every batch but ' if learns else ''}decides nothing until `specctl threshold unpin`",
                   err=True)


def _change(ctx: Ctx, path: str, body: dict) -> dict:
    """POST path; a daemon that dropped it at the end of its drain counts, once stopped, as none running (the caller
    then saves the change for its next start)."""
    from .stop import stopped_meanwhile
    try:
        return call(ctx, "POST", path, body, dropped=True)
    except DaemonDropped as e:
        raise stopped_meanwhile(ctx, e) from None


# the daemon's answer says what the policy now in force knows (absent from a daemon before 12-02d)
LEARNED_NOTES = {"kept": "; what it learned is kept", "restored": "; its saved state restored (as it was at its last switch away; "
                "the threshold moves from where it is at the guard's pace)",
                 "new": "; learning from scratch", "none": "; a fixed rule, it learns nothing"}


def _params_note(kv: dict, params: dict) -> str:
    """`policy set` replaces the parameters: without --param they are the policy's defaults again; a policy without
    any (params: the built policy's, always and never) says so (it read '(default parameters)')."""
    return f" ({', '.join(f'{k}={v}' for k, v in kv.items())})" if kv else \
        " (default parameters)" if params else " (it has no parameters)"


# --- threshold ----------------------------------------------------------------
@click.group(invoke_without_command=True)
@click.pass_context
def threshold(click_ctx: click.Context) -> None:
    """Show the threshold (no command: status's threshold line and exit code), pin it by hand, or unpin it."""
    if click_ctx.invoked_subcommand is None:
        from .status import current_status, threshold_line
        st, code = current_status(click_ctx.obj, explain=True)
        click.echo(terminal_text(threshold_line(st)))     # (its text read from the database: as emit prints it)
        if code:
            raise SystemExit(code)


def _trial_note(res: dict) -> str:
    """The policy may open with a trial right after an unpin: say so, as status does."""
    note = trial_note(res["threshold"], res.get("exploit_threshold"), res.get("trial"))
    return f": {note}" if note else ""


def _pin(ctx: Ctx, value: int | None) -> None:
    path = "/threshold/pin" if value is not None else "/threshold/unpin"
    try:
        res = _change(ctx, path, {"threshold": value} if value is not None else {})
        if res.get("stopping") and res.get("changed", True):     # (helper-138: it said 'tries again at every retune')
            click.echo(f"{'threshold pinned at ' + str(value) if value is not None else 'threshold unpinned'} (saved); "
                       "the daemon is stopping: its next start applies it")
            return
        if res.get("refused"):      # saved, and held across restarts, but not what the engine runs
            fail(_refused_line(value, res))
        if not res.get("changed", True):       # the daemon found it so already and changed nothing
            click.echo(f"threshold already pinned at {value}; nothing changed" if value is not None else
                       f"threshold was not pinned (now {res['threshold']}, policy decides); nothing changed")
            return
        click.echo(f"threshold pinned at {res['threshold']}" if value is not None else
                   f"threshold unpinned (now {res['threshold']}{_trial_note(res)}, policy decides)")
    except DaemonUnreachable:
        # A daemon holding the database (on another socket, or starting) is the one to judge: its refusal first, for
        # any N (it was 'out of range (allowed 0 .. 65536)' above, 'daemon is not running' for one already saved).
        if (holder := lock_holder(ctx.db)) != UNREADABLE:
            refuse_held(ctx, holder)
        if value is None:
            if not present(ctx.db):     # (helper-128: it said 'not pinned in D' of a D that is not there)
                refuse_unpaired(ctx)    # (--socket B, no --db: 'nothing is pinned' was said of B from D's absence)
                say(f"daemon is not running and there is no database at {ctx.db}: nothing is pinned; nothing changed")
                return
            if _saved_pin(ctx) is None:
                say(f"daemon is not running: the threshold was not pinned in {ctx.db}; nothing changed")
                return
        else:
            PIN.check(value, ctx=click.get_current_context())   # what an offline pin may save (no engine judges it)
            if present(ctx.db) and _saved_pin(ctx) == value:       # (as the daemon says it: nothing written)
                say(f"daemon is not running: threshold already pinned at {value} in {ctx.db}{_above(ctx, value)}; "
                    "nothing changed")
                return
        save_offline(ctx, "pinned", value)
        say(f"daemon is not running: {'pin ' + str(value) if value is not None else 'unpin'} "
            f"saved to {ctx.db}, applied at next start{_above(ctx, value)}")


def _above(ctx: Ctx, value: int | None) -> str:
    """An offline pin above the largest batch of the engine's last start: what the start will make of it (said again
    when the pin is repeated: helper-142)."""
    from state import queries
    top = offline_read(ctx, queries.started_max_batch) if value is not None else None
    return f" (above the engine's largest batch at its last start, {top}: taken as {top} if it is so then)" \
        if top is not None and value > top else ""


def _refused_line(value: int | None, res: dict) -> str:
    """A pin (value) or unpin (None) whose threshold the engine has not taken: what the command did (saved, or
    nothing changed), then the refusal."""
    changed = res.get("changed", True)
    if value is not None:
        done = f"threshold pinned at {value} (saved)" if changed else f"threshold already pinned at {value}"
        wanted = "it"
    else:
        done = "threshold unpinned (saved)" if changed else "threshold was not pinned; nothing changed"
        named = res.get("refused_threshold")            # (absent from a daemon before 12-05)
        wanted = "the policy's threshold" + (f" {named}" if named is not None else "")
    return (f"{done}, but the engine has not taken {wanted}: {res['refused']}; it runs {res['threshold']} and the "
            "daemon tries again at every retune (specctl status says while it cannot)")


def _saved_pin(ctx: Ctx) -> int | None:
    from state import queries
    return offline_read(ctx, queries.settings).get("pinned")


# A pin's range: where a daemon answers, its engine's largest batch (the daemon judges it, one line naming that
# range); where none does, the contract's, what a pin saved offline may be (taken as the engine's largest batch at
# the next start). Checked here first, it named 65536 to a daemon whose engine takes 256.
PIN = Bounded("threshold", 0, MAX_BATCH, later=True)


@threshold.command("pin", context_settings=NEGATIVE_ARGS)
@click.argument("n", metavar="N", type=PIN)
@click.pass_obj
def threshold_pin(ctx: Ctx, n: int) -> None:
    """Hold the threshold at N (speculate iff batch size <= N; 0 = never) until unpinned."""
    _pin(ctx, n)


@threshold.command("unpin")
@click.pass_obj
def threshold_unpin(ctx: Ctx) -> None:
    """Hand the threshold back to the policy."""
    _pin(ctx, None)


# --- history ------------------------------------------------------------------
@click.command()
@click.option("--limit", metavar="N", type=Bounded("--limit", 1, 10000), default=20, show_default=True,
              help="at most N decisions")
@json_option
@click.pass_obj
def history(ctx: Ctx, limit: int, as_json: bool) -> None:
    """Recent threshold decisions, newest first."""
    try:
        rows = call(ctx, "GET", f"/history?limit={limit}")
    except DaemonUnreachable as e:
        from state import queries
        rows = read_offline(ctx, lambda db: queries.recent_decisions(db, limit), e)

    def render(rows):
        if not rows:
            return "no decisions yet"
        return "\n".join(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(r['wall']))}  "
                         f"{r['old']:>5} -> {r['new']:<5} {one_line(r['policy'])}: {one_line(r['reason'])}" for r in rows)
    emit(rows, as_json, render)
