"""Simulator profiles and traces: TOML/JSON files, schema-checked, loaded by name or path.

Format: docs/profiles.md. Built-in files live in controller/profiles/.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..contract import MAX_BATCH, zero_saves_prefill_draft
from ..numtext import data_text, plain
from ..paths import beside, names_a_file, read_text_file

BUILTIN_DIR = Path(__file__).resolve().parent.parent / "profiles"
TRACE_DIR = BUILTIN_DIR / "traces"
MIN_STEP_S = 1e-4      # a step table's least: the daemon rejects steps under 10 us (intake), all a 1e-6 table made


class ProfileError(ValueError):
    """A profile or trace that cannot be used; the message is one line."""


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    max_batch_size: int
    spec_steps: int
    batch_sizes: tuple[int, ...]
    step_off: tuple[float, ...]
    step_spec: tuple[float, ...]
    mean_accept_length: float
    accept_spread: float
    noise: float
    prefill_s: float
    prefill_s_per_request: float
    output_len_mean: float
    output_len_sd: float
    concurrency: tuple[int, ...]
    source: str = ""
    prefill_s_per_token: float = 0.0
    max_prefill_tokens: int = 16384
    output_len_range: tuple[int, int] | None = None     # uniform lengths instead of the normal
    prompt_len_range: tuple[int, int] = (128, 128)
    arrival_rate: tuple[float, ...] = ()                # open-loop levels, requests/s
    prefill_s_draft: float = 0.0         # per extend batch while prefills also run the draft (threshold > 0)
    chained_extends: bool = False        # open loop: arrivals during an extend get their own before the decode
    draft_kv: bool = True                # off path kv writes the draft's KV: lean prefill above 0 too (contract)
    first_step_stub: bool = False        # [acceptance]: the first speculative step after an off one accepts none

    @property
    def prefills_pay_draft(self) -> bool:
        """Threshold 0 saves the prefills of off batches the draft's pass (policies.types.Snapshot): lean prefill
        skips it at any threshold where the off path writes the draft's KV (core.prefill_runs_draft)."""
        return zero_saves_prefill_draft(True, self.draft_kv)

    @property
    def prompt_len_mean(self) -> float:
        return sum(self.prompt_len_range) / 2.0

    @property
    def output_len_expected(self) -> float:
        return sum(self.output_len_range) / 2.0 if self.output_len_range else max(1.0, self.output_len_mean)

    def capacity_req_s(self) -> float:
        """Rough saturation rate (requests/s): the better mode at max_batch_size, plus each
        request's own prefill cost (the fixed cost per extend batch is left out)."""
        bs = self.max_batch_size
        tok_s = max(self.tok_per_s(bs, False), self.tok_per_s(bs, True))
        per_request = (self.output_len_expected / tok_s + self.prefill_s_per_request
                       + self.prefill_s_per_token * self.prompt_len_mean)
        return 1.0 / per_request

    def open_loop_rates(self) -> tuple[float, ...]:
        """The profile's arrival rates, or 10 %, 50 % and 85 % of the rough capacity."""
        if self.arrival_rate:
            return self.arrival_rate
        cap = self.capacity_req_s()
        return tuple(float(f"{cap * f:.2g}") for f in (0.1, 0.5, 0.85))

    def prefill_seconds(self, requests: int, tokens: float, draft: bool = False) -> float:
        """What an extend batch of `requests` new requests with `tokens` prompt tokens adds to an interval;
        draft: the draft's pass over the prompts runs too (no lean prefill: contract.prefill_skips_draft)."""
        return (self.prefill_s + self.prefill_s_per_request * requests + self.prefill_s_per_token * tokens
                + (self.prefill_s_draft if draft else 0.0))

    def step_seconds(self, batch_size: float, speculative: bool) -> float:
        """Step time at a batch size: piecewise linear in the table, extrapolated linearly past it."""
        ys = self.step_spec if speculative else self.step_off
        xs = self.batch_sizes
        if batch_size <= xs[-1] or len(xs) == 1:
            return float(np.interp(batch_size, xs, ys))
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        return ys[-1] + slope * (batch_size - xs[-1])

    def tok_per_s(self, batch_size: int, speculative: bool, accept_length: float | None = None) -> float:
        """Expected decode tokens/s of one batch (no prefill)."""
        accept = self.mean_accept_length if accept_length is None else accept_length
        tokens = batch_size * (accept if speculative else 1.0)
        return tokens / self.step_seconds(batch_size, speculative)

    def better_mode(self, batch_size: int, accept_length: float | None = None) -> bool:
        """The oracle's choice at a batch size: True = speculate."""
        return self.tok_per_s(batch_size, True, accept_length) > self.tok_per_s(batch_size, False, accept_length)


@dataclass(frozen=True)
class Segment:
    """A stretch of load: `concurrency` clients (closed loop) or, with `rate`, Poisson
    arrivals at that many requests per second (open loop; concurrency is then 0)."""

    seconds: float
    concurrency: int
    mean_accept_length: float | None = None
    label: str = ""
    rate: float | None = None

    def __post_init__(self) -> None:
        # (the readers check ranges by field name; this catches one built in code: 0 s divided by zero, deep inside)
        if not self.seconds > 0:
            raise ValueError(f"a segment lasts more than 0 s (got {self.seconds!r})")
        if self.rate is None and self.concurrency < 1:
            raise ValueError(f"a closed-loop segment needs concurrency >= 1 (got {self.concurrency!r})")
        if self.rate is not None and not self.rate > 0:
            raise ValueError(f"an open-loop segment needs a rate > 0 (got {self.rate!r})")

    @property
    def open_loop(self) -> bool:
        return self.rate is not None


@dataclass(frozen=True)
class Trace:
    name: str
    description: str
    profile: str | None
    segments: tuple[Segment, ...]


# --- reading -----------------------------------------------------------------
def _read(path: Path, what: str) -> dict:
    try:
        text = read_text_file(path)
    except OSError as e:
        raise ProfileError(f"{what} {path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError as e:         # (a binary file: was a traceback out of run and simulate)
        raise ProfileError(f"{what} {path}: not UTF-8 text ({e.reason} at offset {e.start})") from None
    try:
        data = data_text(text, json_text=path.suffix == ".json")
    except (ValueError, RecursionError) as e:     # (the parser's error; recursion: was a traceback)
        raise ProfileError(f"{what} {path}: not valid {'JSON' if path.suffix == '.json' else 'TOML'} "
                           f"({'nested too deeply' if isinstance(e, RecursionError) else e})") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{what} {path}: top level must be a table")
    return data


def _locate(name_or_path: str, directory: Path, what: str) -> Path:
    p = Path(name_or_path)
    try:
        if names_a_file(name_or_path):
            if not p.exists():
                raise ProfileError(f"{what} file {name_or_path} does not exist")
            return p
        for suffix in (".toml", ".json"):
            cand = directory / f"{name_or_path}{suffix}"
            if cand.exists():
                return cand
    except OSError as e:            # a name too long for the file system: was a traceback out of run and simulate
        raise ProfileError(f"{what} {name_or_path!r}: {e.strerror}") from None
    known = ", ".join(builtin_names(directory)) or "none"
    raise ProfileError(f"unknown {what} {name_or_path!r} (built-in: {known}; or give a .toml/.json path)")


def builtin_names(directory: Path = BUILTIN_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*") if p.suffix in (".toml", ".json"))


class _Checker:
    """Pulls typed values out of a dict, raising ProfileError naming the key."""

    def __init__(self, where: str, data: dict):
        self.where, self.data = where, data

    def section(self, key: str, required: bool = True) -> "_Checker":
        value = self.data.get(key, None if required else {})
        if not isinstance(value, dict):
            raise ProfileError(f"{self.where}: [{key}] must be a table")
        return _Checker(f"{self.where} [{key}]", value)

    def unknown(self, allowed: set[str]) -> None:
        extra = sorted(set(self.data) - allowed)
        if extra:
            raise ProfileError(f"{self.where}: unknown key {extra[0]!r} (allowed: {', '.join(sorted(allowed))})")

    def number(self, key: str, lo: float, hi: float, default: float | None = None, integer: bool = False,
               why: str = "") -> float:     # why: whose the bounds are ('in 1 .. 3' did not say; helper-128)
        value = self.data.get(key, default)
        if value is None:
            raise ProfileError(f"{self.where}: missing {key}")
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if integer:
            ok = ok and float(value).is_integer()
        if not ok or not lo <= value <= hi:
            kind = "an integer" if integer else "a number"
            raise ProfileError(f"{self.where}: {key}={value!r} must be {kind} in {plain(lo)} .. {plain(hi)}{why}")
        return int(value) if integer else float(value)

    def numbers(self, key: str, lo: float, hi: float, integer: bool = False, length: int | None = None) -> tuple:
        values = self.data.get(key)
        if not isinstance(values, list) or not values or (length is not None and len(values) != length):
            raise ProfileError(f"{self.where}: {key} must be a list of {'' if length is None else f'{length} '}numbers")
        sub = _Checker(self.where, {f"{key}[{i}]": v for i, v in enumerate(values)})
        return tuple(sub.number(f"{key}[{i}]", lo, hi, integer=integer) for i in range(len(values)))

    def length_range(self, key: str) -> tuple[int, int]:
        lo, hi = self.numbers(key, 1, 1e7, integer=True, length=2)
        if lo > hi:
            raise ProfileError(f"{self.where}: {key} must be [low, high] with low <= high")
        return lo, hi

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise ProfileError(f"{self.where}: {key}={value!r} must be true or false")
        return value

    def text(self, key: str, default: str = "") -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str):
            raise ProfileError(f"{self.where}: {key} must be a string")
        return value


def parse_profile(data: dict, where: str, source: str = "") -> Profile:
    c = _Checker(where, data)
    c.unknown({"name", "description", "source", "max_batch_size", "spec_steps", "noise", "prefill_s",
               "prefill_s_per_request", "prefill_s_per_token", "prefill_s_draft", "max_prefill_tokens",
               "chained_extends", "draft_kv", "step_time", "acceptance", "load"})
    spec_steps = c.number("spec_steps", 1, 16, integer=True)
    st = c.section("step_time")
    st.unknown({"batch_size", "off", "spec"})
    bs = st.numbers("batch_size", 1, MAX_BATCH, integer=True)
    if any(b >= a for a, b in zip(bs[1:], bs)):
        raise ProfileError(f"{where} [step_time]: batch_size must be strictly increasing")
    off, spec = (st.numbers(mode, MIN_STEP_S, 60.0, length=len(bs)) for mode in ("off", "spec"))
    acc = c.section("acceptance")
    acc.unknown({"mean_accept_length", "spread", "first_step_stub"})
    load = c.section("load", required=False)
    load.unknown({"concurrency", "output_len_mean", "output_len_sd", "output_len_range", "prompt_len_range",
                  "arrival_rate"})
    concurrency = load.numbers("concurrency", 1, MAX_BATCH, integer=True) if "concurrency" in load.data \
        else (1, 2, 4, 8, 16, 32, 64, 128, 256)
    return Profile(
        name=c.text("name", Path(source).stem if source else "profile"),
        description=c.text("description"),
        source=c.text("source"),
        max_batch_size=c.number("max_batch_size", 1, MAX_BATCH, default=256, integer=True),
        spec_steps=spec_steps,
        batch_sizes=bs, step_off=off, step_spec=spec,
        mean_accept_length=acc.number("mean_accept_length", 1.0, spec_steps + 1.0),
        accept_spread=acc.number("spread", 0.0, 1.0, default=0.1), first_step_stub=acc.flag("first_step_stub", False),
        noise=c.number("noise", 0.0, 1.0, default=0.03),
        prefill_s=c.number("prefill_s", 0.0, 10.0, default=0.005),
        prefill_s_per_request=c.number("prefill_s_per_request", 0.0, 10.0, default=0.001),
        prefill_s_per_token=c.number("prefill_s_per_token", 0.0, 1.0, default=0.0),
        max_prefill_tokens=c.number("max_prefill_tokens", 1, 1 << 24, default=16384, integer=True),
        prefill_s_draft=c.number("prefill_s_draft", 0.0, 10.0, default=0.0),
        chained_extends=c.flag("chained_extends", False),
        draft_kv=c.flag("draft_kv", True),
        output_len_mean=load.number("output_len_mean", 1, 1e6, default=256),
        output_len_sd=load.number("output_len_sd", 0, 1e6, default=64),
        output_len_range=load.length_range("output_len_range") if "output_len_range" in load.data else None,
        prompt_len_range=load.length_range("prompt_len_range") if "prompt_len_range" in load.data else (128, 128),
        arrival_rate=load.numbers("arrival_rate", 0.001, 1e6) if "arrival_rate" in load.data else (),
        concurrency=concurrency,
    )


def load_profile(name_or_path: str) -> Profile:
    path = _locate(name_or_path, BUILTIN_DIR, "profile")
    return parse_profile(_read(path, "profile"), f"profile {path.name}", str(path))


def load_trace(name_or_path: str, runs_on: Profile | None = None) -> Trace:
    path = _locate(name_or_path, TRACE_DIR, "trace")
    c = _Checker(f"trace {path.name}", _read(path, "trace"))
    c.unknown({"name", "description", "profile", "segment"})
    raw = c.data.get("segment")
    if not isinstance(raw, list) or not raw:
        raise ProfileError(f"trace {path.name}: needs at least one [[segment]]")
    bound = (runs_on.spec_steps + 1.0, f" (profile {runs_on.name}: spec_steps {runs_on.spec_steps} + 1)") if runs_on else (17.0, "")
    segments = [_segment(f"trace {path.name} segment {i}", seg, *bound) for i, seg in enumerate(raw)]
    if len({s.open_loop for s in segments}) > 1:
        raise ProfileError(f"trace {path.name}: segments must all give concurrency or all give rate, not a mix")
    profile = c.data.get("profile")
    if profile is not None and not isinstance(profile, str):
        raise ProfileError(f"trace {path.name}: profile must be a string")
    if profile and names_a_file(profile):        # (a file the trace names is the trace's, as a config's are)
        profile = beside(profile, path.parent)
    return Trace(c.text("name", path.stem), c.text("description"), profile, tuple(segments))


def _segment(where: str, seg: object, max_accept_length: float, why_max: str) -> Segment:
    if not isinstance(seg, dict):
        raise ProfileError(f"{where} must be a table")
    s = _Checker(where, seg)
    s.unknown({"seconds", "concurrency", "rate", "mean_accept_length", "label"})
    if ("concurrency" in seg) == ("rate" in seg):
        raise ProfileError(f"{where}: " + ("give concurrency or rate, not both" if "rate" in seg else
                                           "missing concurrency (clients) or rate (requests/s)"))
    accept = s.number("mean_accept_length", 1.0, max_accept_length, why=why_max) if "mean_accept_length" in seg else None
    if "rate" in seg:
        return Segment(s.number("seconds", 0.1, 1e6), 0, accept, s.text("label"), s.number("rate", 0.001, 1e6))
    return Segment(s.number("seconds", 0.1, 1e6), s.number("concurrency", 1, MAX_BATCH, integer=True),
                   accept, s.text("label"))
