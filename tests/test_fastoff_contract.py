"""The fast off path's SGLang internals (controller/plugin/internals.py) against every released
wheel: each version's table, entry by entry; versions without a table keep steps-0 for the reason
the status names; and a table's names are really version-specific (a neighbour's table fails)."""
import ast

import pytest

from controller.contract import OFF_REASONS, parse_version
from controller.plugin import internals
from tests.sglang_wheels import VERSIONS, name_problems, params, source

FAST = [v for v in VERSIONS if internals.for_version(parse_version(v))]
SLOW = [v for v in VERSIONS if not internals.for_version(parse_version(v))]


def table_of(version: str) -> internals.FastOffInternals:
    return internals.for_version(parse_version(version))


def problems(version: str, table: internals.FastOffInternals) -> list[str]:
    """Every entry of `table` that the wheel of `version` does not bear out."""
    return name_problems(source(version), {**table.callables, internals.HIDDEN_MODE: table.hidden_mode_params},
                         table.attributes, table.module_names, internals.quoted_facts(table),
                         exact=(internals.HIDDEN_MODE,))


@pytest.mark.parametrize("version", FAST)
def test_every_entry_of_the_versions_table_holds_in_its_wheel(version):
    assert problems(version, table_of(version)) == [], version


@pytest.mark.parametrize("version", FAST)
def test_a_neighbours_table_does_not_hold(version):
    """The entries are version-specific: the table of the adjacent range fails on this wheel."""
    tables = internals.TABLES
    own = tables.index(table_of(version))
    neighbour = tables[own + 1] if own + 1 < len(tables) else tables[own - 1]
    assert problems(version, neighbour), f"{version}: the {neighbour.versions} table holds too"


@pytest.mark.parametrize("version", SLOW)
def test_versions_without_a_table_lack_what_the_status_says(version):
    """0.5.14 ... 0.5.16 keep steps-0, for the reason the status names (contract.OFF_REASONS)."""
    src, parsed = source(version), parse_version(version)
    reason = OFF_REASONS[internals.no_table_reason(parsed)]
    worker = params(src.function("sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation"))
    if parsed < (0, 5, 16):
        assert "capture_hidden_mode" not in worker and "takes no capture_hidden_mode" in reason, version
        return
    # 0.5.16 takes the mode, but sizes the graphs' hidden-state capture its own way (re-captures at replay)
    assert "capture_hidden_mode" in worker and "get_server_return_hidden_states_mode" in reason
    assert "get_server_return_hidden_states_mode" not in src.module_names("sglang.srt.model_executor.forward_batch_info")
    replay = src.text(f"{internals.DECODE_RUNNER}.recapture_if_needed")
    assert "capture_hidden_mode_required_for_returning_hidden_states" in replay, version


def test_the_tables_cover_every_release_from_the_first_fast_one():
    from tests.sglang_wheels import RELEASES
    for version in RELEASES:
        parsed = parse_version(version)
        assert (internals.for_version(parsed) is not None) == (parsed >= internals.FIRST_FAST), version
    ranges = [tuple(map(internals._parse, t.versions)) for t in internals.TABLES]
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:])), "tables overlap or are out of order"


@pytest.mark.parametrize("version", FAST)
def test_steps_0_result_fields_the_fast_path_fills(version):
    """The steps-0-shaped result: GenerationBatchResult's fields; EagleDraftInput's bonus tokens."""
    src = source(version)
    fields = {n.target.id for n in src.node("sglang.srt.managers.utils.GenerationBatchResult").body
              if isinstance(n, ast.AnnAssign)}
    assert {"logits_output", "next_token_ids", "can_run_cuda_graph", "speculative_num_draft_tokens",
            "next_draft_input", "accept_lens", "new_seq_lens", "extra_keep_alive_refs"} <= fields, version
    draft = {n.target.id for n in src.node("sglang.srt.speculative.eagle_info.EagleDraftInput").body
             if isinstance(n, ast.AnnAssign)}
    assert {"bonus_tokens", "topk_p", "topk_index", "hidden_states", "num_tokens_per_req",
            "num_tokens_for_logprob_per_req"} <= draft, version


@pytest.mark.parametrize("version", [v for v in VERSIONS if parse_version(v) >= (0, 5, 20)])
def test_sglangs_adaptive_policy_is_still_chosen_inside_the_worker(version):
    """Why the plugin keeps its AROUND hook on activate_step_by_batch (docs/sglang.md): SGLang's
    AdaptiveSpecPolicy protocol exists from 0.5.20, but EAGLEWorkerV2.__init__ hard-codes its policy."""
    src = source(version)
    protocol = src.node("sglang.srt.speculative.adaptive_runtime_state.AdaptiveSpecPolicy")
    assert {n.name for n in protocol.body if isinstance(n, ast.FunctionDef)} == {
        "candidate_steps", "set_cuda_graph_bs", "get_steps_for_batch", "on_verify_complete", "cuda_graph_bs_for_step"}
    init = src.text("sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2.__init__")
    assert "AdaptiveController(self, AdaptiveSpeculativeParams(" in init, version


@pytest.mark.parametrize("version", FAST)
def test_the_steps_0_logprob_function_computes_what_the_cpu_tests_port(version):
    """tests/test_fastoff_cpu.py's steps0_logprobs: log_softmax of the gathered logits (divided by the
    temperatures unless all greedy), clamped, one (bs, accept) row per request, top / token-id rows expanded."""
    text = source(version).text(table_of(version).spec_logprobs)
    for quote in ("if batch.sampling_info.is_all_greedy or envs.SGLANG_RETURN_ORIGINAL_LOGPROB.get():",
                  "gathered_logprobs = torch.nn.functional.log_softmax(gathered_logits, dim=-1)",
                  "gathered_logprobs = torch.nn.functional.log_softmax(gathered_logits / temperatures, dim=-1)",
                  "gathered_logprobs.clamp_(min=torch.finfo(gathered_logprobs.dtype).min)",
                  "flat_accept_idx = accept_index.long().reshape(-1)",
                  "top_logprobs_nums_expanded = [num for num in batch.top_logprobs_nums for _ in range(max_accept)]",
                  "token_ids_logprobs_expanded = [ids for ids in batch.token_ids_logprobs for _ in range(max_accept)]"):
        assert quote in text, (version, quote)
    assert ".reshape(bs, max_accept)" in text or ".view(bs, max_accept)" in text, version
