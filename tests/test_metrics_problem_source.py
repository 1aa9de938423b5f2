"""specctl_problem is labelled by what a problem is about, not by its text: the texts carry counts, times and seconds
('for 61 s', 'refused at 12:01:07'), and each scrape while one lasted made a new Prometheus series (helper-156)."""
from prometheus_client.registry import CollectorRegistry

from controller.daemon.metrics import ServiceCollector, problem_source
from tests.fakes import make_service


def _problem_series(registry: CollectorRegistry) -> dict[str, float]:
    return {s.labels["source"]: s.value for m in registry.collect() if m.name == "specctl_problem" for s in m.samples}


def test_a_problem_whose_text_moves_keeps_one_series(short_tmp):
    svc, writer = make_service(short_tmp)
    try:
        registry = CollectorRegistry()
        registry.register(ServiceCollector(svc))
        assert _problem_series(registry) == {}
        seen = []
        for seconds in (61, 62, 63):
            svc.problems = lambda health, s=seconds: [f"telemetry: no sample decoded for {s} s, only undecodable "
                                                     f"messages ({s * 100:,} this run)", "engine: gone", "engine: down"]
            seen.append(_problem_series(registry))
        assert seen == [{"telemetry": 1.0, "engine": 2.0}] * 3
    finally:
        writer.stop()


def test_the_source_is_the_words_before_the_first_colon():
    assert problem_source("database disk full: database or disk is full") == "database disk full"
    assert problem_source("reload: refused at 12:01:07, the running config kept: x") == "reload"
    assert problem_source("no colon here at all, and long enough to be cut at forty characters") == \
        "no colon here at all, and long enough to"
    assert problem_source(": nothing before") == "unknown"
