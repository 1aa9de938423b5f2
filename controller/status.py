"""The status document (`GET /status`, `specctl status --json`): one schema, one builder, used live
by the daemon and offline by specctl from the database (docs/api.md lists the keys). Shared by
the daemon and the CLI; light to import."""
from __future__ import annotations

from typing import Any, Mapping

from . import __version__ as VERSION
DAEMON_KEYS = ("running", "starting", "pid", "version", "uptime_s", "db", "socket", "healthy", "problems")
WINDOW_KEYS = ("mean_accept_length", "acceptance_rate", "last_accept_length", "last_accept_age_s", "tok_per_s",
               "spec_share", "window_s", "figures_age_s",
               "clock_speed")     # the engine clock's rate against real time (the simulator's --speed; 1 on a GPU)
SAMPLE_KEYS = ("total", "per_s", "dropped", "rejected", "ingest_errors", "written", "write_dropped", "write_errors")
# The sums a window of samples is summarised from (LiveStats in memory, queries.sample_sums in SQL).
SUM_KEYS = ("batches", "tokens", "spec_batches", "busy_s", "spec_tokens", "spec_requests", "max_steps")


def summarise(sums: Mapping[str, float], span_s: float | None = None) -> dict[str, Any]:
    """Throughput, spec share, accept length and rate, and batches per second of a window."""
    batches, tokens, spec, busy = (sums.get(k) or 0 for k in ("batches", "tokens", "spec_batches", "busy_s"))
    spec_tokens, spec_reqs, k = (sums.get(k) or 0 for k in ("spec_tokens", "spec_requests", "max_steps"))
    accept = spec_tokens / spec_reqs if spec_reqs else None
    return {
        "batches": batches,
        "tok_per_s": round(tokens / busy, 2) if busy > 0 else None,
        "spec_share": round(spec / batches, 4) if batches else None,
        "mean_accept_length": round(accept, 4) if accept else None,
        "acceptance_rate": round((accept - 1) / k, 4) if accept and k else None,
        "batches_per_s": round(batches / span_s, 2) if span_s else None,
    }


def build_status(daemon: Mapping[str, Any], engine: Mapping[str, Any] | None, control: Mapping[str, Any],
                 window: Mapping[str, Any], samples: Mapping[str, Any]) -> dict[str, Any]:
    """The document, every key present (None where a figure is unknown, e.g. with the daemon down).

    control: threshold, pinned, exploit_threshold, trial (is the threshold a policy's trial? None: not known, the
    daemon down), policy {name, policy, params, last_run (the daemon down: the policy its last run ran, where not
    name's, which its next start runs)}, exploration_share,
    last_decision, engine_errors, decisions, job_errors. window: WINDOW_KEYS. samples: SAMPLE_KEYS.
    """
    policy = control.get("policy") or {}
    return {
        "daemon": {**{k: daemon.get(k) for k in DAEMON_KEYS}, "running": bool(daemon.get("running")),
                   "starting": bool(daemon.get("starting")), "healthy": bool(daemon.get("healthy")),
                   "problems": list(daemon.get("problems") or []), "version": VERSION},
        "engine": dict(engine) if engine is not None else None,
        "threshold": control.get("threshold"),
        "pinned": bool(control.get("pinned")),
        "exploit_threshold": control.get("exploit_threshold"),
        "trial": control.get("trial"),
        "policy": {"name": policy.get("name"), "policy": policy.get("policy"), "params": dict(policy.get("params") or {}),
                   "last_run": policy.get("last_run")},
        **{k: window.get(k) for k in WINDOW_KEYS},
        "samples": {k: samples.get(k) for k in SAMPLE_KEYS},
        "exploration_share": control.get("exploration_share"),
        "last_decision": control.get("last_decision"),
        "engine_errors": control.get("engine_errors"),
        "job_errors": control.get("job_errors"),
        "decisions": control.get("decisions"),
    }
