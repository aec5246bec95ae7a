"""Statistics and log classification on known inputs."""

import pytest

from specsweep.measure import section_stats
from specsweep.servers import backends, signatures


@pytest.mark.parametrize("values, q, expected", [
    ([1, 2, 3, 4], 50, 2.5), ([5], 99, 5), ([1, 2, 3, 4, 5], 90, 4.6), ([3, 1, 2], 0, 1),
])
def test_percentile_matches_linear_interpolation(values, q, expected):
    assert section_stats.percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_none_not_zero():
    assert section_stats.percentile([], 50) is None
    assert section_stats.distribution([])["mean"] is None


def test_acceptance_length_from_counter_deltas():
    before = {"llamacpp:spec_decode_num_drafts_total": 10.0, "llamacpp:spec_decode_num_accepted_tokens_total": 20.0}
    after = {"llamacpp:spec_decode_num_drafts_total": 30.0, "llamacpp:spec_decode_num_accepted_tokens_total": 80.0}
    delta = section_stats.counter_delta(before, after)
    llama = backends.get("llama-server")
    assert llama.acceptance_length([], delta) == pytest.approx(1 + 60 / 20)
    assert llama.acceptance_length([], {}) is None


@pytest.mark.parametrize("line, label", [
    ("RuntimeError: CUDA error: an illegal instruction was encountered", "cuda-illegal-instruction"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", "gpu-oom"),
    ("torch.distributed.DistBackendError: NCCL error in: ...", "nccl"),
    ("main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080", "port-in-use"),
    ("error: the argument has been removed", "bad-arguments"),
    ("launch_server.py: error: unrecognized arguments: --foo", "bad-arguments"),
    ("{\"type\": \"exceed_context_size_error\"}", "context-exceeded"),
    # vLLM's current wording (vllm/renderers/params.py, _apply_length_check)
    ("vllm.exceptions.VLLMValidationError: You passed 4200 input tokens and requested 256 output tokens. However, "
     "the model's context length is only 4096, resulting in a maximum input length of 3840.", "context-exceeded"),
    ("vm:1234:1234 [0] NCCL INFO NCCL WARN Cuda failure 'out of memory'", "nccl-warning"),
])
def test_log_signatures(line, label):
    found, lines = signatures.classify(f"loading...\n{line}\nmore\n")
    assert found == label and lines == [line]


def test_a_crash_outranks_the_nccl_warnings_a_healthy_run_prints_too():
    log = ("vm:1:1 [0] NCCL INFO NCCL WARN Call to ibv_open_device failed\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
           "vm:1:1 [1] NCCL INFO NCCL WARN Cuda failure\n")
    found, lines = signatures.classify(log)
    assert found == "gpu-oom" and lines == ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]


def test_unknown_log_has_no_signature():
    assert signatures.classify("all good\n") == (None, [])


def test_exit_descriptions():
    assert signatures.describe_exit(-9) == "killed by SIGKILL"
    assert signatures.describe_exit(1) == "exited with code 1"


def test_every_failure_class_has_its_own_exit_code():
    from specsweep import errors

    classes = [errors.SpecsweepError, *errors.SpecsweepError.__subclasses__()]
    codes = {c.exit_code for c in classes if c is not errors.SpecsweepError}
    names = {c.failure_class for c in classes}
    assert len(codes) == len(classes) - 1 and len(names) == len(classes)
    assert 0 not in codes and errors.Interrupted(2).exit_code == 130 and errors.Interrupted(15).exit_code == 143
