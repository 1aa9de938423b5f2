"""The kv off path's draft-KV writes (draftkv.DraftKVWriter.write) replayed from CUDA graphs, one per batch size
of the fast path's decode graphs and per PROMPT_SIZES above them. The default since 2026-12-02e: captured at start
unless the engine starts with SPEC_CONTROLLER_DRAFT_KV_GRAPH=0 (TP 1 with decode CUDA graphs; otherwise the writes
run eagerly), used while `spec_controller_draft_kv_graph` is on. On the H200 the decode writes' launch CPU fell
from ~316 to ~53 us per off batch (bench/results/h200-2026-12-02d), closed 48 read 0.989 of no-spec pooled against
0.933 eager in one rotation, and the proposals after off -> on match always-on's exactly, prompt writes included
(bench/results/h200-2026-12-02e).

Runs inside SGLang's scheduler process, on every off batch: keep it lean. Why: the eager write is ~15 kernel
launches (embedding, norms, fc, qkv + RoPE, the KV store) costing ~0.3-0.4 ms of launch CPU per off batch on
an H200 (bench/results/h200-2026-12-01e section 2); a replay is one launch plus four copies into the static
inputs. Rows past the batch (the graph's size is the next captured one up) write to SGLang's padding slot 0,
as its own graphs' padded tokens do; a batch larger than every graph (a prompt above 2048 tokens) replays the
largest in chunks (each row's k, v depends on that row alone): written eagerly, such a write (the 8,192-token chunks
of a burst of arrivals) cost 55-117 ms of CPU each on the H200 (12-02f, 12-03e; its large temporaries are the guess:
the graphs' own pool needs none); hidden states of another width are written eagerly. A prompt that fits a graph goes
straight into the static inputs (write_prompt: its positions and tail rows in one host copy, the shifted tokens in
place), five kernels inside the prefill's CPU-bound launch where the generic write took seven and a temporary
(not yet run on a GPU).

While `spec_controller_draft_kv_side` is on (the default since 2026-12-03i; SPEC_CONTROLLER_DRAFT_KV_SIDE=0 at start:
in line) a replay runs on a stream of its own (SideStream), beside the next target forward instead of after this one:
the write is a dozen small, mostly latency-bound kernels (~0.07 ms of each decode step at batch 16 in line, 12-03h)
whose only reader is a later speculative step. The forward stream waits for it before anything else touches the
draft's pool (OffPath._flush_kv) and before the next write refills the static inputs (here). Not where the
hierarchical cache, the external cache linker or disaggregation use the draft's pool outside those waits (side_why).
On the H200 the off decode step lost 0.02-0.06 ms at batch 16 / 48 / 128 against in line, and proposals after off -> on
still match always-on's exactly in the batch-1 look-back check (bench/results/h200-2026-12-03i).

The rows of DEFAULT_COALESCE writes share one replay (the default since 2026-12-04b; SPEC_CONTROLLER_DRAFT_KV_COALESCE=N
at start, 1: each write its own; run-time switch `spec_controller_draft_kv_coalesce`), up to COALESCE_ROWS rows (since
2026-12-08): on the H200 the off decode step at batch 16 lost the write's 0.04 ms (span per step within 2 us of the
engine without writes), the coalesced engine beat per-batch replays in 6 of 6 steady 1 / 16 rotations, and the
look-back check still matches 480 / 480 (bench/results/h200-2026-12-04b); at batch 128 it gained nothing (12-08).
"""
from __future__ import annotations

import bisect
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from . import draftkv_coalesce
from .draftkv import PAD_SLOT, fc_weight, prompt_rows
from .hostrows import HostRows

log = logging.getLogger("spec_controller.plugin")

# The SGLang names this module relies on (tests/test_draftkv_graph.py checks every wheel 0.5.17 ... 0.5.23).
ATTRIBUTES = {"sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner": ("capture_bs",)}
FACTS = (("sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner.EAGLEDraftExtendCudaGraphRunner.execute",
          ".out_cache_loc.zero_()", "SGLang's own draft-extend graphs point padded rows at slot 0"),
         ("sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner.__init__",
          "self.capture_bs, self.compile_bs = get_batch_sizes_to_capture(", "the sizes its graphs hold"))


# Prompt writes (draftkv.write_prefill, n = the extend's tokens, ~100-2000 under chat traffic) replay too where n
# fits: decode sizes stop at the largest batch, so graphs of these token counts are captured above it (padding
# rows past n cost a few GEMM rows; larger extends, e.g. whole chunks, replay the largest chunk by chunk).
PROMPT_SIZES = (256, 512, 1024, 2048)
DEFAULT_COALESCE = 8     # writes per replay unless the engine is started otherwise (12-04b)
# ... and rows per replay: a write that would take the buffered rows past it replays them. Coalescing pays where the
# write is bound by reading the draft's weights (batch 16: 8 writes, 128 rows a replay, 12-04b); at closed 128 one
# replay per write read 1.008 [0.997-1.020] of the 8-write replays (1,024 rows, a dedupe) over 16 pairs on the H100
# (bench/results/h100-2026-12-08), so above this many rows each write replays alone.
COALESCE_ROWS = 128


def sizes_to_capture(decode_sizes: Sequence[int]) -> tuple[int, ...]:
    """The decode graphs' batch sizes plus the prompt sizes above the largest of them, ascending."""
    top = max(decode_sizes)
    return tuple(sorted({int(s) for s in decode_sizes} | {s for s in PROMPT_SIZES if s > top}))


def graph_size(sizes: Sequence[int], n: int) -> int | None:
    """The smallest captured batch size that holds n rows (sizes ascending), or None."""
    i = bisect.bisect_left(sizes, n)
    return sizes[i] if i < len(sizes) else None


@dataclass
class SideStream:
    """The writes' own CUDA stream and the two events that order it against the forward stream. From the
    high-priority pool, which SGLang 0.5.17 does not draw from: a graph captured on it holds that stream's cuBLAS
    workspace, so a replay beside SGLang's graphs (captured on default-pool streams) shares no workspace."""
    cuda: Any                   # torch.cuda (a stand-in on CPU)
    stream: Any
    ready: Any                  # recorded on the forward stream once the static inputs are filled
    done: Any                   # recorded on the side stream after the replay
    pending: bool = False       # a replay the forward stream has not waited for yet
    # the streams' device index: torch.cuda.current_stream(None) and torch.cuda.stream(...) look the current device up
    # through its NVML availability checks (~50 us a call under cProfile in 12-04i's prefills); with the index, not
    device: int | None = None

    @classmethod
    def create(cls, cuda: Any) -> "SideStream":
        stream = cuda.Stream(priority=-1)
        return cls(cuda, stream, cuda.Event(), cuda.Event(), device=getattr(stream, "device_index", None))

    def wait(self) -> None:
        """The current (forward) stream waits for the last replay: a no-op on the GPU once it has run."""
        if self.pending:
            self.cuda.current_stream(self.device).wait_event(self.done)
            self.pending = False

    def replay(self, graph: Any, before: Callable[[], Any] | None = None) -> None:
        """graph (after `before`, on the side stream too) once the current stream's work so far is done; the current
        stream is the forward one again afterwards, whatever happened."""
        forward = self.cuda.current_stream(self.device)
        self.ready.record(forward)
        self.stream.wait_event(self.ready)
        self.pending = True         # before the launch: a failure after it still leaves it waited for
        self.cuda.set_stream(self.stream)
        try:
            if before is not None:
                before()
            graph.replay()
        finally:
            self.cuda.set_stream(forward)
            # failure or not: wait() then covers what was issued here (a dedupe's copy into `loc` before a failed
            # launch), not an older replay's event, or none
            self.done.record(self.stream)


@dataclass
class GraphedKVWriter:
    """Same write() as DraftKVWriter; the static inputs are the graphs' (rows 0 .. max size). With `batches` > 1
    (DEFAULT_COALESCE, or SPEC_CONTROLLER_DRAFT_KV_COALESCE=N) the rows of up to N writes gather in the static inputs
    and one replay writes them all: the draft's weights (~133 MB at a 4096-wide EAGLE3 head) are read once per N off batches
    instead of every batch, the share of the write a side stream cannot hide where the target's decode step is itself
    bound by reading weights (bench/results/h200-2026-12-04: the side stream's write took 0.04 ms of a batch-16 step).
    Buffered rows are replayed before anything else touches the draft's pool (wait()); a slot buffered twice keeps
    its later row (dedupe: a finished request's slot reused within the window)."""
    eager: Any                  # the DraftKVWriter (its write() is what each graph holds)
    sizes: tuple[int, ...]      # ascending
    aux: Any                    # [max, aux width] the target's aux hidden states
    tokens: Any                 # [max] int64: the token after each position
    positions: Any              # [2 x max] int64 (graphs read [:size]; write_prompt stages a prompt's tail rows past its own)
    loc: Any                    # [max] int64: KV slots
    graphs: dict[int, Any] = field(default_factory=dict)
    replays: int = 0                    # writes held by the graphs (batches and prompt chunks)
    side_replays: int = 0               # of replays: launched on the side stream
    launches: int = 0                   # graph replays (fewer than replays while coalescing)
    side: SideStream | None = None      # where replays run while `overlap` is on
    overlap: bool = False               # run-time switch (spec_controller_draft_kv_side)
    side_why: str | None = None         # why replays stay in line in this engine (draftkv_coalesce.unsupported_reason)
    coalesce_batches: int = 1           # writes one replay may hold, as started (1: each write its own replay)
    batches: int = 1                    # ... in use (run-time switch spec_controller_draft_kv_coalesce)
    rows: int = 0                       # rows buffered in the static inputs, not replayed yet
    held: int = 0                       # writes among them
    dedupe: Callable[[Any], Any] = draftkv_coalesce.last_write_wins
    host_rows: HostRows | None = None   # prompts' rows on the host (made at the first prompt)
    direct_prompts: int = 0             # prompts written by write_prompt (the rest of the prompts: write())
    write_ns: int = 0                   # CPU in write() / write_prompt() (static-input copies, a prompt's host copy
                                        # since 12-04j, replays): a prompt's share, for status

    def use_side(self, on: bool) -> None:
        """Replays beside the next forward (on), unless this engine has outside readers of the draft's pool."""
        self.overlap = on and self.side is not None and self.side_why is None

    def use_coalesce(self, on: bool) -> None:
        """Writes gathered per replay (on: coalesce_batches) or each its own; buffered rows go with the next replay."""
        self.batches = self.coalesce_batches if on else 1

    def wait(self) -> None:
        """Before anything on the current stream reads or writes the draft's pool: every write so far is in (the
        buffered rows replayed, the side stream's replay waited for)."""
        self._launch()
        if self.side is not None:
            self.side.wait()

    def write(self, aux_hidden: Any, next_tokens: Any, positions: Any, loc: Any) -> None:
        t0 = time.perf_counter_ns()
        try:
            self._write(aux_hidden, next_tokens, positions, loc)
        finally:
            self.write_ns += time.perf_counter_ns() - t0

    def _write(self, aux_hidden: Any, next_tokens: Any, positions: Any, loc: Any) -> None:
        n, top = positions.shape[0], self.sizes[-1]
        other_width = aux_hidden.shape[-1] != self.aux.shape[-1]
        if other_width or n > top:
            self.wait()      # the buffered rows first: a slot in both keeps this, the later write
            if other_width:
                return self.eager.write(aux_hidden, next_tokens, positions, loc)
            for s in range(0, n, top):   # more rows than every graph: the largest, chunk by chunk (a row's k, v is its own)
                self._write(aux_hidden[s:s + top], next_tokens[s:s + top], positions[s:s + top], loc[s:s + top])
            return None
        r = self._take(n)
        self.aux[r:r + n].copy_(aux_hidden[:n])
        self.tokens[r:r + n].copy_(next_tokens[:n])
        self.positions[r:r + n].copy_(positions)
        self.loc[r:r + n].copy_(loc)
        self._added(n)
        return None

    def write_prompt(self, aux_hidden: Any, ids: Any, tail: Any, extend_lens: list, prefix_lens: list, loc: Any) -> bool:
        """A prompt's rows (draftkv.stage_prefill's: its n input ids, each request's tail token, the batch's lengths)
        straight into the static inputs: its positions and each request's last row (draftkv.prompt_rows) are written
        into a pinned buffer (HostRows) and cross in one copy into `positions` (the last rows past the prompt's own,
        where only padding rows read), the tokens are the ids shifted by one with the tail tokens put at each
        request's last row. Five kernels instead of the generic write's seven, no temporaries, no pinned copy per
        prompt (12-04i: the prompt write's ~0.4-0.8 ms of CPU sits in each prefill's CPU-bound launch). False,
        nothing done, where the generic write must take it (another width, more rows than a graph or than
        `positions` holds past them)."""
        n, top, requests = ids.shape[0], self.sizes[-1], len(extend_lens)
        if aux_hidden.shape[-1] != self.aux.shape[-1] or n > top or top + requests > self.positions.shape[0]:
            return False
        t0 = time.perf_counter_ns()
        try:
            r = self._take(n)
            if self.host_rows is None:
                self.host_rows = HostRows.make(self.positions.shape[0], self.positions.device)
            staged = self.host_rows.take()[:n + requests]
            prompt_rows(extend_lens, prefix_lens, out=staged.numpy(), offset=r)
            # (padding rows past r + n may then read row indices < 2 x max as positions: RoPE on slot 0 only)
            self.positions[r:r + n + requests].copy_(staged, non_blocking=True)
            self.host_rows.copied()
            self.aux[r:r + n].copy_(aux_hidden[:n])
            self.loc[r:r + n].copy_(loc)
            self.tokens[r:r + n - 1].copy_(ids[1:])
            self.tokens.index_put_((self.positions[r + n:r + n + requests],), tail.to(self.tokens.dtype))
            self._added(n)
            self.direct_prompts += 1
            if self.direct_prompts == 1:     # the engine's log says it engaged (run_consistency has no daemon status)
                log.info("spec-controller: prompts' draft-KV rows written straight into the graphs' inputs")
        finally:
            self.write_ns += time.perf_counter_ns() - t0
        return True

    def _take(self, n: int) -> int:
        """The row n more rows start at in the static inputs: the buffered ones replayed first where they would not
        fit beside them or would take the replay past COALESCE_ROWS (a larger write than the last: _added foresaw one
        of the same size), and the last replay done reading before the inputs are refilled."""
        if self.rows + n > min(self.sizes[-1], COALESCE_ROWS):     # (none held: _launch does nothing)
            self._launch()
        if self.rows == 0 and self.side is not None:
            self.side.wait()
        return self.rows

    def _added(self, n: int) -> None:
        """n rows of one write are in: replayed once the writes per replay are reached, the largest graph is full, or
        another write of this size would take the replay past COALESCE_ROWS (a batch of 128: each write alone)."""
        self.rows, self.held = self.rows + n, self.held + 1
        self.replays += 1
        if self.held >= self.batches or self.rows == self.sizes[-1] or self.rows + n > COALESCE_ROWS:
            self._launch()

    def _launch(self) -> None:
        """Replay the graph that holds the buffered rows (none: nothing), its padding rows at the pad slot."""
        rows, held = self.rows, self.held
        if rows == 0:
            return
        size = graph_size(self.sizes, rows)
        if size > rows:
            self.loc[rows:size].fill_(PAD_SLOT)
        self.rows = self.held = 0         # first: a failed launch is not retried over newer rows
        dedupe = (lambda: self.loc[:rows].copy_(self.dedupe(self.loc[:rows]))) if held > 1 else None
        if self.overlap:                    # (use_side: only with a side stream)
            self.side.replay(self.graphs[size], before=dedupe)
            self.side_replays += held
        else:
            if dedupe is not None:
                dedupe()
            self.graphs[size].replay()
        self.launches += 1


def for_engine(eager: Any, decode_graphs: Any, tp_size: int, worker: Any, enter: Callable[[], Any],
               side: bool, coalesce: int | None = None) -> GraphedKVWriter | None:
    """The engine's graphed writer (captured for the fast path's decode graph sizes), or None without decode graphs
    or at TP > 1 (logged: the writes run eagerly); capture errors propagate. The hierarchical cache, the external
    cache linker and disaggregation touch the draft's pool outside the plugin's waits: there replays stay in line and
    each write is its own replay (coalesce: writes per replay asked for; None: DEFAULT_COALESCE, and no warning)."""
    if decode_graphs is None or tp_size > 1:
        log.info("spec-controller: draft KV graphs need decode CUDA graphs and TP 1; writing eagerly")  # no warning
        return None
    out = capture(eager, sizes_to_capture(decode_graphs.capture_bs), enter)
    out.side_why = draftkv_coalesce.unsupported_reason(getattr(worker, "server_args", None), 1)
    out.use_side(side)
    asked, n = coalesce is not None, DEFAULT_COALESCE if coalesce is None else max(1, coalesce)
    out.coalesce_batches = n if out.side_why is None else 1
    if asked and n > 1 and out.side_why is not None:     # the refused key (validate_own_keys) points at the log
        log.warning("spec-controller: draft KV writes not coalesced (%s): one replay per write", out.side_why)
    out.use_coalesce(True)
    log.info("spec-controller: draft KV writes captured as CUDA graphs for up to %d rows, replayed %s%s", out.sizes[-1],
             "beside the next forward (side stream)" if out.overlap
             else f"in line ({out.side_why or 'SPEC_CONTROLLER_DRAFT_KV_SIDE=0'})",
             f", one replay per {out.batches} writes" if out.batches > 1 else "")
    return out


def capture(eager: Any, sizes: Sequence[int], enter: Callable[[], Any]) -> GraphedKVWriter:
    """One graph per size (every TP rank alike: the same sizes, the same writer), in the draft's TP context
    (`enter()`, as the eager write runs). The aux width is the draft's fc input (EAGLE3: the target's aux
    layers concatenated); a draft without fc gets no graphs (ValueError)."""
    import torch
    weight = fc_weight(eager, "the graphs' hidden-state input")
    sizes = tuple(sorted(set(int(s) for s in sizes)))
    top, device = sizes[-1], weight.device
    i64 = dict(dtype=torch.int64, device=device)
    out = GraphedKVWriter(eager, sizes, torch.zeros((top, weight.shape[1]), dtype=weight.dtype, device=device),
                          torch.zeros(top, **i64), torch.zeros(2 * top, **i64), torch.full((top,), PAD_SLOT, **i64))
    side = SideStream.create(torch.cuda)
    out.side = side
    pool, stream = torch.cuda.graph_pool_handle(), side.stream     # captured where they may replay (its workspace)
    with enter():
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):     # warm-up (lazy inits, workspaces): writes the padding slot only
            eager.write(out.aux, out.tokens, out.positions[:top], out.loc)
        torch.cuda.current_stream().wait_stream(stream)
        for size in reversed(sizes):        # largest first: the smaller ones reuse its pool
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=stream):
                eager.write(out.aux[:size], out.tokens[:size], out.positions[:size], out.loc[:size])
            out.graphs[size] = graph
    torch.cuda.synchronize()
    return out
