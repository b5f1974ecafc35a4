"""Before grading anyone: can this machine grade at all? (``python -m grader.execute.preflight`` is the check.)

A student must never be scored for the grader's own failure. Two things break every submission the
same way, and would otherwise look like the student's ``collection-error``:

- **the grading interpreter** lacks what a graded pytest loads: the probe plugin
  (:mod:`grader.execute.probe`, importable from the sandbox, i.e. the course is *installed* there and
  not merely in the working directory), pytest-json-report, or the course's own
  pinned packages (torch...);
- **the output folder** cannot be written.

:func:`check_grading_environment` runs this module in the grading interpreter exactly as a graded
pytest sees the world (an empty working directory, ``PYTHONPATH`` at a folder without the grader) and
raises :class:`GraderEnvironmentError` saying what is missing and what to run instead;
:func:`check_output_folder` tries a write. The grading verbs call both first and grade nothing when
either fails (exit status 2).
"""

from __future__ import annotations

import errno
import functools
import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.execute.command import pytest_env
from labkit.environment import unmet_course_requirements, what_to_run

#: What every graded pytest process imports besides the course: the probe plugin (which also keeps the
#: per-test time limits) and the plugin the grader's command line uses (``--json-report``).
GRADING_MODULES = ("pytest", "pytest_jsonreport", "grader.execute.probe")


class GraderEnvironmentError(RuntimeError):
    """This machine cannot grade (the message says what is missing and what to do)."""


def grading_problems(pyproject: Path) -> list[str]:
    """What the *current* interpreter lacks to run a graded pytest of the course described by ``pyproject``."""
    problems = []
    for name in GRADING_MODULES:
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - any failure to import is the finding
            problems.append(f"cannot import {name} ({error})")
    problems += unmet_course_requirements(pyproject)
    return problems


@functools.cache
def _problems_in(python: str, pyproject: Path) -> tuple[str, ...]:
    with tempfile.TemporaryDirectory(prefix="grader-preflight-") as empty:
        try:
            done = subprocess.run(
                [python, "-m", "grader.execute.preflight", str(pyproject)],
                cwd=empty,
                env=pytest_env(Path(empty), "off"),
                capture_output=True,
                text=True,
                timeout=120,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return (f"{python} could not run ({error})",)
    try:
        return tuple(json.loads(done.stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError):
        output = (done.stdout + done.stderr).strip().splitlines()
        return (f"the grader is not importable there ({output[-1] if output else f'exit {done.returncode}'})",)


def check_grading_environment(
    course_root: Path, python: str = sys.executable, *, command: str = "-m grader ..."
) -> None:
    """Raise :class:`GraderEnvironmentError` unless ``python`` can run a graded pytest of ``course_root``.

    Args:
        course_root: the pristine course (its ``pyproject.toml`` lists the packages it needs).
        python: the interpreter that will run pytest.
        command: the user's command after ``python``, repeated in the advice.
    """
    problems = _problems_in(python, Path(course_root) / "pyproject.toml")
    if problems:
        raise GraderEnvironmentError(
            f"{python} cannot run the graded tests: {'; '.join(problems)}. Nothing was graded "
            f"(no student is scored for the grader's environment).\n{what_to_run(command)}"
        )


def check_output_folder(out: Path) -> None:
    """Raise :class:`GraderEnvironmentError` unless ``out`` can be created and written."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".grader-write-test-"):
            pass
    except OSError as error:
        raise GraderEnvironmentError(
            f"cannot write the results to {out} ({error.strerror or error}): choose another --out, nothing was graded"
        ) from error


#: Free space the grader's scratch folder needs before grading starts (sandboxes, reports, caches).
MIN_SCRATCH_BYTES = 256 * 1024 * 1024
#: Below this much free space after a graded process, a missing or cut report is the disk's doing.
DISK_FULL_BYTES = 8 * 1024 * 1024


def free_bytes(folder: Path) -> int:
    """Free space (for an unprivileged user) on the filesystem holding ``folder``."""
    info = os.statvfs(folder)
    return info.f_bavail * info.f_frsize


def check_scratch_space(folder: Path | None = None, minimum: int = MIN_SCRATCH_BYTES) -> None:
    """Raise :class:`GraderEnvironmentError` unless the scratch folder (``TMPDIR``) has ``minimum`` bytes
    free: on a nearly full disk, pytest's reports come out cut or empty, which would read as the
    submission's doing."""
    folder = Path(folder or tempfile.gettempdir())
    free = free_bytes(folder)
    if free < minimum:
        raise GraderEnvironmentError(
            f"only {free / 2**20:.0f} MiB free in the scratch folder {folder} (grading needs {minimum / 2**20:.0f} "
            "MiB): free some space or point TMPDIR at a larger disk; nothing was graded"
        )


def disk_full_error(folder: Path) -> OSError | None:
    """An ``ENOSPC`` error to raise when ``folder``'s filesystem is (nearly) full, else None: what the
    supervisor asks when a graded process's report is missing or malformed, so that a full disk is the
    grader's failure (a ``grader-error``, regraded later), never the student's."""
    try:
        free = free_bytes(folder)
    except OSError:
        return None
    if free >= DISK_FULL_BYTES:
        return None
    return OSError(errno.ENOSPC, f"the grader's scratch disk is full ({free // 1024} KiB free)", str(folder))


if __name__ == "__main__":
    print(json.dumps(grading_problems(Path(sys.argv[1]))))
