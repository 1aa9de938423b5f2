"""Numbers written as text where they cross a boundary (specctl's arguments, policy parameters, the control API's
queries): ASCII decimal only. int() and float() also take "1_0" (10), "+5", other scripts' digits ("٣" is 3) and, for
float(), "nan" / "infinity": a typo or a hostile value would be read as a number. Standard library only (specctl's
start-up path and the policies import it)."""
from __future__ import annotations

import re

INTEGER = re.compile(r"-?[0-9]+")
DECIMAL = re.compile(r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def int_text(text: str) -> int | None:
    """The integer `text` writes in ASCII digits with a minus at most, or None (None too past int()'s digit limit,
    4300: its ValueError was a traceback out of run's --concurrency, simulate's levels and specctl's pin)."""
    if not INTEGER.fullmatch(text):
        return None
    try:
        return int(text)
    except ValueError:
        return None


def decimal_text(text: str) -> float | None:
    """The number `text` writes as an ASCII decimal (an exponent allowed: "1e-3"), or None."""
    return float(text) if DECIMAL.fullmatch(text) else None


def echoed(text: str, width: int = 80) -> str:
    """A value as a refusal echoes it: whole up to `width` characters, else cut short with "..." (a 4,300-digit
    argument or a 64 KiB API field is not echoed whole)."""
    return text if len(text) <= width else text[:width - 3] + "..."
