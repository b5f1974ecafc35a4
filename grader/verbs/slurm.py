"""The ``slurm`` verb: grade a class on a Slurm cluster, follow it, and grade the failed ones again.

::

    python -m grader slurm submit SUBMISSIONS --out GRADED [--gpus-per-task N] [--partition P]
                                  [--time HH:MM:SS] [--max-parallel N] [--mem 6G] [--wait]
    python -m grader slurm status GRADED [--wait]
    python -m grader slurm resubmit GRADED --failed [--time HH:MM:SS] [--mem 8G] [--wait]

Run from a login node, with the course environment's interpreter on a filesystem the nodes share
(the graded folder too). Each task grades like ``grader run`` into ``GRADED/<student>/``, so
``grader report GRADED`` works as after ``grader batch``. How tasks are split, and what a task Slurm
kills leaves behind: :mod:`grader.runners.slurm`.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

from grader.course.labs import CourseError
from grader.execute.preflight import GraderEnvironmentError, check_output_folder
from grader.runners.batch import discover_submissions, select_students
from grader.runners.progress import Progress
from grader.runners.slurm import (
    PLAN_DIR,
    Plan,
    Resources,
    SlurmError,
    Task,
    TaskStatus,
    lab_groups,
    record_failures,
    submit_tasks,
    task_minutes,
    task_statuses,
    time_minutes,
    write_index,
    write_waiting_row,
)
from grader.scoring.results import EXIT_GRADER_FAULT, EXIT_OK, EXIT_USAGE
from grader.verbs.options import add_course_options, prepare

STATES = ("done", "running", "pending", "failed")
#: Seconds between two looks at the queue with ``--wait``.
POLL_S = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    submit = actions.add_parser("submit", help="submit one Slurm array task per submission (and kind of lab)")
    submit.add_argument("submissions_dir", type=Path, help="one folder or .zip per student")
    submit.add_argument("--out", type=Path, required=True, help="graded folder (one sub-folder per student)")
    submit.add_argument(
        "--only", action="append", default=None, help="student ids to grade (comma-separated, or the option repeated)"
    )
    defaults = Resources()
    cluster = submit.add_argument_group("cluster", "what each task asks Slurm for")
    cluster.add_argument(
        "--gpus-per-task",
        type=int,
        default=defaults.gpus_per_task,
        help="GPUs for each task grading the labs that have GPU tests (--gres=gpu:N); CPU-only "
        f"labs never hold one; 0: grade every lab on CPU, GPU tests pending (default {defaults.gpus_per_task})",
    )
    cluster.add_argument("--partition", default=None, help="Slurm partition (default: the cluster's)")
    cluster.add_argument("--gpu-partition", default=None, help="partition of the GPU tasks (default: --partition)")
    _add_resource_options(cluster, defaults)
    cluster.add_argument(
        "--cpus-per-task",
        type=int,
        default=defaults.cpus_per_task,
        help=f"CPUs per task (default {defaults.cpus_per_task})",
    )
    cluster.add_argument("--max-parallel", type=int, default=None, help="most tasks of an array running at once")
    submit.add_argument("--wait", action="store_true", help="follow the tasks until every one has ended")
    add_course_options(submit)

    status = actions.add_parser("status", help="done / running / pending / failed, with a progress bar")
    status.add_argument("graded", type=Path, help="the folder given to `slurm submit --out`")
    status.add_argument("--wait", action="store_true", help="follow the tasks until every one has ended")

    resubmit = actions.add_parser("resubmit", help="submit the failed tasks again (and only those)")
    resubmit.add_argument("graded", type=Path, help="the folder given to `slurm submit --out`")
    resubmit.add_argument(
        "--failed",
        action="store_true",
        required=True,
        help="resubmit the tasks that failed (TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, CANCELLED...)",
    )
    _add_resource_options(resubmit, None)
    resubmit.add_argument("--wait", action="store_true", help="follow the tasks until every one has ended")


def _add_resource_options(group, defaults: Resources | None) -> None:
    keep = " (default: as submitted)" if defaults is None else ""
    group.add_argument(
        "--time",
        default=None,
        help="time limit of each task, HH:MM:SS" + (keep or " (default: its labs' time budgets + 10 min)"),
    )
    group.add_argument(
        "--mem",
        default=None if defaults is None else defaults.mem,
        help="memory per task" + (keep or f" (default {defaults.mem})"),
    )


# ---------------------------------------------------------------- printing


def _counts(statuses: list[TaskStatus]) -> Counter:
    return Counter(status.state for status in statuses)


def describe_statuses(graded: Path, plan: Plan, statuses: list[TaskStatus]) -> str:
    """The status report: counts per state and one line per failed task (pure)."""
    counts = _counts(statuses)
    groups = ", ".join(
        f"{group} {sum(s.group == group for s in statuses)}: {'+'.join(plan.groups[group])}" for group in plan.groups
    )
    lines = [
        f"{graded}: {len(plan.students)} students, {len(statuses)} tasks ({groups})",
        " · ".join(f"{counts[state]} {state}" for state in STATES),
    ]
    for status in statuses:
        if status.state == "failed":
            lines.append(f"  FAILED {status.student} ({status.group} labs, task {status.job}): {status.slurm}")
    return "\n".join(lines)


def follow(graded: Path, plan: Plan, *, wait: bool, show_progress: bool) -> list[TaskStatus]:
    """Look at the tasks (until none is pending or running with ``wait``), showing progress (a bar on a
    terminal, else a line per finished task and a heartbeat: :mod:`grader.runners.progress`); write the
    rows of failed tasks and ``batch.json``."""
    progress = Progress(
        len(plan.tasks), stream=None if show_progress else io.StringIO(), interactive=None if show_progress else False
    )
    reported: set[str] = set()
    with progress:
        while True:
            statuses = task_statuses(graded, plan)
            counts = _counts(statuses)
            progress.set_running(counts["running"])
            for status in statuses:
                if status.state in ("done", "failed") and status.key not in reported:
                    reported.add(status.key)
                    progress.finished(
                        f"{status.student} ({status.group} labs): {status.state}"
                        + (f" ({status.slurm})" if status.state == "failed" else "")
                    )
            progress.tick()
            if not wait or not (counts["pending"] or counts["running"]):
                break
            time.sleep(POLL_S)
    record_failures(graded, plan, statuses)
    write_index(graded, plan, statuses)
    return statuses


def _finish(graded: Path, plan: Plan, statuses: list[TaskStatus]) -> int:
    print(describe_statuses(graded, plan, statuses))
    counts = _counts(statuses)
    if counts["failed"]:
        print(f"rows of failed tasks say why; grade them again with: python -m grader slurm resubmit {graded} --failed")
        return EXIT_GRADER_FAULT
    if not (counts["pending"] or counts["running"]):
        print(f"every task is done: python -m grader report {graded} --out REPORT")
    return EXIT_OK


# ---------------------------------------------------------------- actions


def submit(args: argparse.Namespace) -> int:
    check_output_folder(args.out)
    setup = prepare(args)
    submissions = discover_submissions(args.submissions_dir, out=args.out)
    if args.only:
        submissions = select_students(submissions, args.only)
    if not submissions:
        raise CourseError(f"no submissions in {args.submissions_dir}")
    if args.time:
        time_minutes(args.time)  # refuse a malformed --time before submitting anything
    graded = args.out.absolute()
    resources = Resources(
        args.partition,
        args.gpu_partition,
        args.time,
        args.mem,
        args.cpus_per_task,
        args.gpus_per_task,
        args.max_parallel,
    )
    groups = lab_groups(setup.rubric, setup.options.gpu, args.gpus_per_task)
    plan = Plan(
        str(setup.course.root),
        [spec.id for spec in setup.labs],
        setup.options.gpu,
        asdict(setup.options.limits),
        setup.options.python,
        resources,
        groups,
        {student: str(path.absolute()) for student, path in submissions},
        unsafe_no_sandbox=args.unsafe_no_sandbox,
    )
    plan.tasks = {task.key: task for task in (Task(student, group) for student, _ in submissions for group in groups)}
    (graded / PLAN_DIR).mkdir(parents=True, exist_ok=True)
    setup.rubric.write(graded / PLAN_DIR / "rubric.json")
    plan.save(graded)
    rubric = plan.rubric(graded)
    for student in plan.students:
        write_waiting_row(graded, plan, rubric, student)
    arrays = submit_tasks(graded, plan, sorted(plan.tasks))
    for group, labs in groups.items():
        gpus = f", --gres=gpu:{resources.gpus_per_task}" if group == "gpu" else ", no GPU"
        print(
            f"{group} array: {len(submissions)} tasks grading {', '.join(labs)} "
            f"(--time {task_minutes(plan, rubric, group)} min, --mem {resources.mem}{gpus})"
        )
    print(f"submitted job arrays {', '.join(arrays)} for {len(submissions)} students into {graded}")
    statuses = follow(graded, plan, wait=args.wait, show_progress=args.wait)
    return _finish(graded, plan, statuses)


def status(args: argparse.Namespace) -> int:
    graded = args.graded.absolute()
    plan = Plan.load(graded)
    return _finish(graded, plan, follow(graded, plan, wait=args.wait, show_progress=args.wait))


def resubmit(args: argparse.Namespace) -> int:
    graded = args.graded.absolute()
    plan = Plan.load(graded)
    failed = [status.key for status in task_statuses(graded, plan) if status.state == "failed"]
    if not failed:
        print(f"{graded}: no failed task to resubmit")
        return EXIT_OK
    if args.time:
        time_minutes(args.time)
    changes = {name: value for name, value in (("time", args.time), ("mem", args.mem)) if value}
    if changes:
        plan.resources = replace(plan.resources, **changes)
    arrays = submit_tasks(graded, plan, failed)
    print(f"resubmitted {len(failed)} failed tasks as job arrays {', '.join(arrays)}: " + ", ".join(sorted(failed)))
    return _finish(graded, plan, follow(graded, plan, wait=args.wait, show_progress=args.wait))


ACTIONS = {"submit": submit, "status": status, "resubmit": resubmit}


def main(args: argparse.Namespace) -> int:
    try:
        return ACTIONS[args.action](args)
    except (CourseError, GraderEnvironmentError, SlurmError, ValueError) as error:
        print(f"grader slurm {args.action}: {error}", file=sys.stderr)
        return EXIT_USAGE
