"""Grade one submission on this machine, always leaving a result behind (the ``run`` verb's work).

``grade_submission`` is the per-submission runner that ``batch`` calls for every student. It never
raises: a submission that cannot be read, a sandbox that cannot be built, even a bug in the grader,
all end in a ``summary.json`` whose labs score 0 with the reason (Gradescope's rule: a results file is
always written). Runners with the same signature (e.g. one running each submission in a container)
can replace it in :func:`grader.runners.batch.grade_all`.

Flow: unpack -> sandbox (pristine course + editable files) -> per lab, its visible tests' process and
then its held-out tests' process, each isolated (:mod:`grader.execute.supervisor`,
:mod:`grader.execute.isolation`) -> score what the supervisor recorded
(:func:`grader.scoring.score.rescore`, so the first score and any regrade are the same computation)
-> ``summary.json``, ``feedback.md``, ``results.json``. Graded code never sees ``out``: the supervisor
writes every file there, after the graded processes are gone.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from grader.course.labs import Course
from grader.course.rubric import Rubric
from grader.evidence.layout import RAW_DIR, RUBRIC_FILE, SUBMITTED_DIR, keep_submitted, write_submission_meta
from grader.execute.archive import OTHER_ARCHIVES
from grader.execute.collect import build_rubric
from grader.execute.isolation import Isolation
from grader.execute.limits import RunLimits
from grader.execute.review import review_files
from grader.execute.sandbox import SubmissionError, build_sandbox, unpack_submission
from grader.execute.supervisor import lab_parts, part_raw_dir, run_lab
from grader.scoring.feedback import write_grader_error_detail, write_outputs
from grader.scoring.results import BAD_SUBMISSION, GRADER_ERROR, SubmissionResult
from grader.scoring.score import GRADER_ERROR_FILE, grader_error_result, rescore
from labkit.labspec import HELDOUT_DIR, LabSpec


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
        isolation: how graded processes are isolated (:func:`grader.execute.isolation.choose_isolation`);
            None: chosen for the course when a submission is graded.
        cold_caches: turn the compilers' caches off (``selfcheck --record-times``: the reference's times
            are every compile's from scratch, so limits hold however warm a graded run's caches are).
    """

    gpu: str = "auto"
    limits: RunLimits = field(default_factory=RunLimits)
    python: str = sys.executable
    keep_sandbox: bool = False
    threads: int | None = None
    isolation: Isolation | None = None
    cold_caches: bool = False


@dataclass(frozen=True)
class GradingSetup:
    """What every submission of a run or batch is graded against: made once per grading, by
    :meth:`for_course` (or, with a rubric made elsewhere, such as a Slurm plan's, directly)."""

    course: Course
    labs: list[LabSpec]
    rubric: Rubric
    options: GradeOptions

    @classmethod
    def for_course(
        cls,
        course: Course,
        options: GradeOptions,
        lab_ids: list[str] | None = None,
        cache_dir: Path | None = None,
        log=lambda line: print(line, file=sys.stderr),
    ) -> GradingSetup:
        """The setup for ``lab_ids`` of ``course`` (every ready lab when None): those labs and their
        pristine rubric, collected with ``options.python`` (or read from ``cache_dir``, None: no cache)."""
        labs = course.select(lab_ids)
        return cls(course, labs, build_rubric(course, labs, cache_dir, options.python, log=log), options)


def _meta(out: Path, **fields) -> None:
    write_submission_meta(out, fields)


#: What a student reads when their copy was graded without isolation.
UNISOLATED_NOTE = (
    "graded without isolation: the tests ran with the grading user's files, network and "
    "environment (no bubblewrap here)"
)


def isolation_of(setup: GradingSetup) -> Isolation:
    """The isolation this grading uses: the one chosen, else the course's default (see
    :mod:`grader.execute.isolation`)."""
    from grader.execute.isolation import choose_isolation

    if setup.options.isolation is not None:
        return setup.options.isolation
    return choose_isolation(
        setup.options.python, setup.course.root, instructor_course=setup.course.holds_instructor_material, unsafe=False
    )


def _run_labs(
    setup: GradingSetup, folder: Path, out: Path, scratch: Path, name: str, only_labs: Collection[str] | None
) -> None:
    options = setup.options
    isolation = isolation_of(setup)
    sandbox = scratch / "course"
    overlay = build_sandbox(setup.course, setup.labs, folder, sandbox)
    notes = [*overlay.notes, *([UNISOLATED_NOTE] if isolation.name == "none" else [])]
    reviewed = [
        flag
        for spec in setup.labs
        for flag in review_files(
            sandbox, [rel for rel in overlay.taken if rel.split("/", 1)[0] == spec.package], label=spec.id
        )
    ]
    _meta(
        out,
        submission=name,
        gpu=options.gpu,
        flags=[*overlay.flags, *reviewed],
        notes=notes,
        taken=overlay.taken,
        isolation=isolation.name,
    )
    # The graded editable files, for the class report's similarity check (a cluster task keeps its own labs').
    packages = {lab.package for lab in setup.rubric.labs if only_labs is None or lab.lab in only_labs}
    keep_submitted(sandbox, [rel for rel in overlay.taken if rel.split("/", 1)[0] in packages], out)
    heldout_dirs = [
        sandbox / spec.package / HELDOUT_DIR
        for spec in setup.course.labs
        if (sandbox / spec.package / HELDOUT_DIR).is_dir()
    ]
    for lab in setup.rubric.labs:
        if lab.error is None and (only_labs is None or lab.lab in only_labs):
            for part in lab_parts(lab, sandbox, heldout_dirs):
                run_lab(
                    sandbox,
                    part,
                    part_raw_dir(out / RAW_DIR / lab.lab, part),
                    gpu=options.gpu,
                    limits=options.limits,
                    state=scratch / "state",
                    isolation=isolation,
                    python=options.python,
                    threads=options.threads,
                    cold_caches=options.cold_caches,
                )
    if options.keep_sandbox:
        shutil.copytree(sandbox, out / "sandbox", symlinks=True, dirs_exist_ok=True)  # a link is copied, never followed


def own_grader_problem(submission: Path) -> str | None:
    """Why this grading must not go ahead (None when it may): part of the grader came from the submission.

    ``python -m grader`` puts the working directory first on ``sys.path``: run from inside a student's
    copy, it would import that copy's ``grader`` (which could print any score) or its ``labkit`` (whose
    course root, the default ``--course``, is then the student's copy with its own tests). The course
    environment pins the installed grader and harness (:mod:`grader.pin`); this catches interpreters
    without the pin, where one of the two came from the submission and the other did not. A student
    grading their own copy (``nox -s grade-me``) has both from it, which is allowed: nothing is graded
    against material they do not hold.
    """
    import grader
    import labkit

    submission = submission.resolve()
    homes = {module.__name__: Path(module.__file__).resolve().parent for module in (grader, labkit)}
    inside = {name for name, home in homes.items() if home == submission or submission in home.parents}
    if len(inside) != 1:
        return None
    (name,) = inside
    return (
        f"`{name}` was imported from inside the submission ({homes[name]}), the rest of the grader from "
        "elsewhere: a submission must never be graded by or against its own files. Run the course's grader "
        "from outside the submission (cd elsewhere, or `.nox/course-env/bin/python -m grader` from the course)"
    )


#: Longest student id, in bytes (file names may have 255; ``<id>-submission`` and the like must fit).
MAX_ID_BYTES = 200


def submission_id(submission: Path) -> str:
    """The student's id a submission's name gives: its name without ``.zip`` (or another archive suffix),
    made :func:`printable`."""
    name = submission.resolve().name
    for suffix in (".zip", *OTHER_ARCHIVES):
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return printable(name[: -len(suffix)])
    return printable(name)


def printable(name: str) -> str:
    """``name`` as a student id: in Unicode's composed form (NFC: a Mac writes ``José`` decomposed, a
    roster composed), every control or unprintable character written as its escape (``\\x1b``, ``\\n``
    as ``\\x0a``; bytes of a name that is not UTF-8 too), and at most :data:`MAX_ID_BYTES` long (a
    longer one keeps its start and gets a digest of the whole). A folder's name is the student's input:
    one holding a terminal's escape sequence or a newline would otherwise repaint the instructor's
    terminal or split a row of the class report, and one longer than a file name may be would leave the
    student without a graded folder. Letters of any script are kept; distinct names stay distinct."""
    name = unicodedata.normalize("NFC", name)
    text = "".join(char if char == " " or unicodedata.category(char)[0] not in "CZ" else _escape(char) for char in name)
    if len(text.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    head = text.encode("utf-8", "surrogatepass")[: MAX_ID_BYTES - 13].decode("utf-8", "ignore")
    return f"{head}-{digest}"


def _escape(char: str) -> str:
    return f"\\x{ord(char):02x}" if ord(char) < 256 else f"\\u{ord(char):04x}"


def grade_submission(
    submission: Path,
    out: Path,
    setup: GradingSetup,
    name: str | None = None,
    *,
    only_labs: Collection[str] | None = None,
) -> SubmissionResult:
    """Grade ``submission`` (a folder or ``.zip``) into ``out``; never raises (see the module docstring).

    ``only_labs`` (lab ids) runs just those labs and keeps the other labs' runs already in ``out``: a
    cluster grades a submission's CPU labs and its GPU labs in two tasks (:mod:`grader.runners.slurm`).
    """
    name = name or submission_id(submission)
    out.mkdir(parents=True, exist_ok=True)
    _clear_runs(out, only_labs)
    setup.rubric.write(out / RUBRIC_FILE)
    try:
        # Cleaning up never fails the grading: what graded code left there is removed without following links.
        with tempfile.TemporaryDirectory(prefix="grader-", ignore_cleanup_errors=True) as scratch:
            folder = unpack_submission(submission, Path(scratch), setup.course.lab_packages)
            _run_labs(setup, folder, out, Path(scratch), name, only_labs)
        result = rescore(out)
    except SubmissionError as error:
        _meta(
            out,
            submission=name,
            gpu=setup.options.gpu,
            flags=[str(error)],
            not_run_reason=str(error),
            not_run_status=BAD_SUBMISSION,
        )
        result = rescore(out)
    except Exception as error:  # noqa: BLE001 - the grader's own bug must still leave a row
        result = grader_error_result(setup.rubric, error, submission=name, gpu=setup.options.gpu)
        _meta(
            out,
            submission=name,
            gpu=setup.options.gpu,
            flags=list(result.flags),
            notes=list(result.notes),
            not_run_reason=result.flags[0],
            not_run_status=GRADER_ERROR,
        )
        _clear_runs(out, only_labs)
        write_grader_error_detail(out, error)
        if only_labs is not None:
            try:  # the other labs' runs (graded by another task) keep their scores
                result = rescore(out)
            except Exception:  # noqa: BLE001 - even unreadable files must not lose the row
                pass
    write_outputs(result, out)
    return result


def _clear_runs(out: Path, only_labs: Collection[str] | None) -> None:
    """Remove the raw runs this grading replaces (all of them, or those of ``only_labs``)."""
    stale_paths = (
        [out / RAW_DIR, out / SUBMITTED_DIR, out / GRADER_ERROR_FILE]
        if only_labs is None
        else [out / RAW_DIR / lab for lab in only_labs]
    )
    for stale in stale_paths:
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


# ---------------------------------------------------------------- options shared by the grading verbs
