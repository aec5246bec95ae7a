"""What a configuration sends: the user's own prompts (a JSONL file, one {"prompt": "text"} per
line) or a provisioned prompt set (prompt_sets.py), made into prompts of exact token length.

Every request on a server gets its own prompt: a server that saw a text before (llama-server's
ngram-mod pool, SGLang's radix cache and NGRAM drafts, vLLM's prefix cache) would otherwise
answer it from memory, and speculation would look better than it is. Its own module because the
study loader checks the file before anything is planned and the workload reads it at run time:
both use this one reader, and neither imports the other.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from specsweep.errors import ConfigError


def read_prompts_file(path: str) -> list[str]:
    """The prompts of a JSONL file; errors name the line."""
    texts = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read prompts file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"prompts file {path} is not UTF-8 text ({not_utf8(exc)}); save it as UTF-8") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            text = json.loads(line)["prompt"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ConfigError(f'{path} line {number}: expected {{"prompt": "..."}}, got {line[:80]!r}') from exc
        if not isinstance(text, str) or not text:
            raise ConfigError(f"{path} line {number}: prompt must be a non-empty string")
        texts.append(text)
    if not texts:
        raise ConfigError(f"prompts file {path} holds no prompts")
    return texts


def not_utf8(exc: UnicodeDecodeError) -> str:
    """Where a file stops being UTF-8, for a message: 'byte 0xe9 at offset 10'."""
    return f"byte 0x{exc.object[exc.start]:02x} at offset {exc.start}"


# --- prompts of exact length, each from text no earlier request of the server has seen ----------

@dataclass(frozen=True)
class Prompt:
    """One request's prompt: its token ids, their identity, and the documents it was cut from."""

    tokens: tuple[int, ...]
    sha256: str
    documents: tuple[int, ...]


def prompt_id(tokens) -> str:
    """SHA-256 of the token ids sent: the identity the validity gate compares."""
    return hashlib.sha256(json.dumps(list(tokens), separators=(",", ":")).encode()).hexdigest()


def read_documents(path: str | Path) -> Documents:
    """The documents of a provisioned prompt set (prompt_sets.write_documents), in file order."""
    try:
        with open(path, "rb") as fh:
            text = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(fh.fileno()).st_size else b""
    except OSError as exc:
        raise ConfigError(f"cannot read the prompt set's documents {path}: {exc}; provision it again "
                          f"(remove its folder in the cache)") from exc
    starts = [0]
    while (end := text.find(b"\n", starts[-1])) != -1:
        starts.append(end + 1)
    lines = [(start, end) for start, end in zip(starts, [*starts[1:], len(text) + 1]) if end - start > 1]
    return Documents(str(path), text, lines, range(len(lines)))


class Documents(Sequence[str]):
    """A prompt set's documents, each parsed when it is first read: a launch uses tens of the
    16,788 in ShareGPT's 108 MB, and reading and parsing them all was most of a launch's CPU (the
    file is mapped, not copied). It was checked against its manifest's SHA-256 when it was
    provisioned or found in the cache, moments before."""

    def __init__(self, path: str, text, lines: list[tuple[int, int]], order: Sequence[int]):
        self.path, self._text, self._lines, self._order = path, text, lines, order

    def __len__(self) -> int:
        return len(self._order)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        number = self._order[index]
        start, end = self._lines[number]
        try:
            return json.loads(self._text[start:end - 1])["text"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"cannot read the prompt set's documents {self.path} (document {number + 1}: {exc}); "
                              f"provision it again (remove its folder in the cache)") from exc

    def in_order(self, order: Sequence[int]) -> Documents:
        """The same documents, the i-th being this one's ``order[i]``."""
        return Documents(self.path, self._text, self._lines, [self._order[i] for i in order])


def seeded_order(count: int, seed: int | str) -> list[int]:
    """The order documents are used in: the same for every configuration of a study (same seed)."""
    order = list(range(count))
    random.Random(f"prompts:{seed}").shuffle(order)
    return order


def build_prompts(tokenize: Callable[[str], list[int]], documents: Sequence[str], *, count: int, length: int,
                  chunk_chars: int, source: str, join: bool = True) -> list[Prompt]:
    """``count`` prompts of exactly ``length`` tokens, no document used twice.

    A prompt too short for one document is grown document by document (``join``; the user's own
    prompts are never joined: each is one prompt). Text is tokenized in pieces of at most
    ``chunk_chars`` characters, so that a server whose tokenizer refuses text longer than its
    context (vLLM's /tokenize does) is never sent more than it takes.
    """
    prompts, next_doc = [], 0
    for number in range(count):
        tokens: list[int] = []
        used: list[int] = []
        while len(tokens) < length:
            if used and not join:
                raise ConfigError(f"{source} line {used[0] + 1}: the prompt has {len(tokens)} tokens, the grid asks "
                                  f"for {length}; use longer prompts or a smaller grid.context")
            if next_doc >= len(documents):
                raise ConfigError(
                    f"{source} has {len(documents)} distinct {'documents' if join else 'prompts'}, all used by the "
                    f"first {number} of the {count} prompts of {length} tokens this configuration sends (warmup, "
                    f"every section and every repeat its own); use a larger prompt set, fewer requests or repeats, "
                    f"or a smaller grid.context")
            text = documents[next_doc] if not used else "\n\n" + documents[next_doc]
            used.append(next_doc)
            next_doc += 1
            for piece in chunks(text, chunk_chars):
                tokens += tokenize(piece)
                if len(tokens) >= length:
                    break
        cut = tuple(tokens[:length])
        prompts.append(Prompt(cut, prompt_id(cut), tuple(used)))
    return prompts


def chunks(text: str, limit: int) -> Iterator[str]:
    """Pieces of at most ``limit`` characters, cut after whitespace where there is some."""
    while len(text) > limit:
        cut = text.rfind(" ", limit // 2, limit) + 1 or limit
        yield text[:cut]
        text = text[cut:]
    if text:
        yield text
