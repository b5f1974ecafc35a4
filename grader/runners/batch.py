"""Grade a folder of submissions in parallel, one row per student, whatever happens (the ``batch`` verb's work).

``SUBMISSIONS_DIR`` holds one entry per student: a folder (a copy of the course) or a ``.zip``; the
entry's name (without ``.zip``) is the student's id. Every entry gets a row: one the grader cannot read
(a ``.tar.gz``, a stray file) is a ``bad-submission`` whose reason says so. Each student is graded into
``OUT/<id>/`` by a *runner* (default :func:`grader.runners.local.grade_submission`), ``-j N`` at a time.
Threads are enough here: a runner spends its time waiting on the pytest processes it started, and each
submission's labs run in their own process groups, so students never share a process. They do share the cores:
with ``-j N`` each graded process gets ``cores // N`` PyTorch threads (:func:`share_cores`), since N pools of
every core each on one machine make PyTorch spin against itself (a test measured 200x slower).

``--container IMAGE`` swaps the runner for :class:`grader.runners.container.ContainerRunner`: each submission is
graded in its own container of the course image (network off, resource and wall-clock limits).

A runner that raises (a bug, a container that would not start) still produces the student's row: a
``summary.json`` with every lab at 0 and status ``grader-error``. ``OUT/batch.json`` lists every row.
The verb exits with status 1 when any submission has a ``grader-error`` (or ``unavailable``) lab: those
are the grader's failures, listed at the end with the ``--only`` option that regrades them.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from grader.course.labs import CourseError
from grader.runners.local import GradingSetup, grade_submission, printable, submission_id
from grader.runners.progress import Progress
from grader.scoring.feedback import write_grader_error_detail, write_outputs
from grader.scoring.results import SubmissionResult
from grader.scoring.score import grader_error_result

BATCH_FILE = "batch.json"
#: A per-submission runner: (submission path, output folder, setup, student id) -> result.
Runner = Callable[[Path, Path, GradingSetup, str], SubmissionResult]


@dataclass(frozen=True)
class BatchRow:
    """One student's line in ``batch.json``."""

    student: str
    score: int
    max_score: int
    pending: int
    statuses: dict[str, str]
    flags: int
    wall_s: float


def batch_row(student: str, result: SubmissionResult, wall_s: float) -> BatchRow:
    """The student's line of ``batch.json`` (also written by the Slurm runner, :mod:`grader.runners.slurm`)."""
    total = result.total
    return BatchRow(
        student,
        total["score"],
        total["max_score"],
        total["pending"],
        {lab.lab: lab.status for lab in result.labs},
        len(result.flags),
        round(wall_s, 2),
    )


def write_batch_index(out: Path, rows: list[BatchRow], *, keep_others: bool = False) -> Path:
    """Write ``out/batch.json``: ``rows``, and with ``keep_others`` (a regrade of some students, ``--only``)
    every row already there for another student, so the index still lists the whole class."""
    path = out / BATCH_FILE
    entries = [asdict(row) for row in rows]
    if keep_others:
        regraded = {row.student for row in rows}
        try:
            earlier = json.loads(path.read_text(encoding="utf-8")).get("rows", [])
        except (OSError, ValueError, AttributeError):
            earlier = []
        kept = [entry for entry in earlier if isinstance(entry, dict) and entry.get("student") not in regraded]
        entries = sorted(kept + entries, key=lambda entry: str(entry.get("student")))
    path.write_text(json.dumps({"rows": entries}, indent=1) + "\n", encoding="utf-8")
    return path


def select_students(submissions: list[tuple[str, Path]], only: list[str]) -> list[tuple[str, Path]]:
    """The submissions ``--only`` names: each value an id, or a comma-separated list of ids (a value that
    is itself an id, commas and all, is that id)."""
    ids = {student for student, _ in submissions}
    wanted = {part for value in only for part in ([value] if value in ids else value.split(","))}
    return [(student, path) for student, path in submissions if student in wanted]


def only_options(students: list[str]) -> str:
    """The ``--only`` options that select ``students`` again, quoted for a POSIX shell (an id may hold a
    space, a comma or start with ``-``)."""
    return " ".join(f"--only={shlex.quote(student)}" for student in students)


#: Entries of a submissions folder that are never a student: what unzipping a class archive on a Mac or
#: running Python inside the folder leaves. Every other entry is a student, whatever its name: a student
#: folder called ``build`` or ``results`` gets its row like any other.
NOT_STUDENTS = frozenset({"__MACOSX", "__pycache__"})
#: Names the batch writes at the top of ``OUT`` itself: a student of one of these names is graded into
#: ``OUT/<name>-submission`` instead.
RESERVED_IDS = frozenset({BATCH_FILE})


def discover_submissions(folder: Path, *, out: Path | None = None) -> list[tuple[str, Path]]:
    """(student id, path) for every entry directly inside ``folder`` (hidden files, :data:`NOT_STUDENTS`
    and the output folder ``out``, when it lies inside, aside), sorted by id: folders and ``.zip`` files
    are graded; any other file still gets its row, a ``bad-submission`` saying what it is (``cannot
    read .tar.gz archives; submit a folder or a .zip``). Ids are :func:`~grader.runners.local.printable`
    and unique: two entries with one id (``alice/`` and ``alice.zip``) keep their full names, so neither
    row is lost, and an id the batch's own files use (:data:`RESERVED_IDS`) gets a suffix.

    Raises:
        CourseError: when ``folder`` is not a folder.
    """
    if not folder.is_dir():
        raise CourseError(f"{folder} is not a folder of submissions")
    output = out.resolve() if out is not None else None
    paths = [
        path
        for path in sorted(folder.iterdir())
        if not path.name.startswith(".") and path.name not in NOT_STUDENTS and path.resolve() != output
    ]
    ids = [submission_id(path) for path in paths]
    entries, taken = [], set()
    for student, path in zip(ids, paths):
        student = student if ids.count(student) == 1 else printable(path.name)
        if student in RESERVED_IDS:
            student += "-submission"
        while student in taken:
            student += "_"
        taken.add(student)
        entries.append((student, path))
    return sorted(entries)


def _failed_runner_result(setup: GradingSetup, student: str, out: Path, error: BaseException) -> SubmissionResult:
    result = grader_error_result(setup.rubric, error, submission=student, gpu=setup.options.gpu)
    write_grader_error_detail(out, error)
    try:
        write_outputs(result, out)
    except OSError:
        pass  # the row in batch.json still records it
    return result


def grade_one(
    student: str, path: Path, out: Path, setup: GradingSetup, runner: Runner
) -> tuple[SubmissionResult, float]:
    """Run ``runner`` for one student; any exception becomes a ``grader-error`` result, and so does a
    submission that was listed but is gone when graded (someone moved the folder during the batch:
    not the student's doing)."""
    start = time.monotonic()
    try:
        result = runner(path, out / student, setup, student)
        if not os.path.lexists(path):
            raise FileNotFoundError(f"{path.name} left the submissions folder while the batch was grading it")
    except Exception as error:  # noqa: BLE001 - one broken submission never stops the batch
        result = _failed_runner_result(setup, student, out / student, error)
    return result, time.monotonic() - start


def share_cores(setup: GradingSetup, jobs: int) -> GradingSetup:
    """``setup`` with PyTorch's threads per graded process sized for ``jobs`` submissions at once.

    Each process gets ``cores // jobs`` threads (at least 1), the cores being those this process may
    run on. An explicit choice is left alone: ``setup.options.threads``, or ``OMP_NUM_THREADS`` in the
    environment (which graded processes inherit).
    """
    if jobs <= 1 or setup.options.threads is not None or "OMP_NUM_THREADS" in os.environ:
        return setup
    return replace(setup, options=replace(setup.options, threads=max(1, usable_cores() // jobs)))


def usable_cores() -> int:
    """The cores this process may run on (its affinity, e.g. a Slurm allocation or a container's CPUs)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def jobs_note(jobs: int) -> str | None:
    """What to tell the user when ``-j`` puts more graded processes on the machine than it has cores."""
    cores = usable_cores()
    if jobs <= cores:
        return None
    return (
        f"note: -j {jobs} on {cores} cores: graded processes will share cores. Scores do not change (time "
        f"limits count CPU time, not the wall clock), but grading is no faster than with -j {cores}"
    )


def row_line(row: BatchRow) -> str:
    """One finished student, as the progress lines and the final listing say it."""
    statuses = " ".join(f"{lab}={status}" for lab, status in row.statuses.items())
    flags = f" flags={row.flags}" if row.flags else ""
    return f"{row.student}: {row.score}/{row.max_score} (+{row.pending} pending) {statuses}{flags} ({row.wall_s:.0f} s)"


def grade_all(
    submissions: list[tuple[str, Path]],
    out: Path,
    setup: GradingSetup,
    *,
    jobs: int = 1,
    runner: Runner = grade_submission,
    show_progress: bool = True,
    keep_other_rows: bool = False,
) -> list[BatchRow]:
    """Grade every submission into ``out/<student>/``, ``jobs`` at a time; write ``out/batch.json``.

    With ``show_progress``, a bar on a terminal, else a line per finished student and a heartbeat
    every minute (:mod:`grader.runners.progress`).

    Returns:
        One row per submission, in the order of ``submissions``.
    """
    out.mkdir(parents=True, exist_ok=True)
    setup = share_cores(setup, jobs)
    rows: dict[str, BatchRow] = {}
    progress = Progress(
        len(submissions), stream=None if show_progress else io.StringIO(), interactive=None if show_progress else False
    )

    def graded(student: str, path: Path) -> tuple[SubmissionResult, float]:
        progress.started()
        return grade_one(student, path, out, setup, runner)

    with progress, ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(graded, student, path): student for student, path in submissions}
        waiting = set(futures)
        while waiting:
            done, waiting = wait(waiting, timeout=5.0, return_when=FIRST_COMPLETED)
            for future in done:
                student = futures[future]
                result, wall = future.result()
                rows[student] = batch_row(student, result, wall)
                progress.finished(row_line(rows[student]))
            progress.tick()
    ordered = [rows[student] for student, _ in submissions]
    write_batch_index(out, ordered, keep_others=keep_other_rows)
    return ordered
