"""Turn a scored result into what people read: Markdown feedback, JSON, Gradescope's ``results.json``.

All renderers are pure functions of a :class:`~grader.scoring.results.SubmissionResult`.

Gradescope's contract: ``{"score", "output", "tests": [{"name", "score", "max_score", "status",
"output", "visibility"}]}``. Gradescope has no "pending": a pending GPU test is listed with score 0,
its full ``max_score`` and an output saying it is graded on a GPU later; the top-level ``score`` is
the grader's total, so nothing is counted twice.

Held-out tests: every renderer shows visible and held-out points separately. The student's page
(``feedback.md``) lists held-out results by *area* only (points and whether they passed, never the
cases or their messages); Gradescope gets every case with its own ``visibility`` (``hidden``,
``after_due_date``), so Gradescope decides when a student sees it, but never its message (only its
outcome), and the top-level output names the held-out areas that lost points.

An optional extension step (its tests marked ``extension``) is shown apart wherever a score is: its
own section of ``feedback.md``, ``extension`` beside a lab's score, ``extension (optional)`` in a
Gradescope case's name. Every student-facing output names the step to work on next exactly as
``nox -s labNN`` does (:func:`labkit.step_summary.start_here`: the first unfinished step of the
handout, held-out tests left out), and its messages name no path of the grader's machine and are
cut at a sentence or clause (:mod:`grader.scoring.student_text`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grader.evidence.layout import FEEDBACK_FILE, GRADESCOPE_FILE, SUMMARY_FILE
from grader.scoring.results import EVIDENCE_PASSED, PASSED, PENDING, LabResult, Points, SubmissionResult, TestResult
from grader.scoring.score import GRADER_ERROR_FILE, grader_error_detail
from grader.scoring.student_text import course_relative, student_message
from labkit import step_summary

FENCE = "`" * 3  # a Markdown code fence
OUTCOME_ICONS = {
    PASSED: "✅",
    PENDING: "⏳",
    "failed": "❌",
    "error": "❌",
    "timeout": "⏱",
    "crashed": "💥",
    "not-run": "·",
    "skipped": "·",
    "void": "⛔",
}


def _points(score: int, max_score: int, pending: int) -> str:
    return f"{score}/{max_score}" + (f" (+{pending} pending GPU)" if pending else "")


def _split(visible: Points, heldout: Points) -> str:
    """``visible 9/9 · held-out 2/6`` (empty when there are no held-out tests)."""
    if not heldout.max_score:
        return ""
    return (
        f"visible {_points(visible.score, visible.max_score, visible.pending)} · "
        f"held-out {_points(heldout.score, heldout.max_score, heldout.pending)}"
    )


def _extension(points: Points) -> str:
    """`` · extension 4/12`` (empty without an extension step): an optional step's points, apart."""
    if not points.max_score:
        return ""
    return f" · extension {_points(points.score, points.max_score, points.pending)}"


def summary_line(result: SubmissionResult) -> str:
    """``alice: 13/22 (+3 pending GPU) [visible 13/16 · held-out 0/6] · labA 9/15 graded · labB 4/7 graded``.

    A lab with an optional extension step adds its points apart: ``labA 9/15 graded · extension 2/4``.
    """
    total = result.total
    split = _split(Points(**total["visible"]), Points(**total["heldout"]))
    labs = " · ".join(
        f"{lab.lab} {lab.score}/{lab.max_score} {lab.status}{_extension(lab.extension)}" for lab in result.labs
    )
    return (
        f"{result.submission}: {_points(total['score'], total['max_score'], total['pending'])}"
        + (f" [{split}]" if split else "")
        + f" · {labs}"
    )


def heldout_areas(lab: LabResult) -> list[tuple[str, Points, str]]:
    """Held-out results by area, in test order: ``(area, points, verdict)``; the cases stay unnamed.

    The verdict is ``passed``, ``pending`` (GPU), or ``lost points`` when any case earned nothing.
    """
    areas: dict[str, list[TestResult]] = {}
    for test in lab.tests:
        if test.heldout:
            areas.setdefault(test.area or "other held-out tests", []).append(test)
    rows = []
    for area, tests in areas.items():
        outcomes = {test.outcome for test in tests}
        verdict = "passed" if outcomes == {PASSED} else "pending" if outcomes <= {PASSED, PENDING} else "lost points"
        rows.append((area, Points.of(tests), verdict))
    return rows


def areas_that_lost_points(lab: LabResult) -> list[str]:
    """The held-out areas of ``lab`` in which some case earned nothing (what a student should revisit)."""
    return [area for area, _, verdict in heldout_areas(lab) if verdict == "lost points"]


def _md_cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _function(test: TestResult) -> str:
    """The test function's name, without a parametrized case's ``[...]`` (what ``lab.toml`` steps list)."""
    return test.nodeid.split("::")[-1].split("[", 1)[0]


def step_scores(lab: LabResult) -> list[step_summary.StepScore]:
    """The lab's visible tests grouped by handout step, as ``nox -s labNN`` groups them (held-out ones left out)."""
    outcomes = {PASSED: step_summary.PASSED, PENDING: step_summary.PENDING, "skipped": step_summary.SKIPPED}
    return step_summary.score_handout_steps(
        lab.steps,
        [
            step_summary.TestOutcome(
                test.nodeid,
                _function(test),
                test.max_points,
                outcomes.get(test.outcome, step_summary.FAILED),
                test.message,
            )
            for test in lab.tests
            if not test.heldout
        ],
    )


def next_step(lab: LabResult) -> list[str]:
    """What to work on next in ``lab``: ``nox -s labNN``'s own closing lines (empty for a lab without tests)."""
    return step_summary.start_here(lab.lab, step_scores(lab)) if any(not t.heldout for t in lab.tests) else []


def _step_numbers(lab: LabResult) -> dict[str, str]:
    """Each test function's handout step and the files it edits (``5 · linear_gelu.py``): every row of the
    table names the student's file, whatever its test's message says."""
    return {
        _function(test): f"{step.number} · {', '.join(step.files)}"
        for step in lab.steps
        for test in lab.tests
        if _function(test) in step.tests
    }


def _test_table(lab: LabResult, tests: list[TestResult]) -> list[str]:
    packages = [lab.package]
    steps = _step_numbers(lab)
    rows = ["| | step | test | points | outcome | why |", "|---|---|---|---|---|---|"]
    for test in tests:
        name = test.nodeid.split("::", 1)[-1]
        rows.append(
            f"| {OUTCOME_ICONS.get(test.outcome, '')} | {steps.get(_function(test), '-')} | `{name}` "
            f"| {test.points}/{test.max_points} | {test.outcome} "
            f"| {_md_cell(student_message(test.message, packages))} |"
        )
    return [*rows, ""]


def lab_markdown(lab: LabResult) -> list[str]:
    """One lab's section: score, reason, the test table, the talking-point checklist."""
    split = _split(lab.visible, lab.heldout)
    extension = (
        f" · optional extension step: {_points(lab.extension.score, lab.extension.max_score, lab.extension.pending)}"
        " (apart from the score)"
        if lab.extension.max_score
        else ""
    )
    lines = [
        f"## {lab.lab}: {lab.title}",
        "",
        f"**{_points(lab.score, lab.max_score, lab.pending)}**"
        + (f" ({split})" if split else "")
        + f" · status: `{lab.status}`{extension}",
        "",
    ]
    if lab.reason:
        first, _, rest = course_relative(lab.reason, [lab.package]).strip().partition("\n")
        lines += [f"> {_md_cell(first)}", ""]
        if rest.strip():  # a traceback or pytest's output: kept readable, as it was printed
            kept = "\n".join(rest.strip().splitlines()[-60:]).replace(FENCE, "'" * 3)
            lines += [FENCE, kept, FENCE, ""]
    upcoming = next_step(lab)
    if upcoming:
        lines += [
            "**Next:** " + upcoming[0].removeprefix("Start here: "),
            *(f"{line.strip()}" for line in upcoming[1:]),
            "",
        ]
    scored = [test for test in lab.tests if not test.heldout and not test.extension]
    if scored:
        lines += _test_table(lab, scored)
    areas = heldout_areas(lab)
    if areas:
        lines += [
            "**Held-out tests** (cases you have not seen, graded like yours; listed by area):",
            "",
            "| | area | points | result |",
            "|---|---|---|---|",
        ]
        icons = {"passed": OUTCOME_ICONS[PASSED], "pending": OUTCOME_ICONS[PENDING], "lost points": "❌"}
        for area, points, verdict in areas:
            lines.append(
                f"| {icons[verdict]} | {_md_cell(area)} | {_points(points.score, points.max_score, points.pending)} "
                f"| {verdict} |"
            )
        lines.append("")
    extension = [test for test in lab.tests if test.extension and not test.heldout]
    if extension:
        points = lab.extension
        lines += [
            f"### Optional extension step: {_points(points.score, points.max_score, points.pending)}, "
            "apart from the score",
            "",
            "These tests grade an optional step: their points are not in the lab's score or maximum, "
            "so skipping it costs nothing.",
            "",
        ]
        lines += _test_table(lab, extension)
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
    split = _split(Points(**total["visible"]), Points(**total["heldout"]))
    lines = [
        f"# Grade report: {result.submission}",
        "",
        f"**Total: {_points(total['score'], total['max_score'], total['pending'])}**"
        + (f" ({split})" if split else "")
        + f" (GPU mode: {result.gpu})",
        "",
    ]
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
            tests.append(
                {
                    "name": f"{lab.lab}: {lab.title}",
                    "score": 0,
                    "max_score": lab.max_score,
                    "status": "failed",
                    "output": course_relative(lab.reason, [lab.package]) or lab.status,
                    "visibility": "visible",
                }
            )
        steps = _step_numbers(lab)
        for test in lab.tests:
            output = course_relative(test.message, [lab.package])
            if test.outcome == PENDING:
                output = "pending: needs a CUDA GPU; graded separately on a GPU machine"
            elif test.heldout:  # a held-out case's message can quote its source: the outcome only
                output = test.outcome if test.outcome != PASSED else ""
            elif lab.status not in ("graded",) and test.outcome != PASSED:
                output = f"{test.outcome}: {output} [{lab.status}: {course_relative(lab.reason, [lab.package])}]"
            name = test.nodeid.split("::", 1)[-1]
            step = "" if test.heldout or _function(test) not in steps else f"step {steps[_function(test)]} · "
            kind = f"held-out · {test.area} · " if test.heldout else "extension (optional) · " if test.extension else ""
            kind += step
            tests.append(
                {
                    "name": f"{lab.lab} · {kind}{name}",
                    "score": test.points,
                    "max_score": test.max_points,
                    "status": "passed" if test.outcome == PASSED else "failed",
                    "output": output,
                    "visibility": test.visibility,
                }
            )
    total = result.total
    flags = "".join(f"\nFLAG: {flag}" for flag in result.flags)
    lost = "".join(
        f"\n{lab.lab}: held-out areas that lost points: {'; '.join(areas)}"
        for lab in result.labs
        if (areas := areas_that_lost_points(lab))
    )
    upcoming = "".join(
        f"\n{lab.lab}: " + " ".join(line.strip() for line in lines) for lab in result.labs if (lines := next_step(lab))
    )
    return {
        "score": total["score"],
        "output": summary_line(result) + upcoming + lost + flags,
        "stdout_visibility": "visible",
        "tests": tests,
        "extra_data": {
            "pending": total["pending"],
            "max_score": total["max_score"],
            "visible": total["visible"],
            "heldout": total["heldout"],
            "extension": total["extension"],
        },
    }


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


def write_grader_error_detail(out: Path, error: BaseException) -> None:
    """Keep a grader-error's traceback for the instructor, in ``out/grader-error.txt`` (see
    :func:`grader.scoring.score.grader_error_result`; a folder it cannot be written to loses only it)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / GRADER_ERROR_FILE).write_text(grader_error_detail(error), encoding="utf-8")
    except OSError:
        pass  # the result itself still says a grader error happened


def write_outputs(result: SubmissionResult, out: Path) -> None:
    """Write ``summary.json``, ``feedback.md`` and Gradescope's ``results.json`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY_FILE).write_text(render(result, "json") + "\n", encoding="utf-8")
    (out / FEEDBACK_FILE).write_text(to_markdown(result) + "\n", encoding="utf-8")
    (out / GRADESCOPE_FILE).write_text(render(result, "gradescope") + "\n", encoding="utf-8")
