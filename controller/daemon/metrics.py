"""Prometheus metrics (opt-in port), read from the service's status at scrape time."""
from __future__ import annotations

import io
import socket
from collections import Counter
from socketserver import ThreadingMixIn
from typing import Any, Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from .clients import BoundedClients, DeadlineIO, busy_answer


def problem_source(problem: str) -> str:
    """What a problem is about, a low-cardinality label: its words before the first ':' ('engine', 'reload',
    'telemetry', 'database disk full'), at most 40 characters."""
    return problem.split(":", 1)[0].strip()[:40] or "unknown"


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
        # per source, not per text: a problem's text carries counts, times and seconds ('for 61 s', 'refused at
        # 12:01:07'), a new series at every scrape while it lasted (helper-156); the text is in specctl status
        problem = GaugeMetricFamily("specctl_problem", "Problems the daemon is unhealthy for, per source (a problem's "
                                    "words before its first ':')", labels=["source"])
        for source, n in sorted(Counter(problem_source(p) for p in daemon["problems"]).items()):
            problem.add_metric([source], float(n))
        yield problem
        counters = [
            ("specctl_decisions", "Threshold changes applied", st["decisions"]),
            ("specctl_samples", "Decode-batch samples received", samples["total"]),
            ("specctl_samples_dropped", "Samples dropped because ingest was full", samples["dropped"]),
            ("specctl_samples_ingest_errors", "Samples whose processing failed", samples["ingest_errors"]),
            ("specctl_database_write_errors", "Writes to the SQLite store that failed and were lost",
             samples["write_errors"]),
            ("specctl_telemetry_undecodable", "Telemetry messages that could not be decoded (the engine's)",
             (st["engine"] or {}).get("bad_telemetry") or 0),
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


def _family(addr: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def check_port_free(port: int, addr: str = "127.0.0.1") -> None:
    """OSError if the metrics port cannot be bound (checked before the engine starts)."""
    with socket.socket(_family(addr)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, port))


METRICS_CLIENTS = 16          # scrapes served at once (Prometheus sends one at a time); beyond it a 503 at once
READ_TIMEOUT_S = 10.0         # a scrape's request not all received in this long: its connection closed


class _MetricsHandler(WSGIRequestHandler):
    """One scrape per connection, its request line and headers within READ_TIMEOUT_S in all (clients.DeadlineIO)."""

    def setup(self) -> None:
        self.timeout = READ_TIMEOUT_S
        super().setup()
        self.rfile.close()
        self._reads = DeadlineIO(self.connection, "rb", self.server.slot(self.request))
        self._reads.begin(READ_TIMEOUT_S)
        self.rfile = io.BufferedReader(self._reads)

    def get_environ(self) -> dict:
        self._reads.arrived()          # (its request line and headers are read: a scrape's all)
        return {**super().get_environ(), "specctl.finishing": lambda: self.server.finishing(self.request)}

    def log_message(self, format, *args) -> None:      # (prometheus_client's handler logs nothing either)
        pass


def _answer_then_done(app):
    """app, its connection's slot freed once the scrape's answer is ready (before it is written: the scraper may connect
    again as soon as it has read it, before its hang-up reaches the server; clients.BoundedClients.finishing)."""
    def run(environ, start_response):
        result = app(environ, start_response)
        environ["specctl.finishing"]()
        return result
    return run


class _MetricsServer(BoundedClients, ThreadingMixIn, WSGIServer):
    daemon_threads = True
    busy = busy_answer("text/plain; charset=utf-8", b"too many clients at once\n")
    thread_name = "metrics"

    def __init__(self, *args, **kwargs):
        self.max_clients = METRICS_CLIENTS
        super().__init__(*args, **kwargs)


def start_metrics(service: Any, port: int, addr: str = "127.0.0.1") -> _MetricsServer:
    """prometheus_client's start_http_server, bounded as the control API is (clients.py): its own server kept a thread
    and a descriptor for each client that connected and sent nothing, as long as that client stayed. The server
    returned serves until its stop() (the daemon's drain: the port let go, its threads ended)."""
    from prometheus_client import make_wsgi_app
    registry = CollectorRegistry()
    registry.register(ServiceCollector(service))
    server = type("Server", (_MetricsServer,), {"address_family": _family(addr)})
    httpd = make_server(addr, port, _answer_then_done(make_wsgi_app(registry)), server, _MetricsHandler)
    try:
        httpd.thread.start()
    except BaseException:          # (its thread refused: no caller holds the server to close it)
        httpd.server_close()
        raise
    return httpd
