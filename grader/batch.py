"""The ``batch`` verb: grade a folder of submissions in parallel, one row per student, whatever happens.

``SUBMISSIONS_DIR`` holds one entry per student: a folder (a copy of the course) or a ``.zip``; the
entry's name (without ``.zip``) is the student's id. Each student is graded into ``OUT/<id>/`` by a
*runner* (default :func:`grader.run.grade_submission`), ``-j N`` at a time. Threads are enough here:
a runner spends its time waiting on the pytest processes it started, and each submission's labs run in
their own process groups, so students never share a process. They do share the cores: with ``-j N``
each graded process gets ``cores // N`` PyTorch threads (:func:`share_cores`), since N pools of
every core each on one machine make PyTorch spin against itself (a test measured 200x slower).

``--container IMAGE`` swaps the runner for :class:`grader.container.ContainerRunner`: each submission is
graded in its own container of the course image (network off, resource and wall-clock limits).

A runner that raises (a bug, a container that would not start) still produces the student's row: a
``summary.json`` with every lab at 0 and status ``grader-error``. ``OUT/batch.json`` lists every row.
The verb exits with status 1 when any submission has a ``grader-error`` (or ``unavailable``) lab: those
are the grader's failures, listed at the end with the ``--only`` option that regrades them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from grader.container import ContainerError, add_container_options, runner_from_args
from grader.course import CourseError, is_noise
from grader.feedback import write_outputs
from grader.preflight import GraderEnvironmentError, check_output_folder
from grader.results import EXIT_GRADER_FAULT, EXIT_OK, EXIT_USAGE, GRADER_FAULTS, SubmissionResult
from grader.run import GradingSetup, add_course_options, grade_submission, prepare
from grader.score import grader_error_result

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
    """The student's line of ``batch.json`` (also written by the Slurm runner, :mod:`grader.slurm_runner`)."""
    total = result.total
    return BatchRow(student, total["score"], total["max_score"], total["pending"],
                    {lab.lab: lab.status for lab in result.labs}, len(result.flags), round(wall_s, 2))


def write_batch_index(out: Path, rows: list[BatchRow]) -> Path:
    path = out / BATCH_FILE
    path.write_text(json.dumps({"rows": [asdict(row) for row in rows]}, indent=1) + "\n", encoding="utf-8")
    return path


def discover_submissions(folder: Path) -> list[tuple[str, Path]]:
    """(student id, path) for every folder or ``.zip`` directly inside ``folder``, sorted by id.

    Raises:
        CourseError: when ``folder`` is not a folder.
    """
    if not folder.is_dir():
        raise CourseError(f"{folder} is not a folder of submissions")
    entries = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or is_noise(path):
            continue
        if path.is_dir() or path.suffix == ".zip":
            entries.append((path.name.removesuffix(".zip"), path))
    return entries


def _failed_runner_result(setup: GradingSetup, student: str, out: Path, error: BaseException) -> SubmissionResult:
    result = grader_error_result(setup.rubric, error, submission=student, gpu=setup.options.gpu)
    try:
        write_outputs(result, out)
    except OSError:
        pass  # the row in batch.json still records it
    return result


def grade_one(student: str, path: Path, out: Path, setup: GradingSetup, runner: Runner) -> tuple[SubmissionResult, float]:
    """Run ``runner`` for one student; any exception becomes a ``grader-error`` result."""
    start = time.monotonic()
    try:
        result = runner(path, out / student, setup, student)
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
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return replace(setup, options=replace(setup.options, threads=max(1, cores // jobs)))


def grade_all(submissions: list[tuple[str, Path]], out: Path, setup: GradingSetup, *, jobs: int = 1,
              runner: Runner = grade_submission, show_progress: bool = True) -> list[BatchRow]:
    """Grade every submission into ``out/<student>/``, ``jobs`` at a time; write ``out/batch.json``.

    Returns:
        One row per submission, in the order of ``submissions``.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    out.mkdir(parents=True, exist_ok=True)
    setup = share_cores(setup, jobs)
    rows: dict[str, BatchRow] = {}
    columns = (TextColumn("grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.description}"))
    with Progress(*columns, disable=not show_progress, transient=False) as progress:
        task = progress.add_task("", total=len(submissions))
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {pool.submit(grade_one, student, path, out, setup, runner): student for student, path in submissions}
            for future in as_completed(futures):
                student = futures[future]
                result, wall = future.result()
                rows[student] = batch_row(student, result, wall)
                progress.update(task, advance=1, description=f"{student}: {rows[student].score}/{rows[student].max_score}")
    ordered = [rows[student] for student, _ in submissions]
    write_batch_index(out, ordered)
    return ordered


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("submissions_dir", type=Path, help="one folder or .zip per student")
    parser.add_argument("--out", type=Path, required=True, help="graded folder (one sub-folder per student)")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="submissions graded at once (default 1)")
    parser.add_argument("--only", default=None, help="comma-separated student ids to grade")
    add_course_options(parser)
    add_container_options(parser)


def main(args: argparse.Namespace) -> int:
    try:
        check_output_folder(args.out)
        setup = prepare(args, check_environment=not args.container)
        submissions = discover_submissions(args.submissions_dir)
        runner = runner_from_args(args) or grade_submission
    except (CourseError, ContainerError, GraderEnvironmentError) as error:
        print(f"grader batch: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.only:
        wanted = set(args.only.split(","))
        submissions = [(name, path) for name, path in submissions if name in wanted]
    if not submissions:
        print(f"grader batch: no submissions in {args.submissions_dir}", file=sys.stderr)
        return EXIT_USAGE
    start = time.monotonic()
    rows = grade_all(submissions, args.out, setup, jobs=args.jobs, runner=runner, show_progress=sys.stderr.isatty())
    for row in rows:
        statuses = " ".join(f"{lab}={status}" for lab, status in row.statuses.items())
        flags = f" flags={row.flags}" if row.flags else ""
        print(f"{row.student}: {row.score}/{row.max_score} (+{row.pending} pending) {statuses}{flags}")
    print(f"graded {len(rows)} submissions in {time.monotonic() - start:.1f} s with -j {args.jobs}: {args.out}/{BATCH_FILE}")
    failed = [row.student for row in rows if GRADER_FAULTS & set(row.statuses.values())]
    if failed:
        print(f"\nGRADER ERROR for {len(failed)} submission(s), not their fault (the reason is in each "
              f"feedback.md): {', '.join(failed)}\nFix the cause, then grade them again with --only "
              f"{','.join(failed)}", file=sys.stderr)
        return EXIT_GRADER_FAULT
    return EXIT_OK
