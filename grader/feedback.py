"""Turn a scored result into what people read: Markdown feedback, JSON, Gradescope's ``results.json``.

All renderers are pure functions of a :class:`~grader.results.SubmissionResult`.

Gradescope's contract: ``{"score", "output", "tests": [{"name", "score", "max_score", "status",
"output", "visibility"}]}``. Gradescope has no "pending": a pending GPU test is listed with score 0,
its full ``max_score`` and an output saying it is graded on a GPU later; the top-level ``score`` is
the grader's total, so nothing is counted twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grader.artifacts import FEEDBACK_FILE, GRADESCOPE_FILE, SUMMARY_FILE
from grader.results import EVIDENCE_PASSED, PASSED, PENDING, LabResult, SubmissionResult

OUTCOME_ICONS = {PASSED: "✅", PENDING: "⏳", "failed": "❌", "error": "❌", "timeout": "⏱", "crashed": "💥",
                 "not-run": "·", "skipped": "·", "void": "⛔"}


def _points(score: int, max_score: int, pending: int) -> str:
    return f"{score}/{max_score}" + (f" (+{pending} pending GPU)" if pending else "")


def summary_line(result: SubmissionResult) -> str:
    """``alice: 13/16 (+3 pending GPU) · labA 9/9 graded · labB 4/7 graded``."""
    total = result.total
    labs = " · ".join(f"{lab.lab} {lab.score}/{lab.max_score} {lab.status}" for lab in result.labs)
    return f"{result.submission}: {_points(total['score'], total['max_score'], total['pending'])} · {labs}"


def _md_cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def lab_markdown(lab: LabResult) -> list[str]:
    """One lab's section: score, reason, the test table, the talking-point checklist."""
    lines = [f"## {lab.lab}: {lab.title}", "",
             f"**{_points(lab.score, lab.max_score, lab.pending)}** · status: `{lab.status}`", ""]
    if lab.reason:
        lines += [f"> {_md_cell(lab.reason)}", ""]
    if lab.tests:
        lines += ["| | test | points | outcome | why |", "|---|---|---|---|---|"]
        for test in lab.tests:
            name = test.nodeid.split("::", 1)[-1]
            lines.append(f"| {OUTCOME_ICONS.get(test.outcome, '')} | `{name}` | {test.points}/{test.max_points} "
                         f"| {test.outcome} | {_md_cell(test.message)[:300]} |")
        lines.append("")
    if lab.talking_points:
        lines += ["**Talking points** (ready when their tests pass):", ""]
        for point in lab.talking_points:
            mark = "x" if point.status == EVIDENCE_PASSED else " "
            tests = ", ".join(f"`{name}`" for name in point.evidence)
            lines.append(f"- [{mark}] *{point.kind.replace('_', ' ')}*: {point.text} — {point.status} ({tests})")
        lines.append("")
    return lines


def to_markdown(result: SubmissionResult) -> str:
    """The student's feedback page."""
    total = result.total
    lines = [f"# Grade report: {result.submission}", "",
             f"**Total: {_points(total['score'], total['max_score'], total['pending'])}** (GPU mode: {result.gpu})", ""]
    if result.flags:
        lines += ["**Flags** (changes the grader ignored or runs it voided):", ""]
        lines += [f"- ⚠ {_md_cell(flag)}" for flag in result.flags] + [""]
    if result.notes:
        lines += [f"- {_md_cell(note)}" for note in result.notes] + [""]
    for lab in result.labs:
        lines += lab_markdown(lab)
    return "\n".join(lines)


def to_gradescope(result: SubmissionResult) -> dict[str, Any]:
    """Gradescope's ``results.json`` (see the module docstring)."""
    tests = []
    for lab in result.labs:
        if not lab.tests:
            tests.append({"name": f"{lab.lab}: {lab.title}", "score": 0, "max_score": lab.max_score,
                          "status": "failed", "output": lab.reason or lab.status, "visibility": "visible"})
        for test in lab.tests:
            output = test.message
            if test.outcome == PENDING:
                output = "pending: needs a CUDA GPU; graded separately on a GPU machine"
            elif lab.status not in ("graded",) and test.outcome != PASSED:
                output = f"{test.outcome}: {test.message} [{lab.status}: {lab.reason}]"
            tests.append({"name": f"{lab.lab} · {test.nodeid.split('::', 1)[-1]}", "score": test.points,
                          "max_score": test.max_points, "status": "passed" if test.outcome == PASSED else "failed",
                          "output": output, "visibility": "visible"})
    total = result.total
    flags = "".join(f"\nFLAG: {flag}" for flag in result.flags)
    return {"score": total["score"], "output": summary_line(result) + flags, "stdout_visibility": "visible",
            "tests": tests, "extra_data": {"pending": total["pending"], "max_score": total["max_score"]}}


def render(result: SubmissionResult, fmt: str) -> str:
    """``md``, ``json`` (summary.json's content) or ``gradescope``."""
    if fmt == "md":
        return to_markdown(result)
    # Compact JSON: the C encoder only runs without ``indent`` (5-10x faster on a class of 1,000).
    if fmt == "json":
        return json.dumps(result.to_dict(), ensure_ascii=False)
    if fmt == "gradescope":
        return json.dumps(to_gradescope(result), ensure_ascii=False)
    raise ValueError(f"unknown format {fmt!r}: expected md, json or gradescope")


def write_outputs(result: SubmissionResult, out: Path) -> None:
    """Write ``summary.json``, ``feedback.md`` and Gradescope's ``results.json`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY_FILE).write_text(render(result, "json") + "\n", encoding="utf-8")
    (out / FEEDBACK_FILE).write_text(to_markdown(result) + "\n", encoding="utf-8")
    (out / GRADESCOPE_FILE).write_text(render(result, "gradescope") + "\n", encoding="utf-8")
