"""One acceptance length across the backends: mean tokens produced per verification step, the
bonus token counted, the token each request's prefill made left out.

The same known run is given to each backend in the shape its server reports it: two requests,
10 verification steps (6 and 4) that accepted 7 drafts (4 and 3): 1 + 7/10 = 1.7 on each.

- llama-server (tools/server/server-context.cpp, llama.cpp in llama-cpp-python 0.3.36): a step
  whose draft is empty is a plain decode step, no verification; ``n_draft_verif_steps`` (the
  ``llamacpp:spec_decode_num_drafts_total`` counter) and ``n_draft_accepted`` count the others.
- vLLM (v1/spec_decode/metrics.py, core/sched/scheduler.py in 0.32.0): ``observe_draft`` counts a
  request's step only when it had draft tokens (``make_spec_decoding_stats`` returns None
  otherwise): ``vllm:spec_decode_num_drafts_total`` and ``..._num_accepted_tokens_total``.
- SGLang (the speculative workers' verify; tokenizer_manager's ``_calculate_spec_decoding_metrics``):
  every decode pass verifies (``spec_verify_ct += 1``) and appends accepted drafts + 1
  (``spec_accepted_tokens += accept_len``); the prefill's token is in ``completion_tokens`` and in
  no verify step.
"""

import pytest

from specsweep.records.request import RequestRecord
from specsweep.servers import backends

STEPS, ACCEPTED = (6, 4), (4, 3)
PLAIN = [0, 0]  # decode steps that drafted nothing (llama-server and vLLM verify nothing on them)


def record(output_tokens: int, *, verify_steps=None, accepted=0) -> RequestRecord:
    return RequestRecord(section="s", index=0, prompt_tokens=8, output_tokens=output_tokens, t_scheduled=0.0,
                         t_send=0.0, t_first_token=0.1, t_end=1.0, chunk_t=(0.1, 1.0), chunk_tokens=(1, output_tokens),
                         server_predicted_per_second=None, draft_tokens=0, draft_accepted=accepted,
                         verify_steps=verify_steps)


def tokens(i: int) -> int:
    return 1 + STEPS[i] + ACCEPTED[i] + PLAIN[i]  # the prefill's, each step's bonus, the accepted drafts, plain steps


def llama_server() -> float | None:
    backend = backends.get("llama-server")
    finals = [backend.final({"stop": True, "tokens_predicted": tokens(i), "tokens_evaluated": 8,
                             "timings": {"predicted_n": tokens(i), "draft_n": 3 * STEPS[i],
                                         "draft_n_accepted": ACCEPTED[i]}}, n_predict=tokens(i), prompt_len=8)
              for i in range(2)]
    records = [record(f.output_tokens, accepted=f.draft_accepted) for f in finals]
    delta = {"llamacpp:spec_decode_num_drafts_total": float(sum(STEPS)),
             "llamacpp:spec_decode_num_accepted_tokens_total": float(sum(ACCEPTED)),
             "llamacpp:spec_decode_num_draft_tokens_total": float(3 * sum(STEPS))}
    return backend.acceptance_length(records, delta)


def vllm() -> float | None:
    backend = backends.get("vllm")
    finals = [backend.final({"choices": [], "usage": {"completion_tokens": tokens(i), "prompt_tokens": 8}},
                            n_predict=tokens(i), prompt_len=8) for i in range(2)]
    delta = {"vllm:spec_decode_num_drafts_total": float(sum(STEPS)),
             "vllm:spec_decode_num_accepted_tokens_total": float(sum(ACCEPTED)),
             "vllm:spec_decode_num_draft_tokens_total": float(3 * sum(STEPS))}
    return backend.acceptance_length([record(f.output_tokens) for f in finals], delta)


def sglang() -> float | None:
    backend = backends.get("sglang")
    finals = []
    for i in range(2):
        meta = {"prompt_tokens": 8, "completion_tokens": tokens(i), "finish_reason": {"type": "length"},
                "spec_verify_ct": STEPS[i], "spec_num_correct_drafts": ACCEPTED[i],
                "spec_num_proposed_drafts": 3 * STEPS[i]}
        finals.append(backend.final({"meta_info": meta}, n_predict=tokens(i), prompt_len=8))
    records = [record(f.output_tokens, verify_steps=f.verify_steps, accepted=f.draft_accepted) for f in finals]
    return backend.acceptance_length(records, {})


def test_the_same_run_gives_the_same_acceptance_length_on_every_backend():
    per_step = 1 + sum(ACCEPTED) / sum(STEPS)  # 1.7: 17 tokens over 10 verification steps
    assert [llama_server(), vllm(), sglang()] == pytest.approx([per_step] * 3)


def test_steps_that_drafted_nothing_are_no_verification_steps_on_llama_server_and_vllm():
    PLAIN[0] = 3  # the first request made 3 tokens on steps without a draft: its counters do not move
    try:
        assert [llama_server(), vllm()] == pytest.approx([1 + sum(ACCEPTED) / sum(STEPS)] * 2)
    finally:
        PLAIN[0] = 0


def test_acceptance_is_absent_where_nothing_was_verified_never_a_near_relative():
    assert backends.get("llama-server").acceptance_length([record(11)], {}) is None
    unmoved = {"vllm:spec_decode_num_accepted_tokens_total": 0.0}
    assert backends.get("vllm").acceptance_length([record(11)], unmoved) is None
    # SGLang without spec_verify_ct (no speculation): not completion_tokens / anything.
    assert backends.get("sglang").acceptance_length([record(11)], {}) is None


def test_each_result_says_how_its_server_counts_acceptance():
    from specsweep import study

    doc = {"grid": {"budget": [0, 4], "tp": [1], "context": [64]}}
    for name in ("llama-server", "vllm", "sglang"):
        own = {} if name == "llama-server" else {"model": {"path": "org/model"}, "server": {"binary": "python3"}}
        spec = study.find_spec(study.validate_study({**doc, **own, "backend": name}), "tp1-b4-ctx64")
        backend = backends.get(name)
        assert backend.acceptance_from and backend.budget_meaning(spec)["acceptance"] == backend.acceptance_from
