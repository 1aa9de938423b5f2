"""TP rank 0's telemetry: one sample per decode batch, stamped when its result reaches the CPU,
sent to the daemon in messages of up to BATCH samples (after FLUSH_S, or when the scheduler goes
idle). Never blocks: a full queue or a broken socket drops the samples and counts them."""
from __future__ import annotations

import time
from typing import Any, Callable

from ..contract import SAMPLES_PER_MESSAGE, encode_stats, pack_sample
from .failures import Failures

# One zmq send (one GIL release, where a scheduler thread can lose the GIL for a switch
# interval) per 16 decode batches instead of per batch; the daemon's cap on a message follows it (contract).
BATCH = SAMPLES_PER_MESSAGE
FLUSH_S = 0.05
STATS_EVERY = 256          # the plugin's counters ride along every this many samples
MAX_STEP_S = 5.0           # a longer interval between results held an idle period: no reward (a backstop: an idle
                           # pass, flush(), already ends the interval)


def current_rank() -> int:
    """This process's global rank: with TP, every rank runs the hooks; only rank 0 reports."""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        pass
    return 0


def connect_push(address: str) -> tuple[Any, int, type[BaseException]]:
    """A non-blocking zmq PUSH socket to the daemon: (socket, send flags, the would-block error)."""
    import zmq
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, 10000)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(address)
    except BaseException:
        sock.close(linger=0)
        raise
    return sock, zmq.NOBLOCK, zmq.Again


class TelemetrySender:
    def __init__(self, address: str | None, failures: Failures, stats: Callable[[], tuple[dict, dict]],
                 rank: Callable[[], int] = current_rank, flush_s: float = FLUSH_S):
        self.address = address
        self.failures = failures
        self.stats = stats                     # () -> (counters, off path state), for the stats message
        self.rank = rank
        self.flush_s = flush_s
        self.sock: Any = None                  # made on first use; False: not this rank / no address
        self.send_flags = 0
        self.again: type[BaseException] = BlockingIOError
        self.sent = 0
        self.dropped = 0
        self.calls = 0
        self.ns = 0
        self.pending: list[bytes] = []         # packed samples not sent yet
        self.pending_since = 0.0
        self.last_result: float | None = None
        self.prefill_since = False
        self.stats_due = False                 # a run-time switch changed what the stats say: send them at idle

    def _socket(self) -> Any:
        if self.sock is None:
            self.sock = False
            if self.address and self.rank() == 0:
                try:     # first opened by emit() or by flush() in Scheduler.on_idle: never raise into the scheduler
                    self.sock, self.send_flags, self.again = connect_push(self.address)
                except Exception as e:          # an address zmq refuses: no telemetry from this process (logged)
                    self.failures.record("telemetry socket", e)
        return self.sock

    def close(self) -> None:
        """Let go of the socket (made again on the next use). The scheduler's exit closes it too; a process that
        makes plugins and goes on (a test, a tool) had no way to, and zmq's sockets stayed open until garbage
        collection. Messages zmq has not yet sent are dropped (linger 0, as at the scheduler's exit: SGLang's exit
        never waits on the daemon); call it from the thread that sends (zmq sockets are not thread-safe)."""
        sock, self.sock = self.sock, None
        if sock:
            sock.close(linger=0)

    # --- hooks ---------------------------------------------------------------------------------
    def before_prefill_result(self, *args, **kwargs) -> None:
        """BEFORE process_batch_result_prefill: the next interval held a prefill."""
        self.prefill_since = True

    def after_spec_result(self, result_tokens: Any, processor: Any, *args, **kwargs) -> None:
        """AFTER _resolve_spec_v2_tokens: one sample per decode batch."""
        self.sample(kwargs["result"] if "result" in kwargs else args[0], kwargs["batch"] if "batch" in kwargs else args[1])

    def sample(self, result: Any, batch: Any) -> None:
        """One decode batch's sample (a speculative batch's, or a plain off batch's: plainoff.py)."""
        t0 = time.perf_counter_ns()
        try:
            self.emit(result, batch)
        except Exception as e:                      # never raise into the scheduler
            self.failures.record("telemetry", e)
        self.calls += 1
        self.ns += time.perf_counter_ns() - t0

    def announce(self) -> None:
        """The off path or the counters changed outside a batch (a run-time switch, handled between batches):
        send the stats at the next idle pass, or `specctl status` shows the old state until STATS_EVERY
        more samples have gone out, which on an idle engine is never."""
        self.stats_due = True

    def flush(self, *args, **kwargs) -> None:
        """BEFORE Scheduler.on_idle (every idle loop pass: one list check when nothing waits). SGLang calls it only
        with no batch running or in flight, so the next result's interval held an idle period, not a step: it only
        restarts the clock (the H200, 12-03: a 4.9 s interval at batch 1, rewarded as a speculative step, made
        speculation look 90 % worse there and settled every larger batch size as a loss without a trial)."""
        self.last_result = None
        if self.pending or (self.stats_due and self._socket()):
            try:
                self._send_pending()
            except Exception as e:                  # never raise into the scheduler (pending is cleared)
                self.failures.record("telemetry flush", e)

    # --- the work ------------------------------------------------------------------------------
    def emit(self, result: Any, batch: Any) -> None:
        if not self._socket():
            return
        now = time.perf_counter()
        bs = len(batch.reqs)
        draft_tokens = getattr(result, "speculative_num_draft_tokens", None)
        steps = int(draft_tokens) - 1 if draft_tokens else 0
        tokens = int(getattr(result, "num_correct_drafts", 0)) + bs
        last, self.last_result = self.last_result, now
        decode_only, self.prefill_since = not self.prefill_since, False
        if last is None or bs == 0:
            return
        step_s = now - last
        if not self.pending:
            self.pending_since = now
        self.pending.append(pack_sample(time.time(), bs, steps, tokens, step_s, decode_only and step_s < MAX_STEP_S))
        if len(self.pending) >= BATCH or now - self.pending_since >= self.flush_s:
            self._send_pending()

    def _send_pending(self) -> None:
        pending, n = self.pending, len(self.pending)
        if n:
            try:
                self.sock.send(b"".join(pending), self.send_flags)
            except self.again:               # the daemon is not draining: drop and count
                self.dropped += n
                return
            except Exception:                # a broken socket: counted, and nothing piles up behind it
                self.dropped += n
                raise
            finally:
                pending.clear()
            self.sent += n
        if self.stats_due or self.sent // STATS_EVERY != (self.sent - n) // STATS_EVERY:
            try:
                self.sock.send(self.stats_message(), self.send_flags)
                self.stats_due = False
            except self.again:
                pass                         # the next ones carry the same counters

    def stats_message(self) -> bytes:
        counters, off_path = self.stats()
        return encode_stats({**counters, "sent": self.sent, "dropped": self.dropped,
                             "telemetry_calls": self.calls, "telemetry_ns": self.ns}, **off_path)
