"""Run one lab's pytest in its own process, with limits, and keep everything it left behind.

This is the only place the grader starts student code. One lab = one subprocess:

- its own **process group** (``start_new_session``), so the per-lab wall-clock timeout kills the whole
  tree (pytest plus anything the student's code started) with one ``killpg``;
- **pytest-timeout** per test (signal method): an infinite loop fails that one test and the run goes on;
- ``PYTHONPATH`` = the sandbox, which shadows the course's editable install (setuptools' editable finder
  sits *after* the path finder on ``sys.meta_path``);
- a scrubbed environment: no ``PYTEST_ADDOPTS``/``PYTEST_PLUGINS`` from the caller, ``LABKIT_IMPL=student``,
  and with ``gpu="off"`` no visible CUDA device (GPU tests skip and are graded as pending);
- console output goes to a file that a watchdog caps while the run goes on, and is trimmed to its head
  and tail afterwards; the JSON report is rewritten with long strings shortened when it is huge.

Artifacts in ``raw_dir``: ``run.json`` (command, exit code, timing, what was killed), ``events.jsonl``
(:mod:`grader.pytest_probe`), ``report.json`` (pytest-json-report, absent after a crash), ``output.txt``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from grader.artifacts import EVENTS_FILE, OUTPUT_FILE, REPORT_FILE, RUN_FILE
from grader.limits import shorten_strings, trim_file

GPU_MODES = ("auto", "on", "off")
#: Environment variables that would let the caller's shell change how pytest runs the student's code.
SCRUBBED_ENV = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "LABKIT_IMPL")
#: pytest-json-report sections the grader never reads (captured streams can be megabytes).
REPORT_OMIT = ("collectors", "log", "streams", "traceback", "keywords", "warnings")


@dataclass(frozen=True)
class RunLimits:
    """Time and size limits of one lab's run.

    Attributes:
        test_timeout_s: per-test limit (pytest-timeout), setup and teardown included.
        lab_timeout_s: wall-clock limit of the whole lab's pytest process tree.
        output_cap_bytes: console output beyond this kills the run (a flood, not a test).
        output_keep_bytes: console output kept after the run (head and tail halves).
        report_cap_bytes: a JSON report larger than this is rewritten with long strings shortened.
    """

    test_timeout_s: float = 300.0
    lab_timeout_s: float = 1800.0
    output_cap_bytes: int = 64 * 1024 * 1024
    output_keep_bytes: int = 64 * 1024
    report_cap_bytes: int = 4 * 1024 * 1024


@dataclass(frozen=True)
class RunRecord:
    """How one lab's pytest process ended (``run.json``)."""

    lab: str
    package: str
    command: list[str]
    exit_code: int | None
    timed_out: bool
    output_flooded: bool
    wall_s: float
    canary: str
    lab_timeout_s: float


def pytest_env(pythonpath: Path, gpu: str) -> dict[str, str]:
    """The environment of a graded pytest process (see the module docstring)."""
    if gpu not in GPU_MODES:
        raise ValueError(f"gpu={gpu!r}: expected one of {', '.join(GPU_MODES)}")
    env = {key: value for key, value in os.environ.items() if key not in SCRUBBED_ENV}
    env.update(
        PYTHONPATH=str(pythonpath),
        LABKIT_IMPL="student",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONHASHSEED="0",
    )
    if gpu == "off":
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["TRITON_INTERPRET"] = "1"  # kernels run in Triton's CPU interpreter, as on a student laptop
    return env


def config_args(root: Path) -> list[str]:
    """Pin pytest's rootdir and config file to the course copy, whatever sits above it on disk."""
    config = root / "pyproject.toml"
    return ["--rootdir", str(root), "-c", str(config) if config.is_file() else os.devnull]


def pytest_command(python: str, package: str, root: Path, *extra: str) -> list[str]:
    """``python -m pytest <package>`` with the grader's plugin and no cache writes."""
    return [python, "-m", "pytest", package, "-p", "no:cacheprovider", "-p", "grader.pytest_probe",
            *config_args(root), *extra]


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def supervise(command: list[str], *, cwd: Path, env: dict[str, str], output: Path,
              limits: RunLimits) -> tuple[int | None, bool, bool, float]:
    """Run ``command`` in its own process group; return (exit code, timed out, flooded, wall seconds).

    The exit code is negative for a signal (``-11`` = segfault) and None only if waiting failed.
    """
    start = time.monotonic()
    timed_out = flooded = False
    with open(output, "wb") as sink:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=sink,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while process.poll() is None:
                if time.monotonic() - start > limits.lab_timeout_s:
                    timed_out = True
                elif output.stat().st_size > limits.output_cap_bytes:
                    flooded = True
                if timed_out or flooded:
                    _kill_group(process)
                    break
                time.sleep(0.05)
            exit_code = process.wait(timeout=30)
        finally:
            if process.poll() is None:
                _kill_group(process)
                process.wait()
            _kill_group(process)  # children the student's code left behind in the group
    return exit_code, timed_out, flooded, time.monotonic() - start


def run_lab(sandbox: Path, lab_id: str, package: str, raw_dir: Path, *, canary: str, gpu: str,
            limits: RunLimits, python: str = sys.executable) -> RunRecord:
    """Run one lab's graded tests in ``sandbox`` and store the artifacts in ``raw_dir``.

    Both paths may be relative to this process's working directory: they are made absolute here,
    because pytest runs with the sandbox as its working directory.
    """
    sandbox, raw_dir = sandbox.absolute(), raw_dir.absolute()
    raw_dir.mkdir(parents=True, exist_ok=True)
    for name in (EVENTS_FILE, REPORT_FILE, OUTPUT_FILE):
        (raw_dir / name).unlink(missing_ok=True)
    command = pytest_command(
        python, package, sandbox,
        "--grader-events", str(raw_dir / EVENTS_FILE),
        "--grader-canary", canary,
        "--json-report", "--json-report-file", str(raw_dir / REPORT_FILE),
        "--json-report-omit", *REPORT_OMIT,
        "--timeout", str(limits.test_timeout_s),
        "-q", "-p", "no:randomly",
    )
    exit_code, timed_out, flooded, wall = supervise(
        command, cwd=sandbox, env=pytest_env(sandbox, gpu), output=raw_dir / OUTPUT_FILE, limits=limits
    )
    trim_file(raw_dir / OUTPUT_FILE, limits.output_keep_bytes)
    _shrink_report(raw_dir / REPORT_FILE, limits.report_cap_bytes)
    record = RunRecord(lab_id, package, command, exit_code, timed_out, flooded, round(wall, 3), canary,
                       limits.lab_timeout_s)
    (raw_dir / RUN_FILE).write_text(json.dumps(asdict(record), indent=1) + "\n", encoding="utf-8")
    return record


def _shrink_report(path: Path, cap: int) -> None:
    """Rewrite a huge JSON report with long strings shortened (an unreadable one is left as it is)."""
    if not path.is_file() or path.stat().st_size <= cap:
        return
    try:
        report = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError:
        trim_file(path, cap)
        return
    path.write_text(json.dumps(shorten_strings(report, 4000)), encoding="utf-8")
