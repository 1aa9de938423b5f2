"""Pinned host buffers for the prompts' draft-KV rows (draftkv_graph.GraphedKVWriter.write_prompt), used in turn.
Runs inside SGLang's scheduler, once per prefill that writes its draft KV."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class HostRows:
    """Host buffers for prompts' rows (write_prompt), used in turn: on a GPU pinned, each reused once the copy out of
    it has run (its event; SLOTS prompts back, long done), instead of a pinned copy per prompt from the caching host
    allocator (pin_memory: ~0.1 ms of each prefill's launch in 12-04i's profile)."""
    buffers: list               # int64 tensors, each as long as the writer's positions
    events: list                # per buffer: the event recorded after the copy out of it (None: not copied yet / CPU)
    cuda: Any = None            # torch.cuda, where the buffers are pinned
    device: int | None = None   # the GPU's index (current_stream without it looks the device up: draftkv_graph.SideStream)
    next: int = 0
    SLOTS = 4

    @classmethod
    def make(cls, rows: int, device: Any) -> "HostRows":
        """SLOTS buffers of `rows` for copies to `device` (a torch.device): pinned where that is a GPU."""
        import torch
        pinned = device.type == "cuda"
        return cls([torch.empty(rows, dtype=torch.int64, pin_memory=pinned) for _ in range(cls.SLOTS)],
                   [None] * cls.SLOTS, torch.cuda if pinned else None, device.index)

    def take(self) -> Any:
        """The next buffer, once the last copy out of it is done (a CPU copy is done when it returns)."""
        event = self.events[self.next]
        if event is not None:
            event.synchronize()
        return self.buffers[self.next]

    def copied(self) -> None:
        """The copy out of the buffer take() gave is queued on the current stream: its event after it; the next."""
        if self.cuda is not None:
            if self.events[self.next] is None:
                self.events[self.next] = self.cuda.Event()
            self.events[self.next].record(self.cuda.current_stream(self.device))
        self.next = (self.next + 1) % len(self.buffers)
