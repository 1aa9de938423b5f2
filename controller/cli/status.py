"""`specctl status`: the live status document from the daemon, or the same document built from
the database when the daemon is down or still starting."""
from __future__ import annotations

import time

import click

from ..status import build_status, summarise
from .client import DaemonUnreachable
from .common import Ctx, call, emit, fail, json_option, offline_db


def _fmt(value, spec: str = "", none: str = "-") -> str:
    return none if value is None else format(value, spec)


def _acceptance(st: dict) -> str:
    if st.get("mean_accept_length") is None and st.get("last_accept_length") is not None:
        return (f"no speculative batch in the live window; last accept length "
                f"{st['last_accept_length']:.2f}, {st.get('last_accept_age_s') or 0:.0f}s ago")
    return (f"mean accept length {_fmt(st.get('mean_accept_length'), '.2f')}, "
            f"rate {_fmt(st.get('acceptance_rate'), '.1%')}")


def _rejected(samples: dict) -> str:
    kinds = {k: v for k, v in (samples.get("rejected") or {}).items() if v}
    if not kinds:
        return ""
    return f", {sum(kinds.values())} rejected ({', '.join(f'{k} {v}' for k, v in kinds.items())})"


def render_status(st: dict) -> str:
    d, eng = st["daemon"], st.get("engine") or {}
    if not d["running"]:
        head = [f"daemon:      STARTING, pid {d['pid']}: control socket not open yet (read from {d['db']})"
                if d.get("starting") else f"daemon:      NOT RUNNING (read from {d['db']})"]
    else:
        head = [f"daemon:      running, pid {d['pid']}, up {d['uptime_s']:.0f}s, "
                f"{'healthy' if d['healthy'] else 'UNHEALTHY'}",
                *[f"problem:     {p}" for p in d.get("problems") or []],
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
        f"{samples.get('dropped', 0)} dropped{_rejected(samples)}",
    ]
    if samples.get("write_errors") or samples.get("write_dropped"):
        lines.append(f"database:    {samples.get('write_errors', 0)} failed writes, {samples.get('write_dropped', 0)} "
                     "samples not written (queue full): see the daemon's log")
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
    """The status document from the database alone (the daemon is down or not serving yet)."""
    from state import queries
    db = offline_db(ctx)
    saved = queries.settings(db)
    sums = queries.sample_sums(db)
    last = queries.recent_decisions(db, 1)
    pol = saved.get("policy") or {}
    window = summarise(sums, sums.get("span_s"))
    last_write = queries.last_wall(db)      # the daemon's last checkpoint, decision or event
    window.update(window_s=60.0, figures_age_s=round(time.time() - last_write, 1) if last_write else None)
    control = {"threshold": saved["pinned"] if saved.get("pinned") is not None else saved.get("threshold"),
               "pinned": saved.get("pinned") is not None, "policy": {"name": pol.get("name"),
                                                                     "params": pol.get("params", {})},
               "last_decision": last[0] if last else None}
    return build_status({"running": False, "db": str(ctx.db), "socket": str(ctx.socket)}, None, control, window,
                        {"total": sums["batches"]})


@click.command()
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
        from state.db import DaemonLock, StoreError
        try:
            holder = DaemonLock(ctx.db).holder()
        except StoreError:
            holder = None                    # an unreadable lock file says nothing about a daemon
        if holder:      # alive but not serving: the engine is still loading (or the daemon is wedged)
            st["daemon"].update(starting=True, pid=int(holder) if holder.isdigit() else holder)
        if not as_json:
            why = (f"daemon pid {holder} holds the database but its control socket is not open yet (engine starting?)"
                   if holder else f"daemon is not running ({e})")
            click.echo(f"{why}; last state from the database:", err=True)
    emit(st, as_json, render_status)


