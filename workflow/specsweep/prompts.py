"""The user's own prompts: a JSONL file, one {"prompt": "text"} per line.

Its own module because the study loader checks the file before anything is planned and the
workload reads it at run time: both use this one reader, and neither imports the other.
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import ConfigError


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
