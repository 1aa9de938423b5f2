"""`specctl simulate`: a policy against the oracle on a profile, over load levels or a trace."""
from __future__ import annotations

import click

from policies import PolicyError, parse_kv

from ..contract import MAX_BATCH
from ..sim.evaluate import DEFAULT_TICK_S, evaluate, sweep_segments
from ..sim.profile import ProfileError, load_profile, load_trace
from .common import fail
from .figures import PlotError, plot_path_param, save
from .options import EXIT_USAGE, Bounded, number_list, say


def _levels(text: str | None, default: tuple[int, ...]) -> list[int]:
    if not text:
        return list(default)
    levels = number_list(text, int, "--concurrency")     # (int() took "1_0", "٣", "+5")
    if any(c < 1 or c > MAX_BATCH for c in levels):
        raise click.BadParameter(f"levels must be 1 .. {MAX_BATCH}", param_hint="--concurrency")
    return levels


def render_table(result: dict, trace: bool) -> str:
    head = (f"policy {result['policy']} on profile {result['profile']}"
            + (f", trace {result['trace']}" if trace else "") + f", seed {result['seed']}")
    cols = ["segment" if trace else "concurrency", "policy tok/s", "oracle tok/s", "ratio", "never", "always",
            "spec share", "threshold"] + (["reconverge s"] if trace else [])
    rows = []
    for r in result["rows"]:
        rc = r.get("reconverge_s")
        vs = [f"{r[k] / r['oracle_tok_s']:.3f}" if r.get(k) is not None and r["oracle_tok_s"] else "-"
              for k in ("never_tok_s", "always_tok_s")]
        rows.append([r["segment"] if trace else str(r["concurrency"]), f"{r['throughput_tok_s']:,.1f}",
                     f"{r['oracle_tok_s']:,.1f}", f"{r['ratio']:.3f}", *vs, f"{r['spec_share']:.0%}",
                     str(r["final_threshold"])] + ([("never" if rc is None else f"{rc:.1f}")] if trace else []))
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    lines = [head, fmt.format(*cols), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r) for r in rows]
    o = result["overall"]
    lines.append(f"overall: {o['throughput_tok_s']:,.1f} vs oracle {o['oracle_tok_s']:,.1f} tok/s = "
                 f"{o['ratio']:.3f}; lowest ratio {o['min_ratio']:.3f}")
    lines.append("(ratio, never, always: tok/s over the oracle's, of the policy and of never / always speculating)")
    if "best_static" in result:
        b = result["best_static"]
        lines.append(f"best static threshold in hindsight: {b['threshold']} at {b['throughput_tok_s']:,.1f} tok/s "
                     f"(ratio {b['ratio']:.3f})")
    return "\n".join(lines)


@click.command()
@click.option("--profile", "profile_name", help="profile name or .toml/.json path [default: the trace's, else seed]")
@click.option("--policy", "policy_name", default="bandit", show_default=True)
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="policy parameter (repeatable)")
@click.option("--concurrency", help="comma-separated levels (default: the profile's, 1,2,4..256)")
@click.option("--arrival-rate", "arrival_rate", metavar="R[,R2...]",
              help="open loop: Poisson arrivals at these requests/s instead of --concurrency ('default': the profile's)")
@click.option("--trace", "trace_name", help="trace name or path (instead of --concurrency)")
@click.option("--seconds", metavar="SECONDS", type=Bounded("--seconds", 1, 1e6, float), default=60.0,
              show_default=True, help="virtual seconds per concurrency level")
@click.option("--seed", metavar="N", type=Bounded("--seed", 0, 2**32 - 1), default=0, show_default=True)
@click.option("--tick", metavar="SECONDS", type=Bounded("--tick", 0.01, 3600, float), default=DEFAULT_TICK_S,
              show_default=True, help="decision interval, virtual seconds")
@click.option("--finite", is_flag=True,
              help="with --arrival-rate: sglang.bench_serving's protocol: rate x --seconds requests per rate, "
                   "each rate a fresh run until drained; tok/s = output tokens / that duration")
@click.option("--repeats", metavar="N", type=Bounded("--repeats", 1, 100), default=1, show_default=True,
              help="with --finite: seeds seed .. seed+N-1, one run each; medians reported")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option("--plot", "plot_path", metavar="FILE.png", callback=plot_path_param,
              help="also draw tok/s, the ratio to the oracle and the threshold over time")
def simulate(profile_name: str | None, policy_name: str, params: tuple[str, ...], concurrency: str | None,
             arrival_rate: str | None, trace_name: str | None, seconds: float, seed: int, tick: float,
             finite: bool, repeats: int, as_json: bool, plot_path: str | None) -> None:
    """Run a policy on a simulated engine and compare it with the oracle (and never/always)."""
    import json
    for flag, value in (("--profile", profile_name), ("--trace", trace_name), ("--concurrency", concurrency),
                        ("--arrival-rate", arrival_rate)):
        if value is not None and not value.strip():      # (an unset shell variable: was the default run, unsaid)
            fail(f"{flag} is empty: give a value, or leave {flag} out for the default", EXIT_USAGE)
    if finite or repeats != 1:
        from .openloop import simulate_finite
        return simulate_finite(profile_name, policy_name, params, arrival_rate, concurrency or trace_name,
                               finite, seconds, seed, repeats, tick, as_json, plot_path)
    if trace_name and concurrency:
        fail("give --trace or --concurrency, not both", EXIT_USAGE)
    if arrival_rate and (concurrency or trace_name):
        fail("--arrival-rate replaces --concurrency and --trace: give one of them", EXIT_USAGE)
    try:
        kv = parse_kv(params)
        if arrival_rate or (trace_name and load_trace(trace_name).segments[0].open_loop):
            return _simulate_open(profile_name, policy_name, kv, arrival_rate, trace_name, seconds, seed, tick,
                                  as_json, plot_path)
        profile, segments, trace = _load(profile_name, trace_name,
                                         lambda p: sweep_segments(_levels(concurrency, p.concurrency), seconds))
        result = evaluate(profile, segments, policy_name, kv, seed=seed, tick_s=tick, with_static=bool(trace_name),
                          baselines=True)
    except (PolicyError, ProfileError) as e:
        fail(str(e), EXIT_USAGE)
    if trace_name:
        result["trace"] = trace.name
    timeline = result.pop("timeline")
    click.echo(json.dumps(result, indent=2) if as_json else render_table(result, bool(trace_name)))
    if plot_path:
        from .simplot import draw
        _save(lambda: draw(result, timeline, bool(trace_name)), plot_path)


def _save(figure, path: str) -> None:
    """The --plot figure written (one line on stderr naming it), or one line why not."""
    try:
        save(figure(), path)
    except PlotError as e:
        fail(str(e))
    say(f"wrote {path}", err=True)


def _load(profile_name: str, trace_name: str | None, levels):
    """(profile, segments, trace): a trace's segments on its profile (unless one is named), or
    levels(profile) on the named profile."""
    if trace_name:
        trace = load_trace(trace_name)
        profile = load_profile(profile_name or trace.profile or "seed")
        trace = load_trace(trace_name, profile)
        return profile, list(trace.segments), trace
    profile = load_profile(profile_name or "seed")
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
    click.echo(json.dumps(result, indent=2) if as_json else render_open_table(result))
    if plot_path:
        _save(lambda: plot_open(series_of(result), f"{result['policy']} on {result['profile']}, open loop"), plot_path)
