"""Dotted SGLang names the fast off path's tables (internals.py) share, and the quoted facts of SGLang's
code that its logprob handling (offlogprob.py) rests on; data only, checked against every wheel by
tests/test_fastoff_contract.py through the tables."""
from __future__ import annotations

EAGLE_V2 = "sglang.srt.speculative.eagle_worker_v2"
RUNNER = "sglang.srt.model_executor.model_runner.ModelRunner"
DECODE_RUNNER = "sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner"
HIDDEN_MODE = "sglang.srt.model_executor.forward_batch_info.get_server_return_hidden_states_mode"
WORKER_FORWARD = f"{EAGLE_V2}.EAGLEWorkerV2.forward_batch_generation"
WAR_BARRIER = "sglang.srt.managers.scheduler.Scheduler._apply_war_barrier"
LOGPROB_PROCESSOR = "sglang.srt.layers.logprob_processor"
SPEC_V2_LOGPROBS = f"{LOGPROB_PROCESSOR}.compute_spec_v2_logprobs"     # 0.5.17
SPEC_LOGPROBS = f"{LOGPROB_PROCESSOR}.compute_spec_logprobs"           # 0.5.18 on
SAMPLING_INFO = "sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo"
VERIFY = "sglang.srt.speculative.eagle_worker_common.run_eagle_verify"
RESULTS = "sglang.srt.managers.scheduler_components.batch_result_processor.SchedulerBatchResultProcessor"

LOGPROB_FACTS = (
    # logprobs (offlogprob.py): the sampler is swapped around the plain decode; it is called positionally
    (f"{RUNNER}.sample", "next_token_ids = self.sampler(logits_output, forward_batch.sampling_info, "
     "forward_batch.return_logprob, forward_batch.top_logprobs_nums, forward_batch.token_ids_logprobs, ",
     "the plain decode's sampler gets (logits_output, sampling_info, return_logprob, ...) positionally"),
    (f"{RUNNER}.sample", "self._preprocess_logits(logits_output",
     "... after the penalties, logit bias and vocab mask are applied to the logits in place"),
    ("sglang.srt.layers.sampler.Sampler.forward", "batch_next_token_ids = torch.argmax(logits, -1)",
     "a greedy batch's logits survive the sampler (argmax)"),
    ("sglang.srt.layers.sampler.Sampler.forward", "logits.div_(sampling_info.temperatures)",
     "a sampled batch's logits do not (divided and softmaxed in place): the fast path keeps a copy"),
    (VERIFY, "if batch.return_logprob and (not batch.forward_mode.is_idle()):",
     "steps-0 computes logprobs after its sampling, from the verify's logits"),
    (f"{EAGLE_V2}.EAGLEWorkerV2._build_trivial_verify_input",
     "retrieve_index = torch.arange(bs, dtype=torch.long, device=device).unsqueeze(1)",
     "steps-0's tree is one node per request: its accept index is (bs, 1), request i's token at row i"),
    (f"{EAGLE_V2}.EAGLEWorkerV2._build_trivial_verify_input", "spec_steps=0", "... and its num_steps 0"),
    (f"{RESULTS}._normalize_decode_outputs", "next_token_logprobs = logits_output.next_token_logprobs.tolist()",
     "the scheduler reads the logprobs as steps-0 writes them, ..."),
    (f"{RESULTS}._apply_decode_logprobs", "accepted_logprobs = next_token_logprobs[i]",
     "... row i: request i's accepted logprobs (a (bs,) layout would hand it a float)"),
    (f"{RESULTS}._apply_decode_logprobs", "flat_idx = i * max_accept + j",
     "... and its top / token-id logprobs at flat index i * accept + j"),
)
V17_LOGPROB_FACTS = (
    (VERIFY, "compute_spec_v2_logprobs(batch, logits_output, predict, accept_index, num_steps)",
     "steps-0's logprobs: this call, on the same logits, tokens and a (bs, 1) accept index"),)
V18_LOGPROB_FACTS = (
    (VERIFY, "compute_spec_logprobs(batch, logits_output, predict, accept_index=accept_index)",
     "steps-0's logprobs: this call, on the same logits, tokens and a (bs, 1) accept index"),)

WATERMARK_FACTS = (
    (f"{RUNNER}.sample", "logprob_logits = logits_output.next_token_logits.clone() if forward_batch.return_logprob else None",
     "with a watermark, logprobs come from the logits before it: such batches keep steps-0 (offlogprob.py)"),
    (f"{RUNNER}.sample", "forward_batch.sampling_info.has_watermark_candidates",
     "... where the batch's sampling info has watermark candidates"),
)

TP_WORKER = "sglang.srt.managers.tp_worker.TpModelWorker"
SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
GRAMMAR_FACTS = (
    # grammar batches (offgrammar.py): SGLang's delayed sample of an engine without speculation ...
    (f"{TP_WORKER}.forward_batch_generation",
     "if self.enable_overlap and (not self.enable_spec) and (forward_batch.sampling_info.grammars is not None",
     "a target worker told it does not speculate delays a grammar batch's sample under overlap scheduling"),
    (f"{TP_WORKER}.forward_batch_generation", "batch_result.delay_sample_func = sample_batch_func",
     "... handing it back unsampled, with the sample as delay_sample_func"),
    (f"{TP_WORKER}.forward_batch_generation",
     "batch_result.next_token_ids = self.model_runner.sample(logits_output, forward_batch)",
     "... which samples through ModelRunner.sample, as an immediate sample does"),
    (f"{RUNNER}._preprocess_logits", "sampling_info.update_regex_vocab_mask()",
     "the vocab mask is built when the sample runs, from the FSMs as they stand then"),
    ("sglang.srt.model_executor.forward_batch_info.ForwardBatch.init_new",
     "batch.sampling_info.grammars = [req.grammar for req in batch.reqs]",
     "a grammar batch's forward carries its requests' grammars (rows without one stay unconstrained)"),
    (f"{SCHEDULER}.event_loop_overlap", "self.launch_batch_sample_if_needed(batch_result, batch)",
     "the reference: without speculation the delayed sample runs after the previous result was processed"),
    # ... and the scheduler's grammar barrier, which steps-0's verify calls before it builds its mask
    (f"{SCHEDULER}.run_batch", "fwd_kwargs['grammar_barrier'] = self._advance_pending_grammar",
     "the scheduler hands the speculative worker's forward its grammar barrier"),
    (f"{SCHEDULER}._advance_pending_grammar",
     "self.batch_result_processor.advance_grammar_fsm(prev_result, prev_batch)",
     "the barrier advances the FSMs over the results still queued (idempotent)"),
    ("sglang.srt.speculative.spec_utils.build_grammar_vocab_mask", "barrier()",
     "steps-0's verify calls it before it builds its mask"),
    (f"{RESULTS}.advance_grammar_fsm", "accept_tokens = next_token_ids[i * stride:i * stride + accept_lens[i]]",
     "an off result (one token per request, accept length 1) advances each FSM by its token"),
)

OVERLAP = "sglang.srt.managers.overlap_utils"
LEAN_OFF_FACTS = (
    # the lean off step (offstubs.py): its result's tensors are only read, and only under the overlap scheduler
    (f"{SCHEDULER}.run_batch", "fwd_kwargs['on_publish'] = partial(self.future_map.publish, future_indices)",
     "a worker gets on_publish only from the overlap scheduler, which relays results through its FutureMap"),
    (f"{OVERLAP}.FutureMap.stash",
     "self.output_tokens_buf[indices] = payload.bonus_tokens.to(self.output_tokens_buf.dtype)",
     "the relay copies the tokens into its own buffer, casting them (int64 tokens need no cast there)"),
    (f"{OVERLAP}.resolve_forward_inputs", "future_map._resolve_spec_extras(batch)",
     "the next step's draft input is gathered from the FutureMap's buffers at forward entry ..."),
    (f"{OVERLAP}.FutureMap._resolve_spec_extras", "draft_input.bonus_tokens = bonus_tokens",
     "... replacing the result's tokens and extras, so nothing reads the stubs after the relay"),
    ("sglang.srt.speculative.eagle_info.EagleDraftInput.filter_batch",
     "self.future_indices = self.future_indices[new_indices]\n        return",
     "with future indices (overlap) a finished request filters those only, not the extras"),
    ("sglang.srt.speculative.eagle_info.EagleDraftInput.merge_batch",
     "self.future_indices = torch.cat([self.future_indices, spec_info.future_indices])",
     "... and merging batches concatenates them only"),
    ("sglang.srt.managers.utils.GenerationBatchResult.copy_to_cpu", "self.accept_lens = _async_d2h(self.accept_lens)",
     "the accept lengths are copied to the host, not written"),
    (f"{RESULTS}._resolve_spec_v2_tokens", "next_token_ids = result.next_token_ids.tolist()",
     "the tokens are read as Python ints: their dtype does not matter"),
    (f"{OVERLAP}.FutureMap.publish",
     "self.new_seq_lens_buf[indices] = new_seq_lens.to(self.new_seq_lens_buf.dtype)",
     "publish copies the new lengths, so the decode's own tensor can be published before the forward"),
)
LEAN_RESOLVE_FACTS = (
    # the future map's gather left out for a batch the fast path takes (offresolve.py)
    (f"{SCHEDULER}.run_batch", "resolve_forward_inputs(batch, self.future_map)",
     "the scheduler resolves a batch's inputs in run_batch, right before the worker's forward of that batch"),
    (f"{OVERLAP}.FutureMap._resolve_spec_extras", "draft_input.bonus_tokens = self.output_tokens_buf[indices]",
     "without topk the relay gathers the bonus tokens alone, as offresolve does for an off batch"),
    (f"{OVERLAP}.FutureMap._resolve_spec_extras",
     "indices.record_stream(torch.get_device_module(self.device).current_stream())",
     "the relay keeps the indices alive for the stream that reads them (offresolve does the same)"),
    (f"{OVERLAP}.FutureMap._resolve_spec_extras", "draft_input.dsa_topk_indices = None",
     "a batch without relayed DSA indices gets None (offresolve sets the same)"),
    (OVERLAP, "_DEBUG_ASSERT = ", "the module's debug asserts, a global offresolve reads (then it never skips)"),
    # ... and the light isolation: SGLang's own non-speculative branch of _forward_isolation, as offresolve._light
    (f"{SCHEDULER}.run_batch", "with self._forward_isolation(batch, overlap=True):",
     "the overlap scheduler isolates the batch's fields around the forward, after resolving its inputs"),
    (f"{SCHEDULER}._forward_isolation", "snapshot_v2_full = not batch.spec_algorithm.is_none()",
     "a speculative batch gets the full snapshot of its fields, ..."),
    (f"{SCHEDULER}._forward_isolation", "batch.sampling_info = sched_sampling_info.copy_for_forward()",
     "... every batch the sampling info's forward-only copy, ..."),
    (f"{SCHEDULER}._forward_isolation", "self.record_batch_in_overlap(batch)", "... the two-iteration pin (overlap), ..."),
    (f"{SCHEDULER}._forward_isolation", "batch.sampling_info = sched_sampling_info",
     "... and a non-speculative one only its sampling info put back"),
    ("sglang.srt.model_executor.forward_batch_info.ForwardBatch.init_new",
     "if batch.seq_lens_sum is None and seq_lens_cpu is not None:",
     "the plain decode's only ScheduleBatch write besides the sampling-info copy: seq_lens_sum, put back by the fast path"),
)
