"""What Slurm says about the tasks of a job array: ``PENDING``, ``RUNNING``, ``TIMEOUT``, ``OUT_OF_MEMORY``...

submitit reads job states with ``sacct``, which needs Slurm's accounting database. Many small clusters
(and the repository's test cluster, ``slurm/``) run without one, so :func:`task_states` asks, in order:

1. ``sacct`` (accounting storage: complete history), when it works;
2. otherwise ``squeue`` (pending and running tasks), ``scontrol show job`` (tasks that ended within the
   last ``MinJobAge`` seconds) and the job-completion log (``JobCompType=jobcomp/filetxt``: every
   task that ever ended, if readable).

A task id is ``<array job id>_<index>`` (``"123_4"``), or a plain job id for an "array" of one task
(submitit submits a single job then). The parsers are pure functions of the commands' output, so they
are tested without a cluster.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

#: States of a task that has not ended yet, and how the grader shows them.
WAITING_STATES = {
    "PENDING": "pending",
    "CONFIGURING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending",
    "RESIZING": "pending",
    "SUSPENDED": "pending",
    "STOPPED": "pending",
    "RUNNING": "running",
    "COMPLETING": "running",
    "SIGNALING": "running",
    "STAGE_OUT": "running",
}
COMPLETED = "COMPLETED"


def _run(command: list[str]) -> str | None:
    """The command's output, or None when it is missing or fails (no accounting, no such job...)."""
    try:
        done = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _expand(task_id: str) -> list[str]:
    """``123_[0-2,5%4]`` -> ``123_0 123_1 123_2 123_5``; plain ids are returned as they are."""
    match = re.fullmatch(r"(\d+)_\[([^\]]+)\]", task_id)
    if not match:
        return [task_id]
    array, spec = match.group(1), match.group(2).split("%")[0]
    ids = []
    for part in spec.split(","):
        low, _, high = part.partition("-")
        ids += [f"{array}_{index}" for index in range(int(low), int(high or low) + 1)]
    return ids


def parse_sacct(output: str) -> dict[str, str]:
    """``sacct -n -P -X -o JobID,State`` lines -> task id -> state (``CANCELLED by 0`` -> ``CANCELLED``)."""
    states = {}
    for line in output.splitlines():
        job, _, state = line.partition("|")
        if job and state:
            for task in _expand(job.strip()):
                states[task] = state.split()[0]
    return states


def parse_key_values(line: str) -> dict[str, str]:
    """``A=1 B=x y`` style lines (``scontrol -o``, the job-completion log) -> a dict (values without spaces)."""
    return dict(re.findall(r"(\w+)=(\S*)", line))


def parse_job_records(output: str, jobs: Iterable[str]) -> dict[str, str]:
    """``scontrol -o show job`` output or job-completion log lines -> task id -> state, for the array
    (or plain) job ids ``jobs``."""
    wanted = set(jobs)
    states = {}
    for line in output.splitlines():
        fields = parse_key_values(line)
        array, index, state = fields.get("ArrayJobId"), fields.get("ArrayTaskId"), fields.get("JobState")
        if not state:
            continue
        if array in wanted and index:
            for task in _expand(f"{array}_[{index}]") if not index.isdigit() else [f"{array}_{index}"]:
                states[task] = state
        elif not array and fields.get("JobId") in wanted:
            states[fields["JobId"]] = state
    return states


def job_completion_log() -> Path | None:
    """The job-completion log's path, when the cluster writes one (``JobCompType=jobcomp/filetxt``)."""
    config = _run(["scontrol", "show", "config"]) or ""
    fields = {
        key.strip(): value.strip()
        for key, _, value in (line.partition("=") for line in config.splitlines())
        if key.strip()
    }
    if fields.get("JobCompType") != "jobcomp/filetxt" or not fields.get("JobCompLoc"):
        return None
    path = Path(fields["JobCompLoc"])
    return path if path.is_file() else None


class SlurmUnavailable(RuntimeError):
    """Neither ``sacct`` nor ``squeue`` answered: nothing can be said about any task."""


def task_states(jobs: Iterable[str]) -> dict[str, str]:
    """The state of every known task of the array (or plain) jobs ``jobs`` (see the module docstring).

    A task missing from the result has ended and Slurm no longer remembers how (it is not queued:
    ``squeue`` lists every pending and running task).

    Raises:
        SlurmUnavailable: when Slurm does not answer (then nothing may be concluded from absences).
    """
    jobs = sorted(set(jobs))
    if not jobs:
        return {}
    accounted = _run(["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(jobs)])
    queued = _run(["squeue", "-h", "-r", "-o", "%i|%T", "-j", ",".join(jobs)])
    states: dict[str, str] = {}
    if accounted is not None:
        states.update(parse_sacct(accounted))
    else:
        if queued is None and _run(["squeue", "-h", "-o", "%i"]) is None:  # (squeue -j fails for unknown ids)
            raise SlurmUnavailable("neither sacct nor squeue answers: is Slurm reachable from here?")
        log = job_completion_log()
        if log is not None:
            states.update(parse_job_records(log.read_text(encoding="utf-8", errors="replace"), jobs))
        for job in jobs:
            states.update(parse_job_records(_run(["scontrol", "-o", "show", "job", job]) or "", jobs))
    # Last, and also beside sacct: a queued task is pending or running whatever the accounting has
    # recorded yet (sacct can lag behind a job just submitted).
    states.update(parse_sacct(queued or ""))
    return states


def describe(state: str) -> str:
    """A task state in the words of the grader's status: pending, running, done or failed."""
    if state in WAITING_STATES:
        return WAITING_STATES[state]
    return "done" if state == COMPLETED else "failed"
