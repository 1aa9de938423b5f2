"""Sampling penalties on the fast off path: applied once per token, counted once per token, as in an
engine without speculation (docs/sglang.md, "The off path").

Against every wheel with a fast-path table (parsed, never imported), the SGLang facts that make it so:
the penalties reach the logits only through SamplingBatchInfo.apply_logits_bias, called only from
ModelRunner._preprocess_logits (ModelRunner.sample, once per sampled forward); the forward gets the
scheduler's forward-only copy of sampling_info (Scheduler._forward_isolation: copy_for_forward folds the
penalizers into acc_* once and drops the orchestrator), so apply_logits_bias adds them once; spec-v2 applies
them itself only in the verify (eagle_sample), which an off batch on the fast path never runs; and the
output tokens are counted into the penalizers only when a decode batch is prepared, once per step
(ScheduleBatch.prepare_for_decode, or eagle_prepare_for_decode for spec-v2), never in result processing.
On CPU: fastoff.run hands the plain decode the batch's own sampling_info, untouched, and nothing else
applies a penalty."""
from __future__ import annotations

import ast
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from controller.contract import parse_version
from controller.plugin import fastoff, internals
from tests.sglang_wheels import VERSIONS, source
from tests.test_fastoff_cpu import V17, V23, decode_batch, engine, fake_torch, tensor  # noqa: F401 (fixture)

FAST = [v for v in VERSIONS if internals.for_version(parse_version(v))]
APPLY = {"apply_logits_bias", "apply_logits_bias_with_observer"}     # the observer variant from 0.5.19
ONLY_CALLERS = {   # every call in sglang/srt of these names (module:qualified function)
    "apply_logits_bias": {"model_executor/model_runner:ModelRunner._preprocess_logits",
              "speculative/dflash_utils:apply_dflash_verify_logits_adjustments"},   # DFlash's verify, not EAGLE's
    "cumulate_penalty_output_tokens": {"managers/schedule_batch:ScheduleBatch.prepare_for_decode",
                                       "speculative/eagle_utils:eagle_prepare_for_decode"},
    "copy_for_forward": {"managers/scheduler:Scheduler._forward_isolation"},
    "update_penalties": {"sampling/sampling_batch_info:SamplingBatchInfo.copy_for_forward"},
}


def callers(version: str) -> dict[str, set[str]]:
    """For each name of ONLY_CALLERS, the functions of the wheel's sglang/srt that call it."""
    src, out = source(version), {key: set() for key in ONLY_CALLERS}
    for name in sorted(src.names):
        if not (name.startswith("sglang/srt/") and name.endswith(".py")):
            continue
        text = src.zip.read(name)
        if not any(key.encode() in text for key in (*APPLY, *ONLY_CALLERS)):     # most modules: no parse
            continue
        module = name[len("sglang/srt/"):-3]

        def visit(node: ast.AST, where: list[str]) -> None:
            for child in ast.iter_child_nodes(node):
                inner = where + [child.name] if isinstance(child, (ast.ClassDef, ast.FunctionDef,
                                                                   ast.AsyncFunctionDef)) else where
                if isinstance(child, ast.Call):
                    f = child.func
                    called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                    key = "apply_logits_bias" if called in APPLY else called
                    if key in out:
                        out[key].add(f"{module}:{'.'.join(inner)}")
                visit(child, inner)
        with warnings.catch_warnings():          # SGLang's own sources: invalid escapes in some strings
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            tree = ast.parse(text)
        visit(tree, [])
    return out


@pytest.mark.parametrize("version", FAST)
def test_penalties_reach_the_logits_and_the_counts_only_where_the_docs_say(version):
    assert callers(version) == ONLY_CALLERS, version


@pytest.mark.parametrize("version", FAST)
def test_one_application_per_sampled_forward_and_one_count_per_decode_step(version):
    src = source(version)
    sample = src.text("sglang.srt.model_executor.model_runner.ModelRunner.sample")
    assert 1 <= sample.count("self._preprocess_logits(") <= 2, version     # 0.5.19+: if observer ... else ...
    if sample.count("self._preprocess_logits(") == 2:
        assert "if observer is not None and observer.is_active(" in sample, version
    # the forward's copy: the penalizers folded into acc_* once, no orchestrator left to apply them again
    assert src.text("sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo.copy_for_forward").endswith(
        "self.update_penalties()\n    return dataclasses.replace(self, penalizer_orchestrator=None)"), version
    isolation = src.text("sglang.srt.managers.scheduler.Scheduler._forward_isolation")
    assert "batch.sampling_info = sched_sampling_info.copy_for_forward()" in isolation, version
    assert isolated_worker_calls(src) >= 2, version           # spec-v2's overlap and non-overlap launches
    # the target's plain forward samples (the verify's does not); spec engines never delay the sample
    worker = src.text("sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation")
    assert "if is_verify:\n            return batch_result\n        if self.enable_overlap and (not self.enable_spec)" \
        in worker, version
    # one count per decode step: spec batches return before the no-spec count, and count in eagle's prepare
    prepare = src.text("sglang.srt.managers.schedule_batch.ScheduleBatch.prepare_for_decode")
    spec, plain = prepare.index("spec_prepare_for_decode(self)\n        return"), \
        prepare.index("if self.sampling_info.penalizer_orchestrator.is_required:\n        self.cumulate_penalty_output_tokens()")
    assert spec < plain, version
    assert "eagle_prepare_for_decode(batch)" in src.text("sglang.srt.speculative.spec_utils.spec_prepare_for_decode")
    assert "if batch.sampling_info.penalizer_orchestrator.is_required:\n        batch.cumulate_penalty_output_tokens()" \
        in src.text("sglang.srt.speculative.eagle_utils.eagle_prepare_for_decode"), version


def isolated_worker_calls(src) -> int:
    """Calls of self.model_worker.forward_batch_generation inside `with self._forward_isolation(...)` in run_batch."""
    count = 0
    for node in ast.walk(src.function("sglang.srt.managers.scheduler.Scheduler.run_batch")):
        if isinstance(node, ast.With) and any("_forward_isolation" in ast.unparse(i.context_expr) for i in node.items):
            count += sum(isinstance(n, ast.Call) and ast.unparse(n.func) == "self.model_worker.forward_batch_generation"
                         for n in ast.walk(node))
    return count


# --- on CPU: the plain decode sees the forward's sampling_info as the scheduler made it -----------------
class SamplingInfo:
    """SGLang's forward-only SamplingBatchInfo as far as penalties go (0.5.17 apply_logits_bias; 0.5.23 the
    same steps, split in two): acc_additive_penalties added, acc_scaling_penalties applied as
    apply_scaling_penalties does, the orchestrator (None in the copy) and the logit bias."""
    def __init__(self, additive, scaling, logit_bias, orchestrator=None):
        self.acc_additive_penalties, self.acc_scaling_penalties = additive, scaling
        self.logit_bias, self.penalizer_orchestrator = logit_bias, orchestrator
        self.is_all_greedy, self.applied = True, 0

    def apply_logits_bias(self, logits):
        self.applied += 1
        if self.acc_additive_penalties is not None:
            logits += self.acc_additive_penalties
        if self.acc_scaling_penalties is not None:
            logits[:] = np.where(logits < 0, logits * self.acc_scaling_penalties, logits / self.acc_scaling_penalties)
        if self.penalizer_orchestrator and self.penalizer_orchestrator.is_required:
            self.penalizer_orchestrator.apply(logits)
        if self.logit_bias is not None:
            logits += self.logit_bias


BASE = np.array([[4.0, -2.0, 1.0, 0.5], [1.0, 3.0, -1.0, 2.5]])
ADD = np.array([[-1.0, 0.0, -0.5, 0.0], [0.0, -2.0, 0.0, 0.0]])       # frequency / presence / min_new_tokens
SCALE = np.array([[1.2, 1.0, 1.0, 1.0], [1.0, 1.2, 1.0, 1.0]])        # repetition
BIAS = np.array([[0.0, 0.0, 0.0, 3.0], [0.0, 0.0, 0.0, 0.0]])


def once(logits: np.ndarray) -> np.ndarray:
    x = logits + ADD
    x = np.where(x < 0, x * SCALE, x / SCALE)
    return x + BIAS


@pytest.mark.parametrize("names", [V17, V23], ids=lambda t: t.versions[0])
def test_the_fast_path_samples_from_logits_penalized_once(fake_torch, names):  # noqa: F811
    """The plain decode (tp_worker -> ModelRunner.sample -> _preprocess_logits) is the only place the
    penalties are applied: once, with the batch's own sampling_info; the verify never runs; the
    sampling_info is the batch's after the step (the scheduler's restore puts its own back)."""
    w, runner, _, seen = engine(names, publish=True)
    info = SamplingInfo(tensor(ADD), tensor(SCALE), tensor(BIAS))

    def forward(batch, capture_hidden_mode):
        logits = tensor(BASE.copy())
        seen["info"] = batch.sampling_info
        batch.sampling_info.apply_logits_bias(logits)          # ModelRunner._preprocess_logits
        seen["logits"] = logits
        return SimpleNamespace(next_token_ids=tensor(logits.argmax(axis=1)),
                               logits_output=SimpleNamespace(next_token_logits=logits), can_run_cuda_graph=True)
    w.target_worker.forward_batch_generation = forward
    w.verify = lambda *a, **kw: pytest.fail("the verify (eagle_sample) applies penalties: never on the fast path")
    batch = decode_batch(2, seq_lens=tensor([3, 5]), seq_lens_cpu=None, seq_lens_sum=None, sampling_info=info,
                         req_pool_indices=tensor([1, 2]), spec_info=SimpleNamespace(bonus_tokens=tensor([4, 6])))
    result = fastoff.run(w, fastoff.FastOff("decode backend", "decode graphs", names=names), batch, on_publish=None)
    assert seen["info"] is info and batch.sampling_info is info and info.applied == 1
    assert np.allclose(seen["logits"], once(BASE))
    assert list(result.next_token_ids) == list(once(BASE).argmax(axis=1)) == [3, 3]   # BASE alone: [0, 1]
    assert info.acc_additive_penalties is not None and info.penalizer_orchestrator is None   # untouched
