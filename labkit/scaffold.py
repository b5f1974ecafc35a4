"""How much a starter spells out: guidance blocks, which an instructor may release or leave out.

Starter files carry two kinds of help. The contract (docstrings, signatures, the
``raise NotImplementedError`` a student replaces) always ships. Guidance that spells an algorithm out
step by step sits between two comment lines at the same indentation::

    # guidance: begin
    # 1. walk the graph's nodes in order ...
    # guidance: end

``grader release --scaffold minimal`` deletes both markers and everything between them (a course that
wants students to design, as CS336 ships contracts only); ``--scaffold full`` (the default) ships the
starters as they are. A block holds comment lines only, so a file without its blocks is still valid Python.
"""

from __future__ import annotations

BEGIN, END = "# guidance: begin", "# guidance: end"
SCAFFOLDS = ("full", "minimal")


def guidance_blocks(text: str) -> list[tuple[int, int]]:
    """(first, last) line numbers (1-based, markers included) of each block.

    Raises:
        ValueError: naming the line of a marker without its pair, a block inside a block, or code in a block.
    """
    blocks, opened = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped == BEGIN:
            if opened is not None:
                raise ValueError(f"line {number}: a guidance block opens inside the one at line {opened[0]}")
            opened = (number, line[: len(line) - len(line.lstrip())])
        elif stripped == END:
            if opened is None or line[: len(line) - len(line.lstrip())] != opened[1]:
                raise ValueError(f"line {number}: '{END}' without a '{BEGIN}' at the same indentation")
            blocks.append((opened[0], number))
            opened = None
        elif opened is not None and stripped and not stripped.startswith("#"):
            raise ValueError(f"line {number}: a guidance block holds comment lines only, found code: {stripped!r}")
    if opened is not None:
        raise ValueError(f"line {opened[0]}: guidance block never closed")
    return blocks


def without_guidance(text: str) -> str:
    """``text`` with every guidance block (markers included) removed."""
    lines = text.splitlines(keepends=True)
    for first, last in reversed(guidance_blocks(text)):
        del lines[first - 1 : last]
    return "".join(lines)
