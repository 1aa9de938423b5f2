"""`spec-controller run`: the service systemd starts (Type=notify)."""
from __future__ import annotations

import logging
import sys

import click

from state.db import StoreError

from .config import ConfigError, load_config
from .lifecycle import Daemon, Fatal


@click.group()
def main() -> None:
    """spec-controller: the daemon that retunes SGLang's speculation threshold."""


@main.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="TOML config (default /etc/spec-controller/config.toml; missing = built-in defaults)")
@click.option("--engine", type=click.Choice(["sim", "sglang"]), help="engine to embed")
@click.option("--profile", help="simulator profile: name or .toml/.json path")
@click.option("--trace", help="simulator load trace (looped): name or path")
@click.option("--concurrency", type=int, help="simulator: fixed number of clients instead of a trace")
@click.option("--arrival-rate", type=float, help="simulator: Poisson arrivals at this many requests/s instead of a trace")
@click.option("--speed", type=float, help="simulator clock rate (virtual seconds per real second)")
@click.option("--policy", help="policy at first start (later: specctl policy set)")
@click.option("--db", help="SQLite database path")
@click.option("--socket", "socket_path", help="control socket path")
@click.option("--metrics-port", type=int, help="serve Prometheus metrics on 127.0.0.1:PORT")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
def run(config_path, engine, profile, trace, concurrency, arrival_rate, speed, policy, db, socket_path, metrics_port,
        log_level):
    """Run the daemon in the foreground (systemd's ExecStart)."""
    overrides: dict[str, dict] = {}
    for section, key, value in [("engine", "kind", engine), ("sim", "profile", profile), ("sim", "trace", trace),
                                ("sim", "concurrency", concurrency), ("sim", "arrival_rate", arrival_rate),
                                ("sim", "speed", speed),
                                ("policy", "name", policy), ("storage", "db", db), ("control", "socket", socket_path),
                                ("control", "metrics_port", metrics_port), ("control", "log_level", log_level)]:
        if value is not None:
            overrides.setdefault(section, {})[key] = value
    try:
        cfg = load_config(config_path, overrides)
    except ConfigError as e:
        click.echo(f"spec-controller: {e}", err=True)
        sys.exit(2)
    cfg["_overrides"] = overrides
    logging.basicConfig(level=cfg["control"]["log_level"], stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.WARNING)   # it logs every job run at INFO
    try:
        code = Daemon(cfg).run()
    except (StoreError, Fatal, RuntimeError) as e:
        click.echo(f"spec-controller: {e}", err=True)
        sys.exit(getattr(e, "code", 1))
    sys.exit(code)


if __name__ == "__main__":
    main()
