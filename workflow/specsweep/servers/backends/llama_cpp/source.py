"""llama.cpp's source, from the pinned llama-cpp-python sdist (downloaded, or a local copy
checked against the pin), and the cut of it that travels to a machine without the package index.

The pinned sdist is 76.6 MB, more than travels to such a machine (64 MiB); what the server's
build and gguf-py need of it is a few MB: llama.cpp less its models (vocabulary GGUFs for
llama.cpp's own tests), docs, benches, media and tests. The archive is cut from the verified
sdist, and the manifest beside it names both SHA-256s.
"""

from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
from pathlib import Path

from specsweep.cache import pip_download, progress, sha256_file
from specsweep.errors import ProvisionError

SOURCE_LEFT_OUT = ("models", "docs", "benches", "media", "tests", ".git", ".github", ".devops")


def in_cut(name: str) -> bool:
    """Whether an sdist member is part of the build's source: llama.cpp less SOURCE_LEFT_OUT. The
    embedded build unpacks the same members from the whole sdist, so every build here proves the
    cut the GPU machine builds from is enough."""
    parts = name.split("/")
    return parts[1:3] == ["vendor", "llama.cpp"] and (len(parts) < 4 or parts[3] not in SOURCE_LEFT_OUT)


def source_cut(version: str, sha256: str, out: Path, *, sdist: Path | None = None) -> dict:
    """Cut the build's source from the pinned sdist (downloaded, or a local copy checked against
    the pin) into ``out`` (.tar.xz), with ``out``.json naming both hashes; return that manifest."""
    with tempfile.TemporaryDirectory(prefix="specsweep-source-") as tmp:
        if sdist is None:
            sdist = pip_download(f"llama-cpp-python=={version}", Path(tmp), sha256=sha256, sdist=True)
        elif sha256_file(sdist) != sha256:
            raise ProvisionError(f"{sdist} is not the pinned llama-cpp-python {version} sdist (SHA-256 differs)")
        out.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as src, tarfile.open(out, "w:xz", preset=6) as dst:
            for member in src.getmembers():
                if in_cut(member.name):
                    dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    manifest = {"archive": out.name, "archive_sha256": sha256_file(out), "bytes": out.stat().st_size,
                "cut_from": f"llama-cpp-python=={version}", "sdist_sha256": sha256,
                "left_out": [f"vendor/llama.cpp/{p}" for p in SOURCE_LEFT_OUT]}
    Path(f"{out}.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def local_source(path: Path, version: str, sha256: str) -> Path:
    """A local source file the build may use: the pinned sdist, or an archive cut from it."""
    path = Path(path)
    if not path.is_file():
        raise ProvisionError(f"{path}: no such source file; make one with: specsweep provision llama-source")
    actual = sha256_file(path)
    if actual == sha256:
        return path
    try:
        manifest = json.loads(Path(f"{path}.json").read_text())
    except (OSError, ValueError) as exc:
        raise ProvisionError(f"{path} is not the pinned sdist and has no readable manifest {path}.json ({exc}); "
                             f"make it again with: specsweep provision llama-source") from exc
    if manifest.get("sdist_sha256") != sha256 or manifest.get("archive_sha256") != actual:
        raise ProvisionError(f"{path} was not cut from llama-cpp-python {version} as pinned ({sha256[:12]}), or "
                             f"changed since; make it again with: specsweep provision llama-source")
    return path


def _extract_llama_cpp(sdist: Path, dest: Path) -> Path:
    """Unpack only the cut's part of vendor/llama.cpp from the sdist (or a source archive cut from it)."""
    progress(f"unpacking llama.cpp from {sdist.name}")
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if in_cut(m.name)]
        if not members:
            raise ProvisionError(f"{sdist.name} holds no vendor/llama.cpp source tree")
        tar.extractall(dest, members=members, filter="data")
    roots = list(dest.glob("*/vendor/llama.cpp"))
    if not roots or not (roots[0] / "tools" / "server").is_dir():
        raise ProvisionError(f"{sdist.name}: vendor/llama.cpp has no tools/server")
    return roots[0]


def source_tree(sdist: Path, dest: Path) -> Path:
    """llama.cpp unpacked in dest, once per source file: a kept build folder's sources keep their
    paths and times, so the build continues instead of starting over."""
    stamp = dest / ".unpacked-from"
    digest = sha256_file(sdist)
    if stamp.is_file() and stamp.read_text() == digest and (roots := list(dest.glob("*/vendor/llama.cpp"))):
        return roots[0]
    shutil.rmtree(dest, ignore_errors=True)
    tree = _extract_llama_cpp(sdist, dest)
    stamp.write_text(digest)
    return tree

