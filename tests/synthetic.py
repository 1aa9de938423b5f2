"""Synthetic sample streams whose right answer is known, driven through the real control loop."""
from __future__ import annotations

import random

from controller.contract import speculates
from controller.control.guard_config import GuardConfig
from controller.control.loop import ControlLoop
from policies import Sample, make_policy


def accept_length_for(crossover: int) -> float:
    """Accept length that puts the crossover (last batch size where spec wins) at `crossover`."""
    return 1.0 + 0.1 * (crossover + 0.5)


class Stream:
    """Batch sizes drawn uniformly from 1..max_bs; routed by the loop's threshold (contract.speculates).

    Off: step = 0.01 + 0.001*bs. Spec: step = off step * (1 + 0.1*bs), so spec's
    tokens/s over off's is L / (1 + 0.1*bs): the crossover moves with the accept
    length L, as it does on a real engine when traffic changes. Step noise ~2%.
    """

    def __init__(self, crossover: int, max_bs: int = 24, seed: int = 0):
        self.max_bs = max_bs
        self.rng = random.Random(seed)
        self.t = 0.0
        self.crossover = crossover

    def sample(self, threshold: int) -> Sample:
        bs = self.rng.randint(1, self.max_bs)
        step = (0.01 + 0.001 * bs) * (1.0 + 0.02 * self.rng.gauss(0, 1))
        if speculates(bs, threshold):
            expected = bs * accept_length_for(self.crossover)
            tokens = int(expected) + (self.rng.random() < expected - int(expected))
            s = Sample(self.t + step * (1 + 0.1 * bs), bs, 2, tokens, step * (1 + 0.1 * bs), True)
        else:
            s = Sample(self.t + step, bs, 0, bs, step, True)
        self.t = s.t
        return s


def run(policy_name: str, stream: Stream, seconds: float, loop: ControlLoop | None = None,
        tick_s: float = 0.5, seed: int = 0) -> ControlLoop:
    if loop is None:
        policy = make_policy(policy_name, seed=seed, max_batch_size=stream.max_bs)
        # The policy's own answer: without the guard's hysteresis (min_gain) and change budget,
        # which hold a move worth 0.1 % (one bucket off the crossover here) on purpose.
        loop = ControlLoop(policy, GuardConfig(explore_share=0.25, min_gain=0.0, changes_per_min=0),
                           initial_threshold=0)
    end = stream.t + seconds
    next_tick = stream.t + tick_s
    while stream.t < end:
        loop.observe(stream.sample(loop.threshold))
        while next_tick <= stream.t:
            loop.tick(next_tick)
            next_tick += tick_s
    return loop
