"""``python -m grader.gpu_check``: what it installs, how it reads its steps, and when it says ok."""

from __future__ import annotations

import json

import pytest
import torch

from grader import gpu_check


def test_only_the_missing_wheels_are_installed(tmp_path, monkeypatch):
    for name in (
        "pytest_json_report-1.5.0-py3-none-any.whl",
        "rich-13.0.0-py3-none-any.whl",
        "referencing-0.37.0-py3-none-any.whl",
    ):
        (tmp_path / name).write_bytes(b"")
    importable = {"rich"}  # the machine has rich; it lacks pytest-json-report and jsonschema's `referencing`
    monkeypatch.setattr(gpu_check.importlib.util, "find_spec", lambda name: object() if name in importable else None)
    chosen = [wheel.name for wheel in gpu_check.wheels_for(tmp_path, ["pytest-json-report"])]
    assert chosen == ["pytest_json_report-1.5.0-py3-none-any.whl", "referencing-0.37.0-py3-none-any.whl"]


def record(
    *, passed: int = 80, failed: int = 0, reference: tuple[int, int, int] = (133, 133, 0), starter: int = 0
) -> dict:
    score, max_score, pending = reference
    return {
        "versions": {"gpu": "GPU", "torch": "2.11", "triton": "3.6", "python": "3.12"},
        "suite": {"exit_status": int(failed > 0), "counts": {"passed": passed, "failed": failed}, "wall_s": 1.0},
        "grade": {
            "reference": {
                "score": score,
                "max_score": max_score,
                "pending": pending,
                "status": "graded",
                "wall_s": 1.0,
            },
            "starter": {
                "score": starter,
                "max_score": max_score,
                "pending": pending,
                "status": "graded",
                "wall_s": 1.0,
            },
        },
    }


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ({}, 0),
        ({"failed": 1}, 1),
        ({"reference": (101, 133, 32)}, 1),
        ({"reference": (120, 133, 0)}, 1),
        ({"starter": 3}, 1),
    ],
    ids=["all-good", "a-test-failed", "gpu-tests-pending", "reference-short", "starter-scores"],
)
def test_ok_only_when_the_suite_passed_the_reference_is_full_and_the_starter_zero(tmp_path, capsys, case, expected):
    assert gpu_check.print_summary(record(**case), tmp_path) == expected
    assert ("ok" if expected == 0 else "PROBLEMS") in capsys.readouterr().out.splitlines()[-1]


def test_grade_summary_reads_both_graded_folders(tmp_path):
    for name, score in (("reference", 133), ("starter", 0)):
        (tmp_path / name).mkdir()
        lab = {"score": score, "max_score": 133, "pending": 0, "status": "graded", "wall_s": 2.0, "tests": []}
        (tmp_path / name / "summary.json").write_text(json.dumps({"labs": {"lab03": lab}}))
    summary = gpu_check.grade_summary(tmp_path)
    assert summary["reference"]["score"] == 133 and summary["starter"]["score"] == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_without_cuda_it_says_so_and_exits_2(tmp_path, capsys, monkeypatch):
    """Before installing anything: a CPU machine lacking a package the check would install still gets the message."""
    monkeypatch.setitem(gpu_check.NEEDED_MODULES, "a_module_nobody_has", "a-distribution-nobody-has")
    assert gpu_check.main(["--out", str(tmp_path / "out")]) == 2
    assert "no CUDA device" in capsys.readouterr().out
