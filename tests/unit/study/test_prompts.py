"""Honest prompts: every request on a server its own real text, documents never shared, and a gate
that refuses a section that re-sent one. Through the real CLI against the stand-in that remembers:
tests/workflow/test_prompts_cli.py."""

from __future__ import annotations

import json

import pytest

from factories import result_doc
from specsweep import study
from specsweep.errors import ConfigError, PromptReused
from specsweep.measure import workload
from specsweep.measure.section_checks import check_distinct
from specsweep.records.request import RequestRecord
from specsweep.records.result import InvalidResult, Result
from specsweep.study import loading
from specsweep.study.prompts import build_prompts, chunks, prompt_id, read_documents


def words(text: str) -> list[int]:
    return [hash(w) % 50_000 for w in text.split()]


def test_prompts_have_the_exact_length_and_never_share_a_document():
    docs = [" ".join(f"d{d}w{k}" for k in range(n)) for d, n in enumerate([5, 30, 7, 7, 7, 40, 3, 90])]
    built = build_prompts(words, docs, count=3, length=20, chunk_chars=64, source="test")
    assert [len(p.tokens) for p in built] == [20, 20, 20]
    used = [d for p in built for d in p.documents]
    assert len(used) == len(set(used)) and built[0].documents == (0, 1)  # grown document by document
    assert all(p.sha256 == prompt_id(p.tokens) for p in built) and len({p.sha256 for p in built}) == 3
    with pytest.raises(ConfigError, match=r"test has 8 distinct documents, all used by the first 3 of the 4 prompts"):
        build_prompts(words, docs, count=4, length=40, chunk_chars=64, source="test")


def test_a_document_of_exactly_the_length_is_one_prompt_and_documents_are_joined_by_a_blank_line():
    chars = lambda text: [ord(c) for c in text]  # noqa: E731 - one token per character
    built = build_prompts(chars, ["abcd", "efgh", "ij", "klmn"], count=3, length=4, chunk_chars=64, source="t")
    assert [p.documents for p in built] == [(0,), (1,), (2, 3)]
    assert built[2].tokens == tuple(chars("ij\n\n"))  # the second document starts after a blank line
    with pytest.raises(ConfigError, match=r"^own.jsonl has 2 distinct prompts, all used by the first 2 of the 3"):
        build_prompts(chars, ["abcd", "efgh"], count=3, length=4, chunk_chars=64, source="own.jsonl", join=False)


def test_the_users_own_prompts_are_never_joined():
    with pytest.raises(ConfigError, match=r"p.jsonl line 1: the prompt has 5 tokens, the grid asks for 20"):
        build_prompts(words, ["a b c d e", "f " * 40], count=2, length=20, chunk_chars=64, source="p.jsonl", join=False)


def test_no_piece_sent_to_the_tokenizer_exceeds_the_limit():
    """vLLM's /tokenize refuses text longer than max_model_len: pieces stay under the limit."""
    text = "x" * 500 + " " + "word " * 400
    pieces = list(chunks(text, 64))
    assert "".join(pieces) == text and max(map(len, pieces)) <= 64


def strict_tokenizer(limit: int):
    """A tokenizer that refuses, as vLLM's does (renderers/params.py::_apply_length_check), any text of
    more tokens than its limit; one token per 4 bytes, rounded up, the way English BPE runs."""
    def tokenize(text: str) -> list[int]:
        n = -(-len(text.encode()) // 4)
        if n > limit:
            raise AssertionError(f"a piece of {n} tokens sent to a tokenizer limited to {limit}")
        return [b % 50_000 for b in text.encode()[::4]]
    return tokenize


def test_a_documents_file_is_read_by_line_and_a_damaged_document_is_named_when_used(tmp_path):
    """Documents are parsed when used (a launch needs tens of thousands' few): blank lines are
    not documents, the last needs no newline, and a damaged one stops the launch naming it."""
    path = tmp_path / "documents.jsonl"
    path.write_bytes(b'{"text": "one"}\n\n{"text": "two \\u00e9"}\r\n{"text": "three"\n{"text": "four"}')
    docs = read_documents(path)
    assert len(docs) == 4 and docs[0] == "one" and docs[1] == "two \u00e9" and docs[3] == "four"
    assert docs.in_order([3, 0])[:2] == ["four", "one"] and len(docs.in_order([1])) == 1
    with pytest.raises(ConfigError, match=r"documents\.jsonl \(document 3: .*provision it again"):
        docs[2]
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert len(read_documents(tmp_path / "empty.jsonl")) == 0
    with pytest.raises(ConfigError, match="cannot read the prompt set's documents"):
        read_documents(tmp_path / "absent.jsonl")


@pytest.mark.parametrize("name", ["sharegpt", "humaneval"])
def test_the_shipped_prompt_sets_are_distinct_real_text(name):
    source = loading.default_prompts(name)
    docs = read_documents(source["prompts"])
    assert source["documents"] == len(docs) == len(set(docs)) and source["set"] == name
    assert len(docs) > (15_000 if name == "sharegpt" else 160)  # sharegpt: 16,788 whole conversations, 108 MB
    if name == "humaneval":
        assert all("def " in d for d in docs)
    else:
        assert sum(" the " in d for d in docs[:100]) > 50


@pytest.mark.parametrize("configfile", ["config/sglang-ddtree.yaml", "config/vllm-gpu.yaml"])
def test_the_example_gpu_studies_get_their_prompts_at_their_largest_context(configfile):
    """Each configuration's whole prompt set, at the largest context, within the tokenizer's limit."""
    from conftest import REPO

    cfg = study.validate_study(__import__("yaml").safe_load((REPO / configfile).read_text()))
    spec = max(study.expand_grid(cfg), key=lambda s: s.context)
    docs = read_documents(loading.default_prompts(spec.prompt_set)["prompts"])
    limit = spec.context + spec.max_output_tokens
    built = build_prompts(strict_tokenizer(limit), docs, count=spec.prompts_needed, length=spec.context,
                          chunk_chars=workload._chunk_chars(spec.context, spec.max_output_tokens), source="set")
    assert len(built) == spec.prompts_needed and {len(p.tokens) for p in built} == {spec.context}
    assert len({p.sha256 for p in built}) == spec.prompts_needed


def test_the_humaneval_set_cannot_fill_the_seeds_study_and_says_so_with_numbers():
    from conftest import REPO

    cfg = study.validate_study({**__import__("yaml").safe_load((REPO / "config/sglang-ddtree.yaml").read_text()),
                                "workload": {"prompt_set": "humaneval", "repeats": 2}})
    spec = max(study.expand_grid(cfg), key=lambda s: s.context)
    docs = read_documents(loading.default_prompts("humaneval")["prompts"])
    with pytest.raises(ConfigError, match=rf"has {len(docs)} distinct documents, all used by the first \d+ of the "
                                          rf"{spec.prompts_needed} prompts of 25000 tokens"):
        build_prompts(strict_tokenizer(30_000), docs, count=spec.prompts_needed, length=spec.context,
                      chunk_chars=2048, source="humaneval")


def _record(index: int, sha: str | None) -> RequestRecord:
    return RequestRecord(section="short", index=index, prompt_tokens=4, output_tokens=4, t_scheduled=0, t_send=0,
                         t_first_token=0.1, t_end=0.2, chunk_t=(0.1,), chunk_tokens=(4,),
                         server_predicted_per_second=None, draft_tokens=0, draft_accepted=0, prompt_sha256=sha)


def test_the_gate_refuses_a_prompt_sent_twice_on_one_server():
    seen: dict[str, str] = {}
    check_distinct(seen, [_record(0, "a" * 64)], "the warmup", reuse=False)
    check_distinct(seen, [_record(0, "b" * 64), _record(1, "c" * 64)], "section short repeat 0", reuse=False)
    with pytest.raises(PromptReused, match=r"section short repeat 1: request 1 sent prompt bbbbbbbbbbbb that this "
                                           r"server already got in section short repeat 0") as caught:
        check_distinct(seen, [_record(0, "d" * 64), _record(1, "b" * 64)], "section short repeat 1", reuse=False)
    assert caught.value.section == "short"  # the record names the section it happened in
    with pytest.raises(PromptReused, match="request 1 sent prompt eeee"):  # twice within one repeat, too
        check_distinct({}, [_record(0, "e" * 64), _record(1, "e" * 64)], "section short repeat 0", reuse=False)
    with pytest.raises(PromptReused, match="carries no prompt identity"):
        check_distinct({}, [_record(0, None)], "section short repeat 0", reuse=False)
    check_distinct(seen, [_record(0, "b" * 64)], "section short repeat 1", reuse=True)  # caching on purpose


def test_a_result_that_re_sent_a_prompt_is_refused_by_aggregation():
    spec = study.expand_grid(study.validate_study({"grid": {"budget": [0], "tp": [1], "context": [128]}}))[0]
    doc = result_doc(spec)
    Result.from_json(doc)
    twice = json.loads(json.dumps(doc))
    twice["sections"][1]["records"][0]["prompt_sha256"] = twice["sections"][0]["records"][0]["prompt_sha256"]
    sha = twice["sections"][0]["records"][0]["prompt_sha256"]
    with pytest.raises(InvalidResult, match=rf"prompt {sha[:12]} was sent 2 times on one server without "
                                            r"workload.reuse_prompts"):
        Result.from_json(twice)
    after_warmup = json.loads(json.dumps(doc))  # the warmup's prompt sent again in a section
    after_warmup["sections"][0]["records"][1]["prompt_sha256"] = after_warmup["warmup"]["prompt_sha256"][0]
    with pytest.raises(InvalidResult, match="was sent 2 times on one server"):
        Result.from_json(after_warmup)
    unnamed = json.loads(json.dumps(doc))
    del unnamed["sections"][2]["records"][0]["prompt_sha256"]
    with pytest.raises(InvalidResult, match="^a request record carries no prompt_sha256$"):
        Result.from_json(unnamed)
    twice["prompts"]["reused"] = True  # a study that measures caching says so, and is read
    Result.from_json(twice)
    older = {**json.loads(json.dumps(doc)), "schema_version": 2}  # made before prompts were distinct
    assert Result.from_json(older).prompts["reused"] is None
    assert Result.from_json(older).comparability()["prompts"] != Result.from_json(doc).comparability()["prompts"]


# These tests are about prompts, on 8-token sections that last milliseconds: their repeats' spread
# is the timer's (55% seen once on this machine), so the quiet-host guard's spread check is relaxed.


def test_a_prompts_file_too_small_for_distinct_prompts_is_refused_when_planned(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"prompt": "word " * 300}) + "\n" for _ in range(4)))
    with pytest.raises(ConfigError, match=r"holds 4 prompts, and each configuration sends 11 that its server has not "
                                          r"seen \(warmup 1, then 5 requests a repeat x 2 repeats\)"):
        study.validate_study({"workload": {"prompts_file": str(path)}})
    cfg = study.validate_study({"workload": {"prompts_file": str(path), "reuse_prompts": True}})
    assert study.expand_grid(cfg)[0].prompts_needed == 1 + 2


