"""How long each command a student document shows may take in the release check: limits in CPU time,
derived from the times the commands took when they were recorded.

The release check (:func:`grader.release.student_docs.run_documented_commands`) runs every documented
command's cheap form on the untouched starter. A fixed wall-clock limit makes its verdict depend on how
busy the machine is: the same command passes on an idle machine and times out beside a CPU hog. So, as
for graded tests (:mod:`grader.execute.limits`), a command is held to the **CPU time** it uses, which a
busy machine does not change, with a wall-clock backstop for a command that sleeps or deadlocks::

    CPU limit  = max(MIN_CPU_S, TIME_FACTOR x the CPU time recorded for that command)
                 (UNMEASURED_CPU_S for a command never recorded)
    wall limit = WALL_FACTOR x its CPU limit

A command's CPU time is its whole process tree's (nox, the lab's Python, pytest and what they start),
measured from ``/proc`` while it runs (:func:`grader.execute.resources.cpu_seconds`) and exactly, from
``wait4``, once it has ended.

The times live in the course root's ``release_times.json``, written by
``python -m grader release --out DIST --record-times`` (each command's CPU seconds on the machine
that recorded them)::

    {"schema": "release-times/1", "recorded": {"date", "cpus", "platform", "python"},
     "cpu": {"-m nox -s lab01 -- -x": 5.2, ...}}
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from grader.course.reference_times import recorded_here
from grader.execute.resources import cpu_seconds, run_processes

TIMES_FILE = "release_times.json"
SCHEMA = "release-times/1"
#: A command may take this many times its recorded CPU time...
TIME_FACTOR = 10.0
#: ...but never less than this many CPU seconds (a command recorded at 0.3 s still starts Python and torch).
MIN_CPU_S = 30.0
#: The CPU limit of a command no recording has timed.
UNMEASURED_CPU_S = 300.0
#: The wall-clock backstop is this many times the CPU limit.
WALL_FACTOR = 3.0
#: How often a running command's CPU time is measured.
POLL_S = 0.5
#: The end of a command's output that is kept (its verdict reads the last lines).
OUTPUT_KEPT_BYTES = 1024 * 1024


@dataclass(frozen=True)
class CommandLimit:
    """One command's limits: CPU seconds, wall-clock seconds (the backstop), and how they were derived."""

    cpu_s: float
    wall_s: float
    basis: str


def read_command_times(course_root: Path) -> dict[str, float]:
    """The recorded CPU seconds of each command (its :func:`command_key`); empty without a readable file."""
    try:
        data = json.loads((course_root / TIMES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    cpu = data.get("cpu") if isinstance(data, dict) and data.get("schema") == SCHEMA else None
    if not isinstance(cpu, dict):
        return {}
    return {str(key): float(value) for key, value in cpu.items() if isinstance(value, (int, float))}


def write_command_times(course_root: Path, times: dict[str, float]) -> Path:
    """Write ``times`` (command key -> CPU seconds) to the course root's :data:`TIMES_FILE`."""
    path = course_root / TIMES_FILE
    data = {
        "schema": SCHEMA,
        "recorded": recorded_here(),
        "cpu": {key: round(value, 2) for key, value in sorted(times.items())},
    }
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path


def command_key(argv: tuple[str, ...], env: tuple[tuple[str, str], ...] = ()) -> str:
    """How a command is named in the times file: its arguments after the interpreter, with its variables."""
    return " ".join([*(f"{name}={value}" for name, value in env), *argv[1:]])


def limit_for(key: str, times: dict[str, float]) -> CommandLimit:
    """The limits of the command ``key`` (see the module docstring)."""
    recorded = times.get(key)
    if recorded is None:
        cpu, basis = UNMEASURED_CPU_S, "never recorded"
    elif TIME_FACTOR * recorded <= MIN_CPU_S:
        cpu, basis = MIN_CPU_S, f"the minimum; recorded at {recorded:.1f} s"
    else:
        cpu, basis = TIME_FACTOR * recorded, f"{TIME_FACTOR:g} x the recorded {recorded:.1f} s"
    return CommandLimit(round(cpu, 1), round(WALL_FACTOR * cpu, 1), basis)


@dataclass(frozen=True)
class Finished:
    """How a limited command ended: its exit status (None when killed), output, CPU time, and what it ran over."""

    returncode: int | None
    output: str
    cpu_s: float
    over: str = ""


def run_limited(argv: tuple[str, ...], *, cwd: Path, env: dict[str, str], limit: CommandLimit) -> Finished:
    """Run ``argv`` in its own session, killing the whole session once it passes ``limit``."""
    with tempfile.TemporaryFile() as sink:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        start, over = time.monotonic(), ""
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if cpu_seconds(run_processes(process.pid)) > limit.cpu_s:
                over = f"used over {limit.cpu_s:g} s of CPU time ({limit.basis})"
            elif time.monotonic() - start > limit.wall_s:
                over = f"ran over {limit.wall_s:g} s of wall clock ({WALL_FACTOR:g} x its CPU limit)"
            if over:
                os.killpg(process.pid, signal.SIGKILL)
                _, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(POLL_S)
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        try:
            os.killpg(process.pid, signal.SIGKILL)  # whatever it left running in its session
        except ProcessLookupError:
            pass
        size = sink.seek(0, os.SEEK_END)
        sink.seek(max(0, size - OUTPUT_KEPT_BYTES))
        output = sink.read().decode("utf-8", errors="replace")
    return Finished(None if over else process.returncode, output, usage.ru_utime + usage.ru_stime, over)
