"""Decision reasons in words, for the operator reading `specctl history`: what the threshold does
and why, with the measured gain where there is one. Pure formatting: numbers in, text out."""
from __future__ import annotations

import math


def batches(lo: int, hi: int) -> str:
    return f"batch {lo}" if lo == hi else f"batch {lo}-{hi}"


def gain_text(gain: float | None, guessed: bool = False) -> str:
    """The gain in words; guessed: from the step-time trend (policies.trend), not measured in the bucket."""
    if gain is None:
        return "not measured"
    # under 0.5 % one decimal: "it pays at batch 151-169 (speculation +0% tok/s)" read as a contradiction; a loss
    # that rounds to 0.0 % reads "+0.0%", not "-0.0%" (+ 0.0 drops the sign)
    text = f"{round(gain, 2):+.0%}" if abs(gain) >= 0.005 else f"{round(gain, 3) + 0.0:+.1%}"
    return f"the trend says speculation {text} tok/s" if guessed else f"speculation {text} tok/s"


def exploit(threshold: int, before: int, span: str, gain: float | None, live: str, live_gain: float | None,
            guessed: tuple[bool, bool] = (False, False), live_speculates: bool = False) -> str:
    """The best threshold, after the policy's estimates. span/gain: the bucket at the edge that
    moved (the highest one now speculated on a rise, the lowest one no longer on a fall); guessed:
    whether its gain and live_gain come from the step-time trend (gain_text); live_speculates: whether
    the threshold speculates the live bucket (a held threshold may disagree with the live gain's sign)."""
    if threshold > before:
        return f"speculate up to batch {threshold}: it pays at {span} ({gain_text(gain, guessed[0])})"
    if threshold < before:
        head = "stop speculating" if threshold == 0 else f"speculate only up to batch {threshold}"
        return f"{head}: it no longer pays at {span} ({gain_text(gain, guessed[0])})"
    mode = "speculating" if live_speculates else "plain decoding"
    return f"best threshold {threshold}: live {live} is {mode} ({gain_text(live_gain, guessed[1])})"


def trial(speculate: bool, span: str, why: str) -> str:
    return f"trial: {'speculate' if speculate else 'plain decode'} at {span} to measure it ({why})"


def unmeasured(last_tried: float, now: float) -> str:
    return "never measured" if last_tried == -math.inf else f"last measured {now - last_tried:.0f} s ago"


def uncertain(gain: float | None) -> str:
    return f"estimate uncertain: {gain_text(gain)}"


def settled(speculate: bool) -> str:
    """An untried mode skipped because a neighbouring bucket already settles it."""
    return ("plain decoding lost at larger batches" if speculate
            else "speculation lost at smaller batches")


def stale_accept(high: float, current: float, gain: float) -> str:
    """A trial of speculation where it would pay at the highest accept length seen lately: the
    current estimate is stale (measured elsewhere before the load moved here)."""
    return (f"accept length {current:.2f} is stale; at {high:.2f}, seen lately, "
            f"{gain_text(gain)}")


def probe_goes_on(estimate: float, measured: float, gain: float) -> str:
    """A probe of speculation kept on: the accept estimate is still mostly the traffic's before it."""
    return (f"accept length {estimate:.2f} is still mostly older traffic's; at {measured:.2f}, "
            f"measured since, {gain_text(gain)}")


def guessed(gain: float) -> str:
    """A mode never measured in a bucket, guessed from the other buckets' step-time trend."""
    return f"never measured; {gain_text(gain, guessed=True)}"
