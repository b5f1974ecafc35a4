"""The cluster runner: grade a class as Slurm job arrays, each task grading exactly as ``grader run`` does.

A runner like the local one (:func:`grader.runners.local.grade_submission`) and the container one
(:mod:`grader.runners.container`): same per-student folder (``GRADED/<student>/``), same sandbox, same scoring,
so ``grader report`` and ``grader score`` work on the result unchanged. Jobs are submitted with
submitit (Meta's Slurm client: a job is a pickled Python call, with its own log folder), not with
hand-built ``sbatch`` scripts.

**One task per submission and per kind of lab.** Labs with a GPU test (lab 3) are graded in a *GPU
array* whose tasks ask for ``--gres=gpu:N``; every other lab in a *CPU array* that never holds a GPU.
GPUs are a cluster's scarcest resource: a GPU task holds one only while a GPU lab runs, not during
the minutes of CPU-only labs. One task per submission (not shards of many): a task Slurm kills costs
one student, the scheduler balances the load, and ``resubmit --failed`` reruns exactly the students
that need it; the start-up cost (Python, the grader, a sandbox: seconds) is small next to a lab.
A submission's two tasks grade different labs into the same folder (``only_labs``): neither touches
the other's ``raw/<lab>/``, and the last to finish writes the complete summary.

**Never a missing row.** ``submit`` writes every student's row at once (status ``not-run``: waiting
for its task). A task Slurm kills (``TIMEOUT``, ``OUT_OF_MEMORY``, ``NODE_FAIL``, ``CANCELLED``...)
cannot write its own row, so :func:`record_failures` (run by ``grader slurm status`` and by a small
job that Slurm starts after the arrays end) writes it from what Slurm says: labs the task finished
keep their points, the others score 0 with the Slurm state in the reason and a flag.

Bookkeeping lives in ``GRADED/.slurm/``: ``plan.json`` (course, options, resources, every task and
its job id), ``rubric.json`` (the pristine rubric every task grades against), ``tasks/<group>/<student>.json``
(written by a task when it starts and ends), ``logs/`` (submitit's pickles and each task's output).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import shlex
import signal
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from grader.course.labs import load_course
from grader.course.rubric import Rubric
from grader.evidence.layout import RAW_DIR, RUBRIC_FILE, RUN_FILE, SUBMISSION_FILE, read_json, write_submission_meta
from grader.execute.isolation import choose_isolation
from grader.execute.limits import GRADING_MARGIN_S, RunLimits, submission_budget_s
from grader.runners.batch import batch_row, write_batch_index
from grader.runners.local import GradeOptions, GradingSetup, grade_submission
from grader.runners.slurm_states import SlurmUnavailable, describe, task_states
from grader.scoring.feedback import write_outputs
from grader.scoring.results import GRADER_ERROR, SubmissionResult
from grader.scoring.score import rescore

PLAN_DIR = ".slurm"
PLAN_FILE = "plan.json"
#: The lock a student's tasks take to write the student's summary (inside ``GRADED/<student>/``).
LOCK_FILE = ".slurm.lock"
PLAN_SCHEMA = "grader-slurm/1"
CPU, GPU = "cpu", "gpu"
#: Slurm's default ``MaxArraySize`` is 1001: larger classes are submitted as several arrays.
MAX_ARRAY = 1000
#: A failed task's Slurm state -> the status of the labs it did not finish, and what happened, in words.
SLURM_ENDINGS = {
    "TIMEOUT": ("timeout", "Slurm stopped the task at its time limit ({time})"),
    "DEADLINE": ("timeout", "Slurm stopped the task at its deadline"),
    "OUT_OF_MEMORY": ("crashed", "the task ran out of memory ({mem}) and Slurm killed it"),
    "NODE_FAIL": (GRADER_ERROR, "the cluster node failed (not the submission's fault)"),
    "BOOT_FAIL": (GRADER_ERROR, "the cluster node failed to start (not the submission's fault)"),
    "CANCELLED": (GRADER_ERROR, "the task was cancelled (not the submission's fault)"),
    "PREEMPTED": (GRADER_ERROR, "the task was preempted (not the submission's fault)"),
}
RESUBMIT_HINT = "`python -m grader slurm resubmit GRADED --failed` grades it again"
#: The reason of a student's row until a task grades them.
WAITING_REASON = "waiting for its Slurm tasks"


class SlurmError(RuntimeError):
    """No usable Slurm (no ``sbatch``), or a graded folder without a Slurm plan."""


@dataclass(frozen=True)
class Resources:
    """What each task asks Slurm for.

    Attributes:
        partition: the partition of the CPU array (and of the GPU array without ``gpu_partition``).
        gpu_partition: the GPU array's partition.
        time: each task's time limit, ``HH:MM:SS`` (or minutes); None: its labs' time budgets + 10 min.
        mem: memory per task (``--mem``).
        cpus_per_task: CPUs per task (``--cpus-per-task``).
        gpus_per_task: GPUs per task of the GPU array (``--gres=gpu:N``); 0: no GPU array, GPU tests pending.
        max_parallel: most tasks of one array running at once (``--array=...%N``); None: no limit.
    """

    partition: str | None = None
    gpu_partition: str | None = None
    time: str | None = None
    mem: str = "6G"
    cpus_per_task: int = 2
    gpus_per_task: int = 1
    max_parallel: int | None = None


@dataclass
class Task:
    """One array task: a student's labs of one group, its current job id and how often it was submitted."""

    student: str
    group: str
    job: str = ""
    attempt: int = 0

    @property
    def key(self) -> str:
        return f"{self.group}/{self.student}"


@dataclass
class Plan:
    """Everything a task needs to grade like ``grader run``, and every task's job (``.slurm/plan.json``)."""

    course: str
    labs: list[str]
    gpu: str
    limits: dict[str, Any]
    python: str
    resources: Resources
    groups: dict[str, list[str]]
    students: dict[str, str]
    tasks: dict[str, Task] = field(default_factory=dict)
    unsafe_no_sandbox: bool = False  # grade unisolated where bubblewrap is missing (``--unsafe-no-sandbox``)

    def save(self, graded: Path) -> None:
        data = {"schema": PLAN_SCHEMA, **asdict(self)}
        path = graded / PLAN_DIR / PLAN_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        temporary.replace(path)  # a task or status reading it never sees half a file

    @classmethod
    def load(cls, graded: Path) -> Plan:
        data = read_json(graded / PLAN_DIR / PLAN_FILE)
        if data is None or data.get("schema") != PLAN_SCHEMA:
            raise SlurmError(f"{graded} was not graded with `grader slurm submit` (no {PLAN_DIR}/{PLAN_FILE})")
        data.pop("schema")
        tasks = {key: Task(**task) for key, task in data.pop("tasks").items()}
        return cls(resources=Resources(**data.pop("resources")), tasks=tasks, **data)

    def rubric(self, graded: Path) -> Rubric:
        return Rubric.read(graded / PLAN_DIR / RUBRIC_FILE)

    def grading_setup(self, graded: Path) -> GradingSetup:
        course = load_course(Path(self.course))
        isolation = choose_isolation(
            self.python, course.root, instructor_course=course.holds_instructor_material, unsafe=self.unsafe_no_sandbox
        )  # the node's own bubblewrap
        options = GradeOptions(
            gpu=self.gpu,
            limits=RunLimits(**self.limits),
            python=self.python,
            threads=self.resources.cpus_per_task,  # the task's CPUs, not the node's
            isolation=isolation,
        )
        return GradingSetup(course, course.select(self.labs), self.rubric(graded), options)


# ---------------------------------------------------------------- planning (pure)


def lab_groups(rubric: Rubric, gpu: str, gpus_per_task: int) -> dict[str, list[str]]:
    """Which labs each array grades: labs with a GPU test in ``gpu`` (unless no GPU is asked for),
    the rest in ``cpu``."""
    gradable = [lab for lab in rubric.labs if lab.error is None]
    wants_gpu = gpus_per_task > 0 and gpu != "off"
    groups = {
        CPU: [lab.lab for lab in gradable if not (wants_gpu and lab.gpu_points)],
        GPU: [lab.lab for lab in gradable if wants_gpu and lab.gpu_points],
    }
    return {group: labs for group, labs in groups.items() if labs}


def time_minutes(text: str) -> int:
    """Slurm's time formats (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``) -> whole minutes, rounded up.

    Raises:
        ValueError: for anything else.
    """
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not match:
        raise ValueError(f"--time {text!r}: expected HH:MM:SS (or MM, MM:SS, D-HH:MM:SS)")
    days, first, second, third = (int(part) if part else None for part in match.groups())
    if days is not None:
        hours, minutes, seconds = first, second or 0, third or 0
    elif third is not None:
        hours, minutes, seconds = first, second, third
    elif second is not None:
        hours, minutes, seconds = 0, first, second
    else:
        hours, minutes, seconds = 0, first, 0
    return max(1, math.ceil(((days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds) / 60))


def task_minutes(plan: Plan, rubric: Rubric, group: str) -> int:
    """A task's ``--time``: as asked, else the time budgets of its labs plus
    :data:`~grader.execute.limits.GRADING_MARGIN_S`."""
    if plan.resources.time:
        return time_minutes(plan.resources.time)
    budget = submission_budget_s(rubric, RunLimits(**plan.limits), labs=plan.groups[group])
    return max(1, math.ceil((budget + GRADING_MARGIN_S) / 60))


def slurm_parameters(plan: Plan, rubric: Rubric, group: str, count: int) -> dict[str, Any]:
    """submitit's ``SlurmExecutor`` parameters for an array of ``count`` tasks of ``group``."""
    resources = plan.resources
    parameters: dict[str, Any] = {
        "job_name": f"grade-{group}",
        "time": task_minutes(plan, rubric, group),
        "mem": resources.mem,
        "cpus_per_task": resources.cpus_per_task,
        "array_parallelism": min(count, resources.max_parallel or count),
        "stderr_to_stdout": True,
        # The task runs in the batch step itself, not in an srun step: a process killed there for memory
        # makes the job OUT_OF_MEMORY (an srun step's OOM only makes it FAILED), and Slurm's --signal
        # (which submitit always sets) is never delivered to a batch step.
        "use_srun": False,
    }
    partition = resources.gpu_partition if group == GPU and resources.gpu_partition else resources.partition
    if partition:
        parameters["partition"] = partition
    if group == GPU:
        parameters["gres"] = f"gpu:{resources.gpus_per_task}"
    return parameters


# ---------------------------------------------------------------- what runs on a node


def task_record_path(graded: Path, key: str) -> Path:
    return graded / PLAN_DIR / "tasks" / f"{key}.json"


def this_job_id() -> str:
    """``<array job>_<index>`` of the running array task ("" outside Slurm)."""
    array, index = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{index}" if array and index else os.environ.get("SLURM_JOB_ID", "")


def _write_record(graded: Path, key: str, **fields: Any) -> None:
    path = task_record_path(graded, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fields, indent=1) + "\n", encoding="utf-8")


def grade_task(graded: str, key: str) -> str:
    """One array task, on a node: grade one student's labs of one group into ``GRADED/<student>/``.

    The task ignores ``SIGUSR2``, the signal submitit asks Slurm for before the time limit (to
    checkpoint): the grader has nothing to checkpoint, and a pytest process killed by it would look
    like the student's crash. (In a batch step it is not delivered at all; ignoring it also covers a
    cluster whose ``sbatch`` wrappers change that.)
    """
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    folder = Path(graded)
    plan = Plan.load(folder)
    task = plan.tasks[key]
    job = this_job_id()
    gpus = os.environ.get("SLURM_JOB_GPUS") or os.environ.get("CUDA_VISIBLE_DEVICES") or ""
    started = time.time()
    _write_record(folder, key, job=job, host=socket.gethostname(), gpus=gpus, started=started)
    out = folder / task.student
    grade_submission(
        Path(plan.students[task.student]),
        out,
        plan.grading_setup(folder),
        name=task.student,
        only_labs=plan.groups[task.group],
    )
    result = rescore_locked(out)
    # The grader's own failure on this node (its labs' status grader-error) makes the task failed, so
    # that `status` shows it and `resubmit --failed` grades the student again.
    faults = [lab for lab in result.grader_faults if lab.lab in plan.groups[task.group]]
    _write_record(
        folder,
        key,
        job=job,
        host=socket.gethostname(),
        gpus=gpus,
        started=started,
        finished=time.time(),
        score=result.total["score"],
        grader_error="; ".join(f"{lab.lab}: {lab.reason}" for lab in faults),
    )
    return f"{task.student} ({task.group}): {result.total['score']}/{result.total['max_score']}"


def rescore_locked(out: Path) -> SubmissionResult:
    """Score ``out`` again and write its summary, holding the student's lock.

    A submission's two tasks may end together; each has written its own labs' runs before it takes the
    lock, so whichever scores last sees both, and its summary is the one that stays.
    """
    with open(out / LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = rescore(out)
        write_outputs(result, out)
    return result


def finalize(graded: str) -> int:
    """The job Slurm starts after a submission's arrays end: write the rows of killed tasks and ``batch.json``."""
    folder = Path(graded)
    plan = Plan.load(folder)
    statuses = task_statuses(folder, plan)
    written = record_failures(folder, plan, statuses)
    write_index(folder, plan, statuses)
    return len(written)


# ---------------------------------------------------------------- submitting


def _executor(graded: Path, plan: Plan):
    import submitit

    try:
        return submitit.SlurmExecutor(folder=graded / PLAN_DIR / "logs" / "%j", python=shlex.quote(plan.python))
    except RuntimeError as error:  # submitit checks for srun
        raise SlurmError(f"no Slurm here ({error}): run this on a cluster's login node") from error


def submit_tasks(graded: Path, plan: Plan, keys: list[str]) -> list[str]:
    """Submit ``keys`` (``<group>/<student>``) as one array per group (per 1,000 tasks), then a job that
    records the failures once they end; update and save ``plan``. Return the array job ids."""
    rubric = plan.rubric(graded)
    arrays = []
    for group in (CPU, GPU):
        wanted = [key for key in keys if plan.tasks[key].group == group]
        for start in range(0, len(wanted), MAX_ARRAY):
            chunk = wanted[start : start + MAX_ARRAY]
            executor = _executor(graded, plan)
            executor.update_parameters(**slurm_parameters(plan, rubric, group, len(chunk)))
            for key in chunk:  # a stale record from an earlier attempt must not read as this one's
                task_record_path(graded, key).unlink(missing_ok=True)
            jobs = executor.map_array(grade_task, [str(graded)] * len(chunk), chunk)
            for key, job in zip(chunk, jobs):
                plan.tasks[key].job = job.job_id
                plan.tasks[key].attempt += 1
            arrays.append(jobs[0].job_id.split("_")[0])
            plan.save(graded)
    if arrays:
        executor = _executor(graded, plan)
        executor.update_parameters(
            job_name="grade-rows",
            time=10,
            mem="1G",
            cpus_per_task=1,
            **({"partition": plan.resources.partition} if plan.resources.partition else {}),
            additional_parameters={"dependency": "afterany:" + ":".join(arrays)},
        )
        executor.submit(finalize, str(graded))
    return arrays


def write_waiting_row(graded: Path, plan: Plan, rubric: Rubric, student: str) -> None:
    """The row a student has until a task grades them (``not-run``); written before anything is submitted,
    so that no task can finish first and have its row overwritten."""
    out = graded / student
    out.mkdir(parents=True, exist_ok=True)
    rubric.write(out / RUBRIC_FILE)
    meta = {
        "submission": student,
        "gpu": plan.gpu,
        "not_run_status": "not-run",
        "not_run_reason": f"{WAITING_REASON} (`python -m grader slurm status {graded}`)",
    }
    write_submission_meta(out, meta)
    write_outputs(rescore(out), out)


# ---------------------------------------------------------------- status and failures


@dataclass(frozen=True)
class TaskStatus:
    """Where one task stands: ``pending``, ``running``, ``done`` or ``failed`` (``slurm``: Slurm's own state)."""

    key: str
    student: str
    group: str
    job: str
    state: str
    slurm: str = ""
    record: dict[str, Any] | None = None


def task_statuses(graded: Path, plan: Plan) -> list[TaskStatus]:
    """Every task's status, from the records tasks wrote and what Slurm says (:mod:`grader.runners.slurm_states`)."""
    try:
        states = task_states(task.job.split("_")[0] for task in plan.tasks.values() if task.job)
    except SlurmUnavailable as error:
        raise SlurmError(str(error)) from error
    statuses = []
    for key, task in sorted(plan.tasks.items()):
        record = read_json(task_record_path(graded, key))
        current = record is not None and record.get("job") == task.job
        slurm = states.get(task.job, "")
        if current and record.get("finished"):
            # The grader went on after the kernel killed a test process for memory: the row is complete,
            # but Slurm's verdict stands (its lab says so, and resubmit --failed may give more memory).
            # A task whose grading failed on the grader's side has failed too.
            state = "failed" if slurm == "OUT_OF_MEMORY" or record.get("grader_error") else "done"
        elif slurm:
            state = describe(slurm)
            if state == "done":  # Slurm says COMPLETED, yet the task never finished grading
                state = "failed"
        elif task.job:  # not queued, and Slurm no longer remembers how it ended (see slurm_states)
            state, slurm = "failed", "UNKNOWN"
        else:
            state = "pending"  # not submitted yet
        statuses.append(TaskStatus(key, task.student, task.group, task.job, state, slurm, record))
    return statuses


def failure_reason(status: TaskStatus, plan: Plan, rubric: Rubric) -> tuple[str, str]:
    """(lab status, reason) for the labs a failed task did not finish."""
    minutes = task_minutes(plan, rubric, status.group)
    resources = {"time": f"--time {minutes // 60:02d}:{minutes % 60:02d}:00", "mem": f"--mem {plan.resources.mem}"}
    log = f"{PLAN_DIR}/logs/{status.job}/"
    grader_error = (status.record or {}).get("grader_error")
    if grader_error and status.slurm != "OUT_OF_MEMORY":
        return GRADER_ERROR, (
            f"the grader failed on the node (task {status.job}), not the submission: "
            f"{grader_error}; see {log}; {RESUBMIT_HINT}"
        )
    lab_status, what = SLURM_ENDINGS.get(
        status.slurm, (GRADER_ERROR, "the task ended without finishing (not the submission's fault)")
    )
    return lab_status, (
        f"Slurm {status.slurm or 'ended the task'} (task {status.job}): "
        f"{what.format(**resources)} before this lab finished; see {log}; {RESUBMIT_HINT}"
    )


def killed_by_the_kernel(run: dict[str, Any]) -> bool:
    """Whether a lab's last pytest process died of ``SIGKILL`` that the grader did not send.

    The grader kills a process group itself when the lab's budget runs out, its output floods, a test
    overruns its limit or it goes over a resource cap (``run.json`` says so); any other ``SIGKILL`` in an
    ``OUT_OF_MEMORY`` task is the kernel's.
    """
    graders_own = run.get("timed_out") or run.get("output_flooded") or run.get("killed_tests") or run.get("over_limit")
    return run.get("exit_code") == -signal.SIGKILL and not graders_own


def record_failures(graded: Path, plan: Plan, statuses: list[TaskStatus] | None = None) -> list[str]:
    """Write the row of every student whose tasks have all ended and one of them failed; return who.

    Labs with a finished run keep their points; each unfinished lab of a failed task gets the status and
    reason of :func:`failure_reason`; the Slurm state is also a flag. After ``OUT_OF_MEMORY`` the lab
    whose test process the kernel killed (the biggest process: the grader itself usually goes on) says
    so next to its ``crashed`` reason.
    """
    statuses = task_statuses(graded, plan) if statuses is None else statuses
    rubric = plan.rubric(graded)
    written = []
    for student in sorted({status.student for status in statuses}):
        mine = [status for status in statuses if status.student == student]
        failed = [status for status in mine if status.state == "failed"]
        if not failed or any(status.state in ("pending", "running") for status in mine):
            continue
        out = graded / student
        if not (out / RUBRIC_FILE).is_file():
            rubric.write(out / RUBRIC_FILE)
        meta = read_json(out / SUBMISSION_FILE) or {"submission": student, "gpu": plan.gpu}
        if meta.get("not_run_reason", "").startswith(WAITING_REASON):  # the "waiting for its tasks" row's
            meta.pop("not_run_reason")
            meta.pop("not_run_status", None)
        not_run, notes = meta.setdefault("not_run_labs", {}), meta.setdefault("lab_notes", {})
        flags = meta.setdefault("flags", [])
        for status in failed:
            lab_status, reason = failure_reason(status, plan, rubric)
            for lab in plan.groups[status.group]:
                run = read_json(out / RAW_DIR / lab / RUN_FILE)
                if run is None:
                    not_run[lab] = {"status": lab_status, "reason": reason}
                elif status.slurm == "OUT_OF_MEMORY" and killed_by_the_kernel(run):
                    notes[lab] = (
                        f"Slurm OUT_OF_MEMORY (task {status.job}): the test process used more than the "
                        f"task's memory (--mem {plan.resources.mem}) and was killed"
                    )
            what = (
                "the grader failed"
                if (status.record or {}).get("grader_error")
                else f"Slurm {status.slurm or 'lost the task'}"
            )
            flags.append(f"{what}: task {status.job} ({status.group} labs)")
        meta["flags"] = list(dict.fromkeys(flags))
        write_submission_meta(out, meta)
        rescore_locked(out)
        written.append(student)
    return written


def write_index(graded: Path, plan: Plan, statuses: list[TaskStatus]) -> None:
    """``GRADED/batch.json`` as ``grader batch`` writes it (wall time: the student's tasks' grading time)."""
    rows = []
    for student in sorted(plan.students):
        try:
            result = rescore(graded / student)
        except (FileNotFoundError, ValueError):
            continue
        wall = sum(
            (s.record or {}).get("finished", 0) - (s.record or {}).get("started", 0)
            for s in statuses
            if s.student == student and s.state == "done"
        )
        rows.append(batch_row(student, result, wall))
    write_batch_index(graded, rows)
