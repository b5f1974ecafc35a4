"""Keep what students' code prints from swamping the grader: shorten text, files and JSON strings.

Head and tail are both kept: the head shows what started going wrong, the tail how the run ended.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TRUNCATION_MARK = "\n[... {} characters truncated by the grader ...]\n"


def truncate_text(text: str, limit: int) -> str:
    """Return ``text`` unchanged if short, else its head and tail around a truncation mark."""
    if len(text) <= limit:
        return text
    half = max(limit // 2, 1)
    return text[:half] + TRUNCATION_MARK.format(len(text) - 2 * half) + text[-half:]


def trim_file(path: Path, keep_bytes: int) -> None:
    """Shorten a (possibly huge) file in place to its first and last ``keep_bytes // 2`` bytes."""
    if not path.is_file():
        return
    size = path.stat().st_size
    if size <= keep_bytes:
        return
    half = keep_bytes // 2
    with open(path, "rb") as handle:
        head = handle.read(half)
        handle.seek(size - half)
        tail = handle.read(half)
    mark = TRUNCATION_MARK.format(size - 2 * half).encode()
    path.write_bytes(head + mark + tail)


def shorten_strings(value: Any, limit: int) -> Any:
    """A copy of a JSON value with every string longer than ``limit`` truncated."""
    if isinstance(value, str):
        return truncate_text(value, limit)
    if isinstance(value, list):
        return [shorten_strings(item, limit) for item in value]
    if isinstance(value, dict):
        return {key: shorten_strings(item, limit) for key, item in value.items()}
    return value


_ERROR_LINE = ("Error", "error:", "E   ", "Exception", "FAILED", "ERROR")


def key_lines(text: str, limit: int = 8) -> list[str]:
    """The lines of a long reason worth printing on a console: its first line, then the ones that name an
    error (``SyntaxError: ...``, pytest's ``E   ...``), else its last lines; at most ``limit`` (pure)."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) <= limit:
        return lines
    errors = [line for line in lines[1:] if any(mark in line for mark in _ERROR_LINE)]
    rest = (errors or lines[1:])[-(limit - 1) :]
    return [lines[0], *rest]
