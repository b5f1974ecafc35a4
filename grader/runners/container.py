"""Grade each submission in its own container: ``grader batch SUBS --out DIR --container IMAGE -j N``.

The course image (the top-level ``Dockerfile``) has the grader as its entry point, so grading one
submission in a container is the documented command::

    docker run --network none -v SUB:/submission:ro -v OUT:/out IMAGE run /submission --out /out

:class:`ContainerRunner` runs exactly that for every student of a batch, with the limits a shared
grading machine needs:

- **no network** (``--network none``), no Linux capabilities, no privilege escalation;
- **memory** (swap included), **CPUs**, **processes** (``--pids-limit``) and open files;
- a **wall-clock limit**: past it the container is killed (by name: killing the ``docker run``
  client would leave the container running) and the student's row says so.

The container writes the usual graded folder (``summary.json``, raw pytest reports) into the bind
mount; the host then re-scores those artifacts against its own pristine rubric with
:func:`grader.scoring.score.rescore`, the same function a regrade uses. A container that was killed, ran out of
memory or ended without a result still gives a row: labs it finished keep their points, the others
score 0 with the reason.

Docker and podman both work; the engine is found automatically (the first of ``docker``, ``podman``
whose service answers) or named with ``--engine`` / ``GRADER_CONTAINER_ENGINE``, with any global
options it needs (``--engine "podman --runtime runc"``). This module imports only the standard library
and the grader's plain-data modules: the noxfile's image sessions use it without the course installed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from grader.evidence.layout import (
    RAW_DIR,
    RUBRIC_FILE,
    SUBMISSION_FILE,
    SUBMITTED_DIR,
    SUMMARY_FILE,
    read_json,
    write_submission_meta,
)  # fmt: skip
from grader.evidence.text import truncate_text
from grader.execute.limits import GRADING_MARGIN_S, submission_budget_s, time_limit_args
from grader.scoring.feedback import write_outputs
from grader.scoring.results import EXIT_GRADER_FAULT, EXIT_OK, SubmissionResult

#: Environment variable naming the engine command (``docker``, ``podman --runtime runc``...).
ENGINE_ENV_VAR = "GRADER_CONTAINER_ENGINE"
#: Engines tried, in order, when none is named.
ENGINES = ("docker", "podman")
#: Where the submission and the output folder appear inside the container.
CONTAINER_SUBMISSION = "/submission"
CONTAINER_OUT = "/out"
#: The container's console output, kept next to the graded files.
CONTAINER_LOG = "container.log"
#: Status of the labs a container did not finish: killed at the wall-clock limit, or ended without a result.
KILLED_STATUS = "timeout"
FAILED_STATUS = "grader-error"


class ContainerError(RuntimeError):
    """No usable container engine, or the engine refused to start a container."""


@dataclass(frozen=True)
class ContainerLimits:
    """Resources of one submission's container.

    Attributes:
        memory: memory limit, swap included (``docker run --memory``), e.g. ``"6g"``.
        cpus: CPUs the container may use; also its thread count (OMP, Inductor's compile workers).
        pids: most processes and threads alive at once in the container (``--pids-limit``).
        open_files: open file descriptors per process (``--ulimit nofile``).
        processes: processes per user (``--ulimit nproc``; the kernel counts it per uid, so it is
            set high and ``pids`` is the real per-container limit).
        wall_clock_s: seconds before the container is killed; None = the labs' limits plus a margin.
    """

    memory: str = "6g"
    cpus: float = 2.0
    pids: int = 1024
    open_files: int = 4096
    processes: int = 16384
    wall_clock_s: float | None = None


@dataclass(frozen=True)
class ContainerRun:
    """How one container ended."""

    exit_code: int | None
    timed_out: bool
    oom_killed: bool
    wall_s: float
    log_tail: str


# ---------------------------------------------------------------- the engine


def _answers(engine: list[str]) -> bool:
    """True when the engine's service is usable (``docker info`` fails when no daemon runs)."""
    try:
        done = subprocess.run(
            [*engine, "info"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def find_engine(command: str | None = None) -> list[str]:
    """The container engine's command line (``["docker"]``, ``["podman", "--runtime", "runc"]``).

    Args:
        command: an engine command with its global options; default ``$GRADER_CONTAINER_ENGINE``,
            else the first of :data:`ENGINES` that is installed and answers.

    Raises:
        ContainerError: the named engine does not answer, or no engine is installed and running.
    """
    command = command or os.environ.get(ENGINE_ENV_VAR)
    if command:
        engine = shlex.split(command)
        if not engine or shutil.which(engine[0]) is None:
            raise ContainerError(f"container engine {command!r} is not installed")
        if not _answers(engine):
            raise ContainerError(f"container engine {command!r} does not answer (`{command} info` failed)")
        return engine
    installed = [name for name in ENGINES if shutil.which(name)]
    for name in installed:
        if _answers([name]):
            return [name]
    if installed:
        raise ContainerError(
            f"{' and '.join(installed)} installed, but `{installed[0]} info` fails: "
            "is the daemon running (or the user allowed to use it)?"
        )
    raise ContainerError("no container engine: install docker or podman")


def is_podman(engine: list[str]) -> bool:
    return Path(engine[0]).name.startswith("podman")


def gpu_args(engine: list[str]) -> list[str]:
    """Expose every NVIDIA GPU: docker's ``--gpus``, podman's CDI device (nvidia-container-toolkit)."""
    return ["--device", "nvidia.com/gpu=all"] if is_podman(engine) else ["--gpus", "all"]


def user_args(engine: list[str]) -> list[str]:
    """Who the grader runs as inside the container.

    Run by root, the image's own unprivileged user grades (the output folder is made writable for
    it). Run by anyone else, the container runs as the caller, so that the files it writes are the
    caller's: rootless podman maps the caller's id in with ``--userns=keep-id``.
    """
    if os.getuid() == 0:
        return []
    if is_podman(engine):
        return ["--userns=keep-id"]
    return ["--user", f"{os.getuid()}:{os.getgid()}"]


def isolation_args(limits: ContainerLimits, *, as_root: bool = False) -> list[str]:
    """``run`` options for an untrusted workload: no network, no capabilities, bounded resources.

    ``as_root`` keeps root's capabilities (for a trusted installer, such as a Gradescope ``setup.sh``).
    The thread counts follow the CPU limit: PyTorch and Inductor otherwise size their pools by the
    host's cores, which a container with 2 CPUs on a 64-core host would thrash.
    """
    threads = str(max(1, int(limits.cpus)))
    privileges = [] if as_root else ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    return [
        "--network",
        "none",
        *privileges,
        "--memory",
        limits.memory,
        "--memory-swap",
        limits.memory,
        "--cpus",
        f"{limits.cpus:g}",
        "--pids-limit",
        str(limits.pids),
        "--ulimit",
        f"nofile={limits.open_files}:{limits.open_files}",
        "--ulimit",
        f"nproc={limits.processes}:{limits.processes}",
        "--env",
        f"OMP_NUM_THREADS={threads}",
        "--env",
        f"TORCHINDUCTOR_COMPILE_THREADS={threads}",
    ]


#: Where the image keeps its home folder (written by the compilers' caches): a fresh tmpfs per container.
CONTAINER_HOME = "/home/course"


def nested_sandbox_args(engine: list[str]) -> list[str]:
    """What lets the grader inside the container isolate each graded process with bubblewrap: a fresh
    ``/proc`` in a nested PID namespace, which the engines' masked ``/proc`` otherwise refuses."""
    return ["--security-opt", "unmask=ALL"] if is_podman(engine) else ["--security-opt", "systempaths=unconfined"]


def grading_args(engine: list[str]) -> list[str]:
    """A grading container's filesystem: read-only, with a private ``/tmp`` and home (tmpfs), and what the
    grader inside needs to isolate each graded process again (:func:`nested_sandbox_args`)."""
    return [
        "--read-only",
        "--tmpfs",
        "/tmp:rw,exec,mode=1777",
        "--tmpfs",
        f"{CONTAINER_HOME}:rw,exec,mode=1777",
        *nested_sandbox_args(engine),
    ]


def run_command(
    engine: list[str],
    image: str,
    *,
    name: str,
    submission: Path,
    out: Path,
    limits: ContainerLimits,
    grader_args: list[str],
    gpus: bool,
) -> list[str]:
    """The ``run`` command grading ``submission`` (a folder or a ``.zip``) into ``out`` in ``image``."""
    inside = CONTAINER_SUBMISSION + (".zip" if submission.is_file() else "")
    return [
        *engine,
        "run",
        "--name",
        name,
        *isolation_args(limits),
        *grading_args(engine),
        *(gpu_args(engine) if gpus else []),
        *user_args(engine),
        "--mount",
        f"type=bind,source={submission.resolve()},target={inside},readonly",
        "--mount",
        f"type=bind,source={out.resolve()},target={CONTAINER_OUT}",
        image,
        "run",
        inside,
        "--out",
        CONTAINER_OUT,
        *grader_args,
    ]


def _quiet(engine: list[str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*engine, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False
    )


def run_container(engine: list[str], command: list[str], *, name: str, log: Path, wall_clock_s: float) -> ContainerRun:
    """Run ``command`` (from :func:`run_command`), killing container ``name`` after ``wall_clock_s``.

    The container is removed afterwards whatever happened.

    Raises:
        ContainerError: the engine could not start the container (bad image, bad option).
    """
    start = time.monotonic()
    timed_out = False
    try:
        with open(log, "wb") as sink:
            client = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT)
            try:
                exit_code = client.wait(timeout=wall_clock_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _quiet(engine, "kill", name)
                try:
                    exit_code = client.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    client.kill()
                    exit_code = client.wait()
        state = _quiet(engine, "inspect", "--format", "{{.State.OOMKilled}}", name)
        oom_killed = state.stdout.strip().lower() == "true"
    finally:
        _quiet(engine, "rm", "--force", name)
    wall = time.monotonic() - start
    tail = truncate_text(log.read_text(encoding="utf-8", errors="replace")[-4000:], 3000)
    # 125-127: the engine itself failed (no such image, bad option, entry point not executable).
    if not timed_out and exit_code in (125, 126, 127) and not (log.parent / SUMMARY_FILE).is_file():
        raise ContainerError(f"the container engine could not run the image (exit {exit_code}): {tail.strip()}")
    return ContainerRun(exit_code, timed_out, oom_killed, round(wall, 3), tail)


# ---------------------------------------------------------------- the batch runner


def _container_name(student: str) -> str:
    safe = re.sub(r"[^a-zA-Z0-9_.-]", "-", student)[:40].strip(".-") or "student"
    return f"grader-{safe}-{uuid.uuid4().hex[:8]}"


def _clear(out: Path) -> None:
    """Remove a previous grading of this student, so no stale result can be mistaken for a new one."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / RAW_DIR, ignore_errors=True)
    shutil.rmtree(out / SUBMITTED_DIR, ignore_errors=True)
    for name in (SUMMARY_FILE, RUBRIC_FILE, SUBMISSION_FILE, CONTAINER_LOG):
        (out / name).unlink(missing_ok=True)


class ContainerRunner:
    """A :data:`grader.runners.batch.Runner` grading each submission in its own container of ``image``.

    Args:
        image: the course image (built from the top-level ``Dockerfile``).
        engine: the engine command (see :func:`find_engine`).
        limits: the container's resources and wall-clock limit.
    """

    def __init__(
        self,
        image: str,
        engine: list[str],
        limits: ContainerLimits = ContainerLimits(),
        *,
        unsafe_no_sandbox: bool = False,
    ) -> None:
        self.image, self.engine, self.limits = image, engine, limits
        self.unsafe_no_sandbox = unsafe_no_sandbox

    def grader_args(self, setup) -> list[str]:
        """The ``run`` options that make the container grade like this batch (labs, GPU, time limits)."""
        return [
            "--labs",
            ",".join(spec.id for spec in setup.labs),
            "--gpu",
            setup.options.gpu,
            *time_limit_args(setup.options.limits),
            *(["--unsafe-no-sandbox"] if self.unsafe_no_sandbox else []),
        ]

    def wall_clock_s(self, setup) -> float:
        if self.limits.wall_clock_s is not None:
            return self.limits.wall_clock_s
        return submission_budget_s(setup.rubric, setup.options.limits) + GRADING_MARGIN_S

    def wants_gpu(self, setup) -> bool:
        """GPUs are passed in with ``--gpu on``, and with ``auto`` where the host has an NVIDIA driver."""
        return setup.options.gpu == "on" or (setup.options.gpu == "auto" and shutil.which("nvidia-smi") is not None)

    def __call__(self, submission: Path, out: Path, setup, student: str) -> SubmissionResult:
        from grader.scoring.score import rescore

        _clear(out)
        if os.getuid() == 0:
            out.chmod(0o777)  # the image's unprivileged user writes here
        name = _container_name(student)
        wall_clock = self.wall_clock_s(setup)
        command = run_command(
            self.engine,
            self.image,
            name=name,
            submission=submission,
            out=out,
            limits=self.limits,
            grader_args=self.grader_args(setup),
            gpus=self.wants_gpu(setup),
        )
        run = run_container(self.engine, command, name=name, log=out / CONTAINER_LOG, wall_clock_s=wall_clock)
        # The maximum comes from this side's pristine rubric, never from a file the container wrote.
        setup.rubric.write(out / RUBRIC_FILE)
        if run.oom_killed:
            status, reason = "crashed", f"the container ran out of memory (limit {self.limits.memory}) and was killed"
        elif run.timed_out:
            status, reason = (
                KILLED_STATUS,
                f"the container ran over its wall-clock limit ({wall_clock:g} s) and was killed",
            )
        elif run.exit_code in (EXIT_OK, EXIT_GRADER_FAULT) and (out / SUMMARY_FILE).is_file():
            # graded (exit 1: some lab hit a grader error, which its summary records)
            result = rescore(out)
            write_outputs(result, out)
            return result
        else:
            status = FAILED_STATUS
            reason = f"the container exited with code {run.exit_code} without a result: {run.log_tail.strip()[-600:]}"
        # Labs that finished before the container died keep their points (their reports are complete);
        # the others score 0 with the reason. `grader score` re-scores this folder like any other.
        meta = read_json(out / SUBMISSION_FILE) or {}
        meta.update(
            submission=student,
            gpu=setup.options.gpu,
            not_run_reason=reason,
            not_run_status=status,
            flags=[*meta.get("flags", []), reason],
        )
        write_submission_meta(out, meta)
        result = rescore(out)
        write_outputs(result, out)
        return result


# ---------------------------------------------------------------- command-line options (batch)
