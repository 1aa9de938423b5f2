"""Prometheus metrics (opt-in port), read from the service's status at scrape time."""
from __future__ import annotations

from typing import Any, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry


class ServiceCollector(Collector):
    def __init__(self, service):
        self.service = service

    def collect(self) -> Iterator[Any]:
        st = self.service.status()
        daemon, samples = st["daemon"], st["samples"]
        gauges = [
            ("specctl_threshold_batch_size", "Applied speculation threshold (batch size)", st["threshold"]),
            ("specctl_pinned", "1 if the threshold is pinned by the operator", int(st["pinned"])),
            ("specctl_accept_length_tokens", "Mean accept length of speculative batches (tokens/verify)",
             st["mean_accept_length"]),
            ("specctl_throughput_tokens_per_second", "Decode tokens per second over the live window",
             st["tok_per_s"]),
            ("specctl_spec_share_ratio", "Share of decode batches run with speculation", st["spec_share"]),
            ("specctl_engine_up", "1 while the engine is healthy", int(bool((st["engine"] or {}).get("ok")))),
            ("specctl_healthy", "1 while nothing is wrong (the reasons are in specctl_problem)",
             int(daemon["healthy"])),
        ]
        for name, doc, value in gauges:
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], float("nan") if value is None else float(value))
            yield g
        problem = GaugeMetricFamily("specctl_problem", "1 per reason the daemon is unhealthy", labels=["reason"])
        for reason in daemon["problems"]:
            problem.add_metric([reason[:200]], 1.0)
        yield problem
        counters = [
            ("specctl_decisions", "Threshold changes applied", st["decisions"]),
            ("specctl_samples", "Decode-batch samples received", samples["total"]),
            ("specctl_samples_dropped", "Samples dropped because ingest was full", samples["dropped"]),
            ("specctl_samples_ingest_errors", "Samples whose processing failed", samples["ingest_errors"]),
            ("specctl_database_write_errors", "Writes to the SQLite store that failed and were lost",
             samples["write_errors"]),
        ]
        for name, doc, value in counters:
            c = CounterMetricFamily(name, doc)
            c.add_metric([], float(value))
            yield c
        labelled = [("specctl_samples_rejected", "Samples refused at the daemon's boundary, by reason", "reason",
                     samples["rejected"]),
                    ("specctl_job_errors", "Failed runs of the daemon's periodic jobs", "job", st["job_errors"])]
        for name, doc, label, values in labelled:
            c = CounterMetricFamily(name, doc, labels=[label])
            for key, value in sorted((values or {}).items()):
                c.add_metric([key], float(value))
            yield c


def check_port_free(port: int, addr: str = "127.0.0.1") -> None:
    """OSError if the metrics port cannot be bound (checked before the engine starts)."""
    import socket
    with socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, port))


def start_metrics(service: Any, port: int, addr: str = "127.0.0.1") -> Any:
    from prometheus_client import start_http_server
    registry = CollectorRegistry()
    registry.register(ServiceCollector(service))
    return start_http_server(port, addr=addr, registry=registry)
