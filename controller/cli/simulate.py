"""`specctl simulate`: a policy against the oracle on a profile, over load levels or a trace."""
from __future__ import annotations

import sys

import click

from policies import PolicyError, parse_kv

from ..sim.evaluate import DEFAULT_TICK_S, evaluate, sweep_segments
from ..sim.profile import ProfileError, load_profile, load_trace


def _levels(text: str | None, default: tuple[int, ...]) -> list[int]:
    if not text:
        return list(default)
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of integers", param_hint="--concurrency")
    if not levels or any(c < 1 or c > 65536 for c in levels):
        raise click.BadParameter("levels must be 1 .. 65536", param_hint="--concurrency")
    return levels


def render_table(result: dict, trace: bool) -> str:
    head = (f"policy {result['policy']} on profile {result['profile']}"
            + (f", trace {result['trace']}" if trace else "") + f", seed {result['seed']}")
    cols = ["segment" if trace else "concurrency", "policy tok/s", "oracle tok/s", "ratio", "spec share",
            "threshold"] + (["reconverge s"] if trace else [])
    rows = []
    for r in result["rows"]:
        rc = r.get("reconverge_s")
        rows.append([r["segment"] if trace else str(r["concurrency"]), f"{r['throughput_tok_s']:,.1f}",
                     f"{r['oracle_tok_s']:,.1f}", f"{r['ratio']:.3f}", f"{r['spec_share']:.0%}",
                     str(r["final_threshold"])] + ([("never" if rc is None else f"{rc:.1f}")] if trace else []))
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    lines = [head, fmt.format(*cols), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r) for r in rows]
    o = result["overall"]
    lines.append(f"overall: {o['throughput_tok_s']:,.1f} vs oracle {o['oracle_tok_s']:,.1f} tok/s = "
                 f"{o['ratio']:.3f}; lowest ratio {o['min_ratio']:.3f}")
    if "best_static" in result:
        b = result["best_static"]
        lines.append(f"best static threshold in hindsight: {b['threshold']} at {b['throughput_tok_s']:,.1f} tok/s "
                     f"(ratio {b['ratio']:.3f})")
    return "\n".join(lines)


def plot(result: dict, path: str, trace: bool) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = result["rows"]
    x = list(range(len(rows))) if trace else [r["concurrency"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=90)
    ax.plot(x, [r["oracle_tok_s"] for r in rows], "k--", marker="o", label="oracle (upper envelope)")
    ax.plot(x, [r["throughput_tok_s"] for r in rows], marker="s", label=f"policy {result['policy']}")
    if trace:
        ax.set_xticks(x, [r["segment"] for r in rows], rotation=20, fontsize=7)
        ax.set_xlabel("trace segment")
    else:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (clients)")
    ax.set_ylabel("output tok/s")
    ax.set_title(f"{result['policy']} on {result['profile']}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


@click.command()
@click.option("--profile", "profile_name", default="seed", show_default=True, help="profile name or .toml/.json path")
@click.option("--policy", "policy_name", default="bandit", show_default=True)
@click.option("--param", "params", multiple=True, metavar="K=V", help="policy parameter (repeatable)")
@click.option("--concurrency", help="comma-separated levels (default: the profile's, 1,2,4..256)")
@click.option("--arrival-rate", "arrival_rate", metavar="R[,R2...]",
              help="open loop: Poisson arrivals at these requests/s instead of --concurrency ('default': the profile's)")
@click.option("--trace", "trace_name", help="trace name or path (instead of --concurrency)")
@click.option("--seconds", type=click.FloatRange(1, 1e6), default=60.0, show_default=True,
              help="virtual seconds per concurrency level")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--tick", type=click.FloatRange(0.01, 3600), default=DEFAULT_TICK_S, show_default=True,
              help="decision interval, virtual seconds")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="write a PNG of throughput vs load")
def simulate(profile_name, policy_name, params, concurrency, arrival_rate, trace_name, seconds, seed, tick, as_json,
             plot_path):
    """Run a policy on a simulated engine and compare it with the oracle."""
    import json
    if arrival_rate and (concurrency or trace_name):
        raise click.UsageError("--arrival-rate replaces --concurrency and --trace: give one of them")
    try:
        kv = parse_kv(params)
        if arrival_rate or (trace_name and load_trace(trace_name).segments[0].open_loop):
            return _simulate_open(profile_name, policy_name, kv, arrival_rate, trace_name, seconds, seed, tick,
                                  as_json, plot_path)
        profile, segments, trace = _load(profile_name, trace_name,
                                         lambda p: sweep_segments(_levels(concurrency, p.concurrency), seconds))
        result = evaluate(profile, segments, policy_name, kv, seed=seed, tick_s=tick, with_static=bool(trace_name))
    except (PolicyError, ProfileError) as e:
        click.echo(f"specctl: {e}", err=True)
        sys.exit(2)
    if trace_name:
        result["trace"] = trace.name
    if plot_path:
        plot(result, plot_path, bool(trace_name))
    click.echo(json.dumps(result, indent=2) if as_json else render_table(result, bool(trace_name)))


def _load(profile_name: str, trace_name: str | None, levels):
    """(profile, segments, trace): a trace's segments on its profile (unless one is named), or
    levels(profile) on the named profile."""
    if trace_name:
        trace = load_trace(trace_name)
        profile = load_profile(profile_name if profile_name != "seed" or not trace.profile else trace.profile)
        return profile, list(trace.segments), trace
    profile = load_profile(profile_name)
    return profile, levels(profile), None


def _simulate_open(profile_name, policy_name, kv, arrival_rate, trace_name, seconds, seed, tick, as_json, plot_path):
    import json

    from ..sim.openeval import evaluate_open, rate_segments
    from .openloop import parse_rates, plot_open, render_open_table, series_of
    profile, segments, trace = _load(profile_name, trace_name,
                                     lambda p: rate_segments(parse_rates(arrival_rate, p.open_loop_rates()), seconds))
    result = evaluate_open(profile, segments, policy_name, kv, seed=seed, tick_s=tick)
    if trace_name:
        result["trace"] = trace.name
    if plot_path:
        plot_open(series_of(result), plot_path, f"{result['policy']} on {result['profile']}, open loop")
    click.echo(json.dumps(result, indent=2) if as_json else render_open_table(result))
