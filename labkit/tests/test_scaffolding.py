"""The starters' guidance blocks follow the scaffolding convention, so a minimal release can drop them.

Guidance that spells an algorithm out step by step sits between ``# guidance: begin`` and
``# guidance: end`` (same indentation). A minimal release deletes both markers and everything
between; contract docstrings and ``raise NotImplementedError`` lines stay, so a block holds comment
lines only, and the file without its blocks is still valid Python.
"""

import ast

import pytest

from labkit.labspec import LAB_PACKAGES, load_lab_spec

BEGIN, END = "# guidance: begin", "# guidance: end"
#: Labs whose starters are marked (every editable file has at least one block).
MARKED_LABS = ("lab03_triton_lowering",)


def guidance_blocks(text: str) -> list[tuple[int, int]]:
    """(first, last) line numbers (1-based, markers included) of each block; raises ValueError on a bad pairing."""
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
    lines = text.splitlines(keepends=True)
    for first, last in reversed(guidance_blocks(text)):
        del lines[first - 1 : last]
    return "".join(lines)


STARTER_FILES = [(package, name) for package in LAB_PACKAGES for name in load_lab_spec(package).editable]


@pytest.mark.parametrize("package, name", STARTER_FILES, ids=[f"{p}/{n}" for p, n in STARTER_FILES])
def test_guidance_blocks_pair_up_and_leave_valid_python(package, name):
    text = (load_lab_spec(package).directory / name).read_text(encoding="utf-8")
    blocks = guidance_blocks(text)
    stripped = without_guidance(text)
    ast.parse(stripped, filename=name)
    assert stripped.count("raise NotImplementedError") == text.count("raise NotImplementedError")
    if package in MARKED_LABS:
        assert blocks, f"{package}/{name}: its step-by-step guidance is not marked"


@pytest.mark.parametrize("text, problem", [
    (f"x = 1\n{END}\n", "without a"),
    (f"def f():\n    {BEGIN}\n# hint\n{END}\n", "without a"),
    (f"{BEGIN}\nx = 1\n{END}\n", "comment lines only"),
    (f"{BEGIN}\n# one\n{BEGIN}\n", "opens inside"),
    (f"{BEGIN}\n# one\n", "never closed"),
])  # fmt: skip
def test_a_bad_block_is_named(text, problem):
    with pytest.raises(ValueError, match=problem):
        guidance_blocks(text)
