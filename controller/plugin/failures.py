"""Hook failures: logged once per place with their traceback; SGLang keeps running."""
from __future__ import annotations

import logging

log = logging.getLogger("spec_controller.plugin")


class Failures:
    """The places (hook names) that have failed at least once in this process."""

    def __init__(self) -> None:
        self.places: set[str] = set()

    def record(self, where: str, exc: BaseException) -> None:
        if where not in self.places:
            self.places.add(where)
            log.error("spec-controller plugin: %s failed (%s); SGLang keeps running", where, exc, exc_info=exc)
