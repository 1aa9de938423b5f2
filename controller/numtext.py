"""Numbers written as text where they cross a boundary (specctl's and spec-controller's arguments, `--param` and
`--set` values, policy parameters given as text in the config or the API, the control API's queries, the plugin's
integer variable): one rule, written here. An integer is ASCII digits, a '-' before them at most, without leading
zeros ("0" itself) and with nothing around them: the integer grammar of JSON, which the API's bodies take. A number
writes its digits before the point the same way (0.5, .5, 5., 1e-3; not 05.5). int() and float() also took " 5" and
"05", "+5", "1_0" (10), other scripts' digits ("٣" is 3) and, for float(), "nan" / "infinity": a typo or a hostile
value was read as a number. Also how a refusal shows text and values (echoed, one_line, shown) and a config's number
check (not_a_number). Standard library only (specctl's start-up path, the policies and the SGLang plugin's envwords
import it)."""
from __future__ import annotations

import datetime
import math
import re
import sys

INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")
DECIMAL = re.compile(r"-?((0|[1-9][0-9]*)(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
# What a refusal says of the rule (a number written otherwise: "threshold '05' is not an integer (ASCII digits ...)")
WRITTEN = "ASCII digits, a '-' at most: no '+', spaces, '_' or leading zeros"
WRITTEN_NUMBER = "ASCII digits, a '.' and an exponent allowed (0.5, 1e-3), a '-' at most: no '+', spaces, '_' or " \
                 "leading zeros"


def written(kind: type, lo: float | None = None) -> str:
    """The rule as a refusal of a value of `kind` says it: an integer's (WRITTEN), or a number's with its point;
    without the '-' where the value's range starts at lo >= 0 (`pin abc` was told of a '-' no pin has)."""
    rule = WRITTEN if kind is int else WRITTEN_NUMBER
    return rule.replace(", a '-' at most", "") if lo is not None and lo >= 0 else rule


def plain(number: float) -> str:
    """A limit (a range's bound, a parameter's default) as text: an integral one in full (1000000000 and 16777216, not
    %g's 1e+09 and 1.67772e+07), another as short as it reads back exactly (0.001, 1e-05; not %g's 1.23457 for
    1.23456789). The one wording of every 'allowed LO .. HI'."""
    if isinstance(number, int) or float(number).is_integer() and abs(number) < 1e16:
        return str(int(number))
    short = f"{number:g}"
    return short if float(short) == number else repr(float(number))


def value_text(value: object) -> str:
    """A setting's value in a line (a policy parameter, its range): a number as plain writes it (60, not 60.0 in one
    line and 60 in another; never rounded), anything else (text, saved by another version) as it is."""
    return plain(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def a_kind(kind: type) -> str:
    """How a refusal names what a value is not: "an integer" (as specctl's pin says it), "a number"."""
    return "an integer" if kind is int else "a number"


def int_text(text: str) -> int | None:
    """The integer `text` writes by the rule above, or None (None too past int()'s digit limit, 4300: its ValueError
    was a traceback out of run's --concurrency, simulate's levels and specctl's pin)."""
    if not INTEGER.fullmatch(text):
        return None
    try:
        return int(text)
    except ValueError:
        return None


class Unheld(ValueError):
    """Number text that a float does not hold as it is written: non-zero, yet smaller in size than the smallest normal
    float ("1e-400" is read as 0.0, "1e-320" as 9.99989e-321). The message is the refusal's end: '1e-400 is ...'."""


SMALLEST = sys.float_info.min       # 2.2250738585072014e-308; below it a float is 0 or loses digits (subnormal)


def held_float(text: str) -> float:
    """float(text) where the float holds the number `text` writes, else Unheld (`policy set ucb --param c=1e-400` was
    echoed as given and ran as c=0; `--arrival-rate 1e-400` ran the trace). Past a float's range is inf, which every
    range check refuses as out of range. Also TOML's and JSON's float text (underscores, inf, nan: as float() reads
    them)."""
    value = float(text)
    if abs(value) < SMALLEST and re.search(r"[1-9]", re.split(r"[eE]", text)[0]):
        raise Unheld(f"{echoed(text)} is closer to 0 than a number here can be (a float's least is {SMALLEST:.1e}"
                     f"{_read_as(text, value)})")
    return value


def _read_as(text: str, value: float) -> str:
    """How held_float's refusal ends: what the float reads, where that differs from the text ("1e-308" was told it
    would be read as 1e-308)."""
    import decimal      # (here: specctl's start-up imports this module, a refusal is rare)
    if value == 0:
        return ": it would be read as 0"
    try:
        same = decimal.Decimal(f"{value:g}") == decimal.Decimal(text)
    except decimal.InvalidOperation:    # (float() takes some text Decimal does not: said as before)
        same = False
    return "; under it a float keeps fewer digits" + ("" if same else f": it would be read as {value:g}")


def decimal_text(text: str) -> float | None:
    """The number `text` writes by the rule above (an exponent allowed: "1e-3"), or None; Unheld (held_float)."""
    return held_float(text) if DECIMAL.fullmatch(text) else None


def number_text(text: str, kind: type) -> int | float | None:
    """int_text for an integer setting (kind int), decimal_text for any other number."""
    return (int_text if kind is int else decimal_text)(text)


def misread(text: object) -> bool:
    """Text that int() / float() read as a finite number and this rule does not ("+5", "05", "1_0", "٣"): a refusal of
    it says the rule (WRITTEN), which a bare "must be an integer" did not (`--set sim.concurrency=+5`)."""
    try:
        if not isinstance(text, str) or decimal_text(text.strip()) is not None:
            return False
    except Unheld:      # (written by the rule: refused for its size, not for how it is written)
        return False
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def not_a_number(key: str, raw: object, kind: type) -> str | None:
    """Why a config's TOML value is no number of `kind` (int: a TOML integer; float: any TOML number; never true /
    false), as every config section's refusal words it after 'key=value' (`[sim]` said "must be a number" and `[guard]`
    "is not a number"): "must be a number", how to write it where it is text; None where it is one."""
    if not isinstance(raw, bool) and isinstance(raw, int if kind is int else (int, float)):
        return None
    why = f"must be {a_kind(kind)}"
    if fix := _unquoted(raw, kind):     # ("5": quoted in the file)
        return f"{why}, not text: write it unquoted ({key} = {fix})"
    return why + (f" ({written(kind)})" if misread(raw) else "")


def _unquoted(raw: object, kind: type) -> str | None:
    """A number of the setting's kind written as text by the rule (quoted in the file; --set takes .5, which TOML does
    not read, as a number), as TOML writes it; None for anything else (its own grammar took "+5" and "05": `--set
    guard.min_threshold=+5` was told to write unquoted what it had)."""
    try:
        number = decimal_text(raw.strip()) if isinstance(raw, str) else None     # (a quoted " 2 ": the file's spaces)
    except Unheld:          # (no number to write unquoted)
        return None
    if number is None or not math.isfinite(number) or (kind is int and not number.is_integer()):
        return None
    return repr(kind(number))


# What a boundary trims around a name or value (`--param`, `--set`, a SPEC_CONTROLLER_* word). str.strip() also took
# U+00A0, U+2003 and every other Unicode space: text pasted from a web page was read as something it did not show.
ASCII_SPACE = " \t\n\r\v\f"


class OddSpace(ValueError):
    """Text with a space other than ASCII's at an end; the message names it: 'U+00A0 (NO-BREAK SPACE) around ...'."""


def trimmed(text: str) -> str:
    """text less the ASCII spaces around it; OddSpace where another space is left at an end."""
    out = text.strip(ASCII_SPACE)
    for ch in (out[:1], out[-1:]):
        if ch.isspace():
            import unicodedata      # (here: as decimal above)
            raise OddSpace(f"U+{ord(ch):04X} ({unicodedata.name(ch, 'a space')}) around a name or value: type a plain "
                           "space, or none")
    return out


def echoed(text: str, width: int = 80) -> str:
    """A value as a refusal echoes it: whole up to `width` characters, else cut short with "..." (a 4,300-digit
    argument or a 64 KiB API field is not echoed whole)."""
    return text if len(text) <= width else text[:width - 3] + "..."


def shown(value: object) -> str:
    """A value as a refusal echoes it, cut short (echoed): as Python writes it ('5' is text, 5 a number; a TOML date as
    TOML writes it), but null and true / false as JSON writes them, inside a list or table too, the spelling of the
    API's bodies and of TOML's true / false: `c=None` and `c=True` were no spelling the user wrote ({"c": null})."""
    return echoed(_spelled(value, 8))


def _spelled(value: object, depth: int) -> str:
    if value is None or isinstance(value, bool):
        return "null" if value is None else "true" if value else "false"
    if isinstance(value, (list, dict)):
        if not depth:       # (8 levels shown, then "...": repr() spelled what lies deeper as Python does, None, True)
            return "[...]" if isinstance(value, list) else "{...}"
        if isinstance(value, list):
            return f"[{', '.join(_spelled(v, depth - 1) for v in value[:20])}{', ...' if len(value) > 20 else ''}]"
        items = list(value.items())
        return "{" + ", ".join(f"{k!r}: {_spelled(v, depth - 1)}" for k, v in items[:20]) + (
            ", ..." if len(items) > 20 else "") + "}"
    return repr(value)


# C0 controls, DEL and C1 controls as escapes (a path or key holding a newline made a refusal two lines; an ESC, a
# terminal's control sequence)
_CONTROLS = {c: repr(chr(c))[1:-1] for c in [*range(0x20), *range(0x7f, 0xa0)]}
LONGEST_LINE = 1000


def one_line(text: str) -> str:
    """A message as one line: its control characters written as escapes (\\n, \\x1b), and one over LONGEST_LINE
    characters cut in its middle, keeping where it is and the hint at its end (a config's 1 MB key was a 1 MB line,
    at a SIGHUP reload a log line and an events row as long; helper-129)."""
    text = text.translate(_CONTROLS)
    cut = len(text) - LONGEST_LINE + 40
    return text if cut <= 40 else f"{text[:600]}...({cut:,} characters left out)...{text[600 + cut:]}"


_TERMINAL_CONTROLS = {c: e for c, e in _CONTROLS.items() if c not in (0x09, 0x0a)}


def terminal_text(text: str) -> str:
    """Lines for a terminal: control characters written as escapes but the tabs and newlines a rendering puts there
    (a database's text, tampered with or not, printed an ESC's terminal sequences: a window title, a cleared screen)."""
    return text.translate(_TERMINAL_CONTROLS)


class _AsWritten:
    """A TOML date, date-time or time as its refusals show it: as TOML writes it (1979-05-27), not
    datetime.date(1979, 5, 27)."""

    def __repr__(self) -> str:
        return self.isoformat()


class _Date(_AsWritten, datetime.date):
    pass


class _DateTime(_AsWritten, datetime.datetime):
    pass


class _Time(_AsWritten, datetime.time):
    pass


# a TOML date, date-time or time -> the same value, shown (repr) as TOML writes it: every `{value!r}` of a refusal
_AS_WRITTEN = {datetime.date: lambda v: _Date(v.year, v.month, v.day),
               datetime.datetime: lambda v: _DateTime(v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond,
                                                      v.tzinfo),
               datetime.time: lambda v: _Time(v.hour, v.minute, v.second, v.microsecond, v.tzinfo)}
INT64 = (-(1 << 63), (1 << 63) - 1)     # TOML's integers (its spec: one it cannot hold "must" be an error)


def data_text(text: str, json_text: bool = False) -> object:
    """A config's, profile's or trace's TOML (json_text: JSON) as data; tomllib.TOMLDecodeError (json.JSONDecodeError)
    for what is not, one line, also where the parser said nothing: an integer past int()'s 4300 digits (ValueError,
    a traceback out of run, config check and simulate), past 64 bits (0x1000...0: a repr or float() of it raised where
    it was checked), a JSON key given twice (json.loads kept the last), a float it does not hold (held_float: 1e-400
    was 0). A date or time is shown as TOML writes it. RecursionError as the parser's."""
    import json
    import tomllib
    error = json.JSONDecodeError if json_text else tomllib.TOMLDecodeError

    def refused(message: str) -> ValueError:      # (the parser's error class, its own arguments left out: a message)
        e = error.__new__(error, message)
        ValueError.__init__(e, message)
        return e

    def once(pairs: list) -> dict:
        out: dict = {}
        for key, value in pairs:
            if key in out:
                raise refused(f"key {echoed(key)!r} given twice")
            out[key] = value
        return out

    def held(number: str) -> object:        # (Unheld as the value: the walk below names where it is)
        try:
            return held_float(number)
        except Unheld as e:
            return e
    try:
        data = json.loads(text, object_pairs_hook=once, parse_float=held) if json_text else \
            tomllib.loads(text, parse_float=held)
    except ValueError as e:
        if isinstance(e, error):
            raise
        raise refused(f"an integer of over {sys.get_int_max_str_digits()} digits") from None
    todo: list = [("", data)]
    while todo:
        where, value = todo.pop()
        if isinstance(value, (dict, list)):
            items = list(value.items() if isinstance(value, dict) else enumerate(value))
            for k, v in items:
                if type(v) in _AS_WRITTEN:
                    value[k] = _AS_WRITTEN[type(v)](v)
            todo += [(f"{where}.{k}" if isinstance(k, str) else f"{where}[{k}]", v) for k, v in items]
        elif isinstance(value, Unheld) or isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
            at = echoed(where.lstrip(".")) or "the value"
            raise refused(f"{at}: {value}" if isinstance(value, Unheld) else
                          f"{at}: an integer past 64 bits ({INT64[0]} .. {INT64[1]})")
    return data
