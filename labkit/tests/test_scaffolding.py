"""The starters' guidance blocks follow the scaffolding convention (:mod:`labkit.scaffold`), so a minimal
release can drop them: contract docstrings and ``raise NotImplementedError`` lines stay, and the file
without its blocks is still valid Python."""

import ast

import pytest

from labkit.labspec import LAB_PACKAGES, load_lab_spec
from labkit.scaffold import BEGIN, END, guidance_blocks, without_guidance

#: Labs whose starters are marked (every editable file has at least one block).
MARKED_LABS = ("lab02_npu_backend", "lab03_triton_lowering")


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
