"""What a graded process may see and reach: least privilege, configured here and nowhere else.

A graded pytest process runs a student's code with the grader's user. Left alone, that code could read
the reference solutions next to the grader, the held-out tests in its own sandbox, the grader's cache
and outputs, every environment variable, the network; and leave a daemon behind that rewrites results
after the run. So each process runs under `bubblewrap <https://github.com/containers/bubblewrap>`_
(``bwrap``, the sandbox Flatpak uses), which gives it:

- **its own mount view**, read-only, of exactly what it needs: the system (``/usr``, ``/etc``...), the
  grading interpreter and its packages, the grader's and the harness's installed packages (``grader``
  for the probe plugin, ``labkit``; their tests hidden), and the :class:`View` the supervisor names: the sandbox copy of the course (never
  ``solutions/``; held-out tests only in a held-out run), a writable folder for the JSON report and
  one for the submission's compiler caches. The rest of the machine (the instructor's repository,
  home, the rubric cache, other students, the grader's outputs) does not exist in it. ``/tmp`` is private;
- **its own PID namespace**, which dies with it: no process it starts outlives the run;
- **no network** (a namespace with loopback only), **no capabilities**, the user ``nobody``, and a
  clean environment (:func:`grader.execute.command.pytest_env`).

:class:`Unisolated` runs the command as it is (its own process group only): for a student grading
their own copy on a laptop without bubblewrap. An instructor's grading (a course with solutions or
held-out tests) refuses to run unisolated unless asked with ``--unsafe-no-sandbox``
(:func:`choose_isolation`).

What isolation does not do: the code under test shares its process with pytest and the grader's
probe, and can change either in memory. That is detected (canaries, the checked event stream), not
prevented: see :mod:`grader.execute.channel`.
"""

from __future__ import annotations

import functools
import json
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grader
import labkit
from grader.execute.preflight import GraderEnvironmentError

#: Folders every process needs (read-only): programs, libraries, configuration, the kernel's view.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc", "/opt", "/sys")
#: The user a graded process runs as inside its namespace.
NOBODY = 65534
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install -y bubblewrap)"


class IsolationError(GraderEnvironmentError):
    """Grading cannot be isolated here and was not allowed to run without it (the message says why)."""


@dataclass(frozen=True)
class View:
    """What one graded process may see besides the system and the interpreter.

    Attributes:
        readable: folders visible read-only, at the same path.
        writable: folders visible read-write, at the same path.
        hidden: folders inside those that appear empty (another lab's or part's held-out tests).
        cwd: the working directory.
    """

    readable: tuple[Path, ...]
    writable: tuple[Path, ...]
    hidden: tuple[Path, ...]
    cwd: Path


class Isolation(Protocol):
    """How a graded command is started (see the module docstring)."""

    name: str

    def command(self, argv: list[str], env: dict[str, str], view: View) -> tuple[list[str], dict[str, str]]:
        """The command line and environment that run ``argv`` (with ``env``) isolated to ``view``."""
        ...

    def exit_status(self, code: int) -> int:
        """The graded process's own exit status from the started command's (negative: killed by that signal)."""
        ...


class Unisolated:
    """No isolation: the process has the grader's user, files, network and environment (see the docstring)."""

    name = "none"

    def command(self, argv: list[str], env: dict[str, str], view: View) -> tuple[list[str], dict[str, str]]:
        return list(argv), dict(env)

    def exit_status(self, code: int) -> int:
        return code


@functools.cache
def interpreter_paths(python: str) -> tuple[Path, ...]:
    """Folders the interpreter ``python`` loads code from: its prefixes, ``sys.path`` and its executable's folder."""
    script = ("import json, os, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, "
              "os.path.dirname(os.path.realpath(sys.executable)), *sys.path]))")
    done = subprocess.run([python, "-E", "-c", script], cwd="/", capture_output=True, text=True, timeout=120,
                          check=False)
    if done.returncode != 0:
        raise IsolationError(f"{python} could not describe its own paths: {done.stderr.strip()[-300:]}")
    return tuple(Path(entry) for entry in json.loads(done.stdout.strip().splitlines()[-1]) if entry)


class Bubblewrap:
    """Each process in its own bubblewrap namespace (see the module docstring).

    Args:
        python: the grading interpreter (its folders are made visible).
        course_root: the pristine course; no folder holding it is made visible whole.
        executable: the ``bwrap`` program.
    """

    name = "bubblewrap"

    def __init__(self, python: str, course_root: Path, executable: str = "bwrap") -> None:
        self.python, self.course_root, self.executable = python, Path(course_root).resolve(), executable

    def _runtime_paths(self) -> list[Path]:
        """The interpreter's folders, except any that would show the course root (and so its solutions)."""
        paths = []
        for path in interpreter_paths(self.python):
            if path.is_dir() and not (path == self.course_root or path in self.course_root.parents):
                paths.append(path)
        return paths

    def command(self, argv: list[str], env: dict[str, str], view: View) -> tuple[list[str], dict[str, str]]:
        packages = [Path(module.__file__).resolve().parent for module in (grader, labkit)]
        args = [shutil.which(self.executable) or self.executable, "--die-with-parent", "--unshare-all", "--new-session", "--cap-drop", "ALL",
                "--uid", str(NOBODY), "--gid", str(NOBODY)]
        for name in SYSTEM_PATHS:
            path = Path(name)
            if path.is_symlink():
                args += ["--symlink", str(path.readlink()), name]
            elif path.is_dir():
                args += ["--ro-bind", name, name]
        args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        for device in sorted(Path("/dev").glob("nvidia*")):  # CUDA needs the driver's devices
            args += ["--dev-bind", str(device), str(device)]
        for path in [*self._runtime_paths(), *packages, *view.readable]:
            args += ["--ro-bind", str(path), str(path)]
        for path in view.writable:
            args += ["--bind", str(path), str(path)]
        for path in [*(package / "tests" for package in packages), *view.hidden]:
            if path.is_dir():
                args += ["--tmpfs", str(path)]
        args += ["--chdir", str(view.cwd), "--clearenv"]
        for key, value in sorted(env.items()):
            args += ["--setenv", key, value]
        return [*args, "--", *argv], {}

    def exit_status(self, code: int) -> int:
        """bubblewrap exits with 128 + N when the process it runs was killed by signal N (as a shell does)."""
        if code > 128:
            try:
                return -signal.Signals(code - 128).value
            except ValueError:
                pass
        return code


@functools.cache
def bubblewrap_problem(executable: str = "bwrap") -> str | None:
    """Why bubblewrap cannot isolate a process here (None when it can): tried once with ``true``."""
    if shutil.which(executable) is None:
        return f"bubblewrap ({executable}) is not installed"
    trial = Bubblewrap(sys.executable, Path("/nonexistent-course"), executable)
    argv, env = trial.command(["true"], {"PATH": "/usr/bin:/bin"}, View((), (), (), Path("/")))
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bubblewrap could not start ({error})"
    if done.returncode != 0:
        return f"bubblewrap cannot create namespaces here: {done.stderr.strip()[-300:]}"
    return None


def choose_isolation(python: str, course_root: Path, *, instructor_course: bool, unsafe: bool,
                     log=lambda line: print(line, file=sys.stderr)) -> Isolation:
    """The isolation a grading gets (see the module docstring).

    Args:
        python: the grading interpreter.
        course_root: the pristine course.
        instructor_course: the course holds solutions or held-out tests (an instructor's grading).
        unsafe: ``--unsafe-no-sandbox`` was given.

    Raises:
        IsolationError: an instructor's grading without working bubblewrap, not allowed to go unisolated.
    """
    if unsafe:
        log("WARNING: --unsafe-no-sandbox: graded code runs with your user, files, network and environment")
        return Unisolated()
    problem = bubblewrap_problem()
    if problem is None:
        return Bubblewrap(python, course_root)
    if instructor_course:
        raise IsolationError(f"cannot isolate the graded code: {problem}. This course holds solutions or held-out "
                             f"tests that graded code must not see: {INSTALL_HINT}, or grade anyway with "
                             "--unsafe-no-sandbox (graded code can then read them)")
    log(f"note: grading unisolated ({problem}): your code runs with your own user and files, as in `nox -s lab01`")
    return Unisolated()
