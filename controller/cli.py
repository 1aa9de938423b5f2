"""specctl: steer and inspect the spec-controller daemon (and run the simulator)."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import click

from policies import PolicyError, list_policies, make_policy, parse_kv
from state import queries
from state.db import DaemonLock, StoreError, open_store

from .client import DaemonError, DaemonUnreachable, request
from .paths import find_db, find_socket


class Ctx:
    def __init__(self, socket: str | None, db: str | None):
        self.socket = Path(socket) if socket else find_socket()
        self.db = Path(db) if db else find_db()


def fail(message: str, code: int = 1) -> None:
    click.echo(f"specctl: {message}", err=True)
    sys.exit(code)


def json_option(fn: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="print JSON (stable schema)")(fn)


def emit(data: Any, as_json: bool, render: Callable[[Any], str]) -> None:
    click.echo(json.dumps(data, indent=2, default=str) if as_json else render(data))


def call(ctx: Ctx, method: str, path: str, body: dict | None = None):
    """The daemon's answer; DaemonUnreachable propagates so commands can fall back."""
    try:
        return request(ctx.socket, method, path, body)
    except DaemonError as e:
        fail(str(e))


def offline_db(ctx: Ctx, write: bool = False):
    try:
        if write:
            if DaemonLock(ctx.db).held_by_other():
                fail(f"a daemon holds {ctx.db} but does not answer on {ctx.socket}; nothing changed")
            return open_store(ctx.db)
        return open_store(ctx.db, readonly=True)
    except StoreError as e:
        fail(str(e))


class OneLineErrors(click.Group):
    """Usage errors as one line ('specctl: ...') and exit code 2, as operators expect."""

    def main(self, *args, **kwargs):
        kwargs.pop("standalone_mode", None)
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as e:
            fail(e.format_message().replace("\n", " "), 2)
        except click.ClickException as e:
            fail(e.format_message(), e.exit_code)
        except click.exceptions.Abort:
            fail("aborted", 1)


@click.group(cls=OneLineErrors)
@click.option("--socket", envvar="SPECCTL_SOCKET", help="daemon control socket [env SPECCTL_SOCKET]")
@click.option("--db", envvar="SPECCTL_DB", help="database for offline reads [env SPECCTL_DB]")
@click.pass_context
def cli(click_ctx: click.Context, socket: str | None, db: str | None) -> None:
    """Steer spec-controller: status, policy, threshold pins, history, simulation."""
    click_ctx.obj = Ctx(socket, db)


# --- status -------------------------------------------------------------------
def _fmt(value, spec: str = "", none: str = "-") -> str:
    return none if value is None else format(value, spec)


def _acceptance(st: dict) -> str:
    if st.get("mean_accept_length") is None and st.get("last_accept_length") is not None:
        return (f"no speculative batch in the live window; last accept length "
                f"{st['last_accept_length']:.2f}, {st.get('last_accept_age_s') or 0:.0f}s ago")
    return (f"mean accept length {_fmt(st.get('mean_accept_length'), '.2f')}, "
            f"rate {_fmt(st.get('acceptance_rate'), '.1%')}")


def render_status(st: dict) -> str:
    d, eng = st["daemon"], st.get("engine") or {}
    if not d["running"]:
        head = [f"daemon:      STARTING, pid {d['pid']}: control socket not open yet (read from {d['db']})"
                if d.get("starting") else f"daemon:      NOT RUNNING (read from {d['db']})"]
    else:
        head = [f"daemon:      running, pid {d['pid']}, up {d['uptime_s']:.0f}s, "
                f"{'healthy' if d['healthy'] else 'UNHEALTHY'}",
                f"engine:      {eng.get('engine', '?')} - {eng.get('detail', '')}"
                + (f" (profile {eng['profile']}, load {eng.get('load')})" if eng.get("profile") else "")]
    pol = st.get("policy") or {}
    alias = f" (= {pol['policy']})" if pol.get("policy") and pol.get("policy") != pol.get("name") else ""
    samples = st.get("samples") or {}
    lines = head + [
        f"threshold:   {_fmt(st.get('threshold'))}{' (pinned)' if st.get('pinned') else ''}"
        f"   speculate iff batch size <= threshold",
        f"policy:      {pol.get('name', '-')}{alias}",
        f"acceptance:  {_acceptance(st)}",
        f"throughput:  {_fmt(st.get('tok_per_s'), ',.0f')} tok/s, speculating {_fmt(st.get('spec_share'), '.0%')}"
        " of batches",
        f"samples:     {_fmt(samples.get('per_s'), '.1f')}/s, {samples.get('total', 0)} total, "
        f"{samples.get('dropped', 0)} dropped",
    ]
    if samples.get("write_errors") or samples.get("write_dropped"):
        lines.append(f"database:    {samples.get('write_errors', 0)} failed writes, {samples.get('write_dropped', 0)} "
                     "sample batches not written (queue full): see the daemon's log")
    plugin = eng.get("plugin") or {}
    if "off_path" in plugin:
        per = lambda ns, n: f"{ns / n / 1e3:.1f}" if n else "-"
        lines.append(f"off path:    {plugin['off_path']}, {plugin['fast_off_batches']} fast batches "
                     f"({plugin['fast_off_graph_batches']} on CUDA graphs), {plugin['off_fallbacks']} on steps-0")
        switches, switch_ns = plugin.get("switches", 0), plugin.get("switch_ns", 0)
        lines.append(f"plugin cost: decision {per(plugin['decision_ns'] - switch_ns, plugin['decisions'] - switches)}"
                     f" us, telemetry {per(plugin['telemetry_ns'], plugin['telemetry_calls'])} us per batch; "
                     f"{per(switch_ns, switches)} us per state switch ({switches} switches)")
        lines.append(f"off launch:  {per(plugin['fast_off_cpu_ns'], plugin['fast_off_batches'])} us CPU per fast "
                     "off batch (SGLang's own decode launch)")
    last = st.get("last_decision")
    if last:
        lines.append(f"last change: {last['old']} -> {last['new']} ({last['reason']})")
    return "\n".join(lines)


def offline_status(ctx: Ctx) -> dict:
    db = offline_db(ctx)
    saved = queries.settings(db)
    summary = queries.sample_summary(db)
    last = queries.recent_decisions(db, 1)
    pol = saved.get("policy") or {}
    return {
        "daemon": {"running": False, "db": str(ctx.db), "socket": str(ctx.socket), "healthy": False},
        "engine": None,
        "threshold": saved["pinned"] if saved.get("pinned") is not None else saved.get("threshold"),
        "pinned": saved.get("pinned") is not None,
        "policy": {"name": pol.get("name"), "params": pol.get("params", {})},
        "mean_accept_length": summary.get("mean_accept_length"),
        "acceptance_rate": summary.get("acceptance_rate"),
        "tok_per_s": summary.get("tok_per_s"),
        "spec_share": summary.get("spec_share"),
        "samples": {"total": summary["samples"], "per_s": None, "dropped": None},
        "last_decision": last[0] if last else None,
    }


@cli.command()
@json_option
@click.pass_obj
def status(ctx: Ctx, as_json: bool) -> None:
    """Current threshold, policy, acceptance, throughput and health."""
    try:
        st = call(ctx, "GET", "/status")
    except DaemonUnreachable as e:
        if not ctx.db.exists():
            fail(f"daemon is not running ({e}) and there is no database at {ctx.db}")
        st = offline_status(ctx)
        holder = DaemonLock(ctx.db).holder()
        if holder:      # alive but not serving: the engine is still loading (or the daemon is wedged)
            st["daemon"].update(starting=True, pid=holder)
        if not as_json:
            why = (f"daemon pid {holder} holds the database but its control socket is not open yet (engine starting?)"
                   if holder else f"daemon is not running ({e})")
            click.echo(f"{why}; last state from the database:", err=True)
    emit(st, as_json, render_status)


# --- policy -------------------------------------------------------------------
@cli.group()
def policy() -> None:
    """List, show and switch the policy."""


@policy.command("list")
@json_option
def policy_list(as_json: bool) -> None:
    """The available policies and their parameters."""
    def render(rows):
        out = []
        for r in rows:
            alias = f" (alias: {', '.join(r['aliases'])})" if r["aliases"] else ""
            out.append(f"{r['name']}{alias}: {r['summary']}")
            out += [f"    {p['name']}={p['default']:g}  [{p['min']:g} .. {p['max']:g}] {p['help']}" for p in r["params"]]
        return "\n".join(out)
    emit(list_policies(), as_json, render)


@policy.command("show")
@json_option
@click.pass_obj
def policy_show(ctx: Ctx, as_json: bool) -> None:
    """The active policy and its parameters."""
    try:
        info = call(ctx, "GET", "/policy")
    except DaemonUnreachable:
        saved = queries.settings(offline_db(ctx)).get("policy") or {}
        info = {"name": saved.get("name"), "params": saved.get("params", {}), "daemon_running": False}
    emit(info, as_json, lambda i: f"{i['name']}" + "".join(f"\n    {k}={v}" for k, v in i["params"].items()))


@policy.command("set")
@click.argument("name")
@click.option("--param", "params", multiple=True, metavar="K=V", help="policy parameter (repeatable)")
@click.pass_obj
def policy_set(ctx: Ctx, name: str, params: tuple[str, ...]) -> None:
    """Switch to policy NAME (validated; persisted; survives restarts)."""
    try:
        kv = parse_kv(params)
        make_policy(name, kv)             # validate here first: a bad one never reaches the daemon
    except PolicyError as e:
        fail(str(e), 2)
    try:
        info = call(ctx, "POST", "/policy", {"name": name, "params": kv})
        click.echo(f"policy {info['name']} active")
    except DaemonUnreachable:
        offline_db(ctx, write=True)["settings"].upsert(queries.setting_row("policy", {"name": name, "params": kv}),
                                                      pk="key")
        click.echo(f"daemon is not running: policy {name} saved to {ctx.db}, used at next start")


# --- threshold ----------------------------------------------------------------
@cli.group()
def threshold() -> None:
    """Pin the threshold by hand, or unpin it."""


def _pin(ctx: Ctx, value: int | None) -> None:
    path = "/threshold/pin" if value is not None else "/threshold/unpin"
    try:
        res = call(ctx, "POST", path, {"threshold": value} if value is not None else {})
        click.echo(f"threshold pinned at {res['threshold']}" if value is not None
                   else f"threshold unpinned (now {res['threshold']}, policy decides)")
    except DaemonUnreachable:
        offline_db(ctx, write=True)["settings"].upsert(queries.setting_row("pinned", value), pk="key")
        click.echo(f"daemon is not running: {'pin ' + str(value) if value is not None else 'unpin'} "
                   f"saved to {ctx.db}, applied at next start")


@threshold.command("pin")
@click.argument("value", type=click.IntRange(0, 65536))
@click.pass_obj
def threshold_pin(ctx: Ctx, value: int) -> None:
    """Hold the threshold at VALUE (0 = never speculate) until unpinned."""
    _pin(ctx, value)


@threshold.command("unpin")
@click.pass_obj
def threshold_unpin(ctx: Ctx) -> None:
    """Hand the threshold back to the policy."""
    _pin(ctx, None)


# --- history ------------------------------------------------------------------
@cli.command()
@click.option("--limit", type=click.IntRange(1, 10000), default=20, show_default=True)
@json_option
@click.pass_obj
def history(ctx: Ctx, limit: int, as_json: bool) -> None:
    """Recent threshold decisions, newest first."""
    try:
        rows = call(ctx, "GET", f"/history?limit={limit}")
    except DaemonUnreachable:
        rows = queries.recent_decisions(offline_db(ctx), limit)

    def render(rows):
        if not rows:
            return "no decisions yet"
        return "\n".join(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(r['wall']))}  "
                         f"{r['old']:>5} -> {r['new']:<5} {r['policy']}: {r['reason']}" for r in rows)
    emit(rows, as_json, render)


from .cli_simulate import simulate  # noqa: E402  (registers `specctl simulate`)

cli.add_command(simulate)


if __name__ == "__main__":
    cli()
