"""Grade one submission on this machine, always leaving a result behind (the ``run`` verb's work).

``grade_submission`` is the per-submission runner that ``batch`` calls for every student. It never
raises: a submission that cannot be read, a sandbox that cannot be built, even a bug in the grader,
all end in a ``summary.json`` whose labs score 0 with the reason (Gradescope's rule: a results file is
always written). Runners with the same signature (e.g. one running each submission in a container)
can replace it in :func:`grader.runners.batch.grade_all`.

Flow: unpack -> sandbox (pristine course + editable files + canary) -> one pytest process per lab
(:mod:`grader.execute.supervisor`) -> score the saved artifacts (:func:`grader.scoring.score.rescore`, so the first score
and any regrade are the same computation) -> ``summary.json``, ``feedback.md``, ``results.json``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from grader.course.labs import Course
from grader.course.rubric import Rubric
from grader.evidence.layout import RAW_DIR, RUBRIC_FILE, write_submission_meta
from grader.execute.limits import RunLimits
from grader.execute.sandbox import SubmissionError, build_sandbox, new_canary_name, unpack_submission
from grader.execute.supervisor import run_lab
from grader.scoring.feedback import write_outputs
from grader.scoring.results import GRADER_ERROR, SubmissionResult
from grader.scoring.score import grader_error_result, rescore
from labkit.labspec import LabSpec


@dataclass(frozen=True)
class GradeOptions:
    """How submissions are graded (the same for every student of a batch).

    Attributes:
        gpu: ``auto`` (GPU tests run where CUDA exists, else pending), ``off`` (hide CUDA: all GPU
            tests pending), ``on`` (a GPU is promised: a skipped GPU test fails).
        limits: per-test and per-lab time limits, output caps.
        python: the interpreter that runs pytest (the course environment's).
        keep_sandbox: keep the sandbox under ``OUT/sandbox`` for debugging.
        threads: PyTorch's threads in each graded process (``OMP_NUM_THREADS`` and
            ``TORCHINDUCTOR_COMPILE_THREADS``); ``None`` leaves the environment's or PyTorch's default.
            Submissions graded side by side must share the cores: each process's default pool is
            every core, and two such pools on one machine's cores make a test up to 200x slower.
    """

    gpu: str = "auto"
    limits: RunLimits = field(default_factory=RunLimits)
    python: str = sys.executable
    keep_sandbox: bool = False
    threads: int | None = None


@dataclass(frozen=True)
class GradingSetup:
    """What every submission of a run or batch is graded against."""

    course: Course
    labs: list[LabSpec]
    rubric: Rubric
    options: GradeOptions


def _meta(out: Path, **fields) -> None:
    write_submission_meta(out, fields)


def _run_labs(setup: GradingSetup, folder: Path, out: Path, scratch: Path, name: str,
              only_labs: Collection[str] | None) -> None:
    options = setup.options
    canary = new_canary_name()
    counts = {lab.lab: len(lab.tests) + 1 for lab in setup.rubric.labs}
    sandbox = scratch / "course"
    overlay = build_sandbox(setup.course, setup.labs, folder, sandbox, canary=canary, canary_counts=counts)
    _meta(out, submission=name, gpu=options.gpu, flags=overlay.flags, notes=overlay.notes, taken=overlay.taken,
          canary=canary)
    for lab in setup.rubric.labs:
        if lab.error is None and (only_labs is None or lab.lab in only_labs):
            run_lab(sandbox, lab, out / RAW_DIR / lab.lab, canary=canary, gpu=options.gpu, limits=options.limits,
                    python=options.python, threads=options.threads)
    if options.keep_sandbox:
        shutil.copytree(sandbox, out / "sandbox", dirs_exist_ok=True)


def grade_submission(submission: Path, out: Path, setup: GradingSetup, name: str | None = None, *,
                     only_labs: Collection[str] | None = None) -> SubmissionResult:
    """Grade ``submission`` (a folder or ``.zip``) into ``out``; never raises (see the module docstring).

    ``only_labs`` (lab ids) runs just those labs and keeps the other labs' runs already in ``out``: a
    cluster grades a submission's CPU labs and its GPU labs in two tasks (:mod:`grader.runners.slurm`).
    """
    name = name or submission.resolve().name.removesuffix(".zip")
    out.mkdir(parents=True, exist_ok=True)
    _clear_runs(out, only_labs)
    setup.rubric.write(out / RUBRIC_FILE)
    try:
        with tempfile.TemporaryDirectory(prefix="grader-") as scratch:
            folder = unpack_submission(submission, Path(scratch))
            _run_labs(setup, folder, out, Path(scratch), name, only_labs)
        result = rescore(out)
    except SubmissionError as error:
        _meta(out, submission=name, gpu=setup.options.gpu, flags=[str(error)], not_run_reason=str(error),
              not_run_status="not-run")
        result = rescore(out)
    except Exception as error:  # noqa: BLE001 - the grader's own bug must still leave a row
        result = grader_error_result(setup.rubric, error, submission=name, gpu=setup.options.gpu)
        _meta(out, submission=name, gpu=setup.options.gpu, flags=list(result.flags), notes=list(result.notes),
              not_run_reason=result.flags[0], not_run_status=GRADER_ERROR)
        _clear_runs(out, only_labs)
        if only_labs is not None:
            try:  # the other labs' runs (graded by another task) keep their scores
                result = rescore(out)
            except Exception:  # noqa: BLE001 - even unreadable files must not lose the row
                pass
    write_outputs(result, out)
    return result


def _clear_runs(out: Path, only_labs: Collection[str] | None) -> None:
    """Remove the raw runs this grading replaces (all of them, or those of ``only_labs``)."""
    for stale in ([out / RAW_DIR] if only_labs is None else [out / RAW_DIR / lab for lab in only_labs]):
        shutil.rmtree(stale, ignore_errors=True)


# ---------------------------------------------------------------- options shared by the grading verbs


