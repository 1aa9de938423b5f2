"""Grammar batches on the fast off path (controller/plugin/offgrammar.py) against every wheel with a fast
table: each table opts in with SGLang's delayed grammar sample and grammar barrier (its quoted facts are
checked by tests/test_fastoff_contract.py with the rest of the table); here, what those facts alone do not
say: that telling the target worker it does not speculate changes nothing but that delay, that the CPU
tests' stand-in masks as SGLang does, and the orderings the equivalence rests on (the no-spec engine
samples after the previous result was processed; steps-0's verify builds its mask after the barrier,
after the target forward was launched)."""
import ast

import pytest

from controller.contract import parse_version
from controller.plugin import internals, offgrammar
from controller.plugin.sglang_names import EAGLE_V2, GRAMMAR_FACTS, SCHEDULER, TP_WORKER
from tests.sglang_wheels import VERSIONS, source

FAST = [v for v in VERSIONS if internals.for_version(parse_version(v))]


def test_every_table_serves_grammar_with_the_seams_facts_and_attributes():
    for table in internals.TABLES:
        assert table.grammar, table.versions
        assert set(GRAMMAR_FACTS) <= set(table.facts), table.versions
        assert table.attributes[TP_WORKER] == offgrammar.ATTRIBUTES, table.versions


@pytest.mark.parametrize("version", FAST)
def test_enable_spec_is_read_only_by_the_delayed_sample_condition(version):
    """The plain decode's worker is told it does not speculate for a grammar batch: nothing but the delay of
    its sample may change with that (every use of an attribute or name `enable_spec` in the wheel)."""
    src, uses = source(version), []
    for name in sorted(n for n in src.names if n.endswith(".py")):
        data = src.zip.read(name)
        if b"enable_spec" not in data:
            continue
        for node in ast.walk(ast.parse(data)):
            if isinstance(node, ast.Attribute) and node.attr == "enable_spec":
                uses.append((name, type(node.ctx).__name__, node.lineno))
            elif isinstance(node, ast.Constant) and node.value == "enable_spec":
                uses.append((name, "string", node.lineno))
    worker = source(version).function(f"{TP_WORKER}.forward_batch_generation")
    init = source(version).function(f"{TP_WORKER}.__init__")
    within = lambda fn, line: fn.lineno <= line <= fn.end_lineno
    assert [u[:2] for u in uses] == [("sglang/srt/managers/tp_worker.py", "Store"),
                                     ("sglang/srt/managers/tp_worker.py", "Load")], (version, uses)
    assert within(init, uses[0][2]) and within(worker, uses[1][2]), (version, uses)
    init_text = source(version).text(f"{TP_WORKER}.__init__")
    assert any(f"self.enable_spec = {owner}.speculative_algorithm is not None" in init_text
               for owner in ("server_args", "get_spec()")), version          # get_spec(): 0.5.19+


@pytest.mark.parametrize("version", FAST)
def test_the_cpu_tests_stand_in_masks_as_sglang_does(version):
    """tests/test_offgrammar_cpu.py's Target: rows of finished, terminated or grammar-less requests stay
    unconstrained; the mask is applied to the logits in place before the sampler is called."""
    src = source(version)
    update = src.text("sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo.update_regex_vocab_mask")
    assert "if grammar and (not grammar.finished) and (not grammar.is_terminated())" in update, version
    bias = src.text("sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo.apply_logits_bias")
    assert "if self.grammar_mask is not None:" in bias and "self.grammar_mask.apply(logits)" in bias, version
    sample = src.text(f"{internals.RUNNER}.sample")
    assert sample.index("self._preprocess_logits(") < sample.index("self.sampler("), version


@pytest.mark.parametrize("version", FAST)
def test_without_speculation_a_grammar_batch_samples_after_the_previous_result_was_processed(version):
    """The reference the fast path reproduces: the overlap loop launches the batch, processes the previous
    batch's result (its tokens enter the FSMs), then runs the delayed sample."""
    loop = source(version).text(f"{SCHEDULER}.event_loop_overlap")
    launch = loop.index("batch_result = self.run_batch(batch)")
    processed = loop.rindex("pop_and_process()")
    sample = loop.index("self.launch_batch_sample_if_needed(batch_result, batch)")
    assert launch < processed < sample, version


@pytest.mark.parametrize("version", FAST)
def test_steps_0_builds_its_mask_after_the_barrier_and_the_target_forward(version):
    """The grammar barrier reaches steps-0's verify and is called before its bitmask, after the target
    verify forward was launched: the fast path calls it at the same point of its own decode."""
    src = source(version)
    verify = src.text(internals.VERIFY)
    assert "barrier=grammar_barrier" in verify, version
    assert verify.index("target_worker.forward_batch_generation(") < verify.index("build_grammar_vocab_mask("), version
    build = src.text("sglang.srt.speculative.spec_utils.build_grammar_vocab_mask")
    assert build.index("barrier()") < build.index("generate_token_bitmask("), version
    worker = src.text(f"{EAGLE_V2}.EAGLEWorkerV2")       # forward_batch_generation (or its decode helper)
    assert "self.verify(batch, grammar_barrier=grammar_barrier)" in worker, version
    assert "grammar_barrier=grammar_barrier" in src.text(f"{EAGLE_V2}.EAGLEWorkerV2.verify"), version
