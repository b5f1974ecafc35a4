"""Text a student reads: no path of the grader's machine, messages cut where a reader can stop.

A graded test's message and a lab's reason come from a process that ran in the grader's sandbox, so
they name files where the grader put them (``/tmp/grader-x1y2/course/lab01_fx_passes/conv_bn.py``,
``/opt/venv/lib/python3.12/site-packages/torch/fx/graph.py``, a test's ``/tmp/pytest-of-nobody/...``
scratch folder). A student knows their files by the course's own layout, and a path of the grader's
machine says nothing to them (and something about the machine to anyone). :func:`course_relative`
rewrites every absolute path:

- inside the course (a segment that is one of its top-level folders: a lab's package, ``labkit``,
  ``grader``): from that folder on, ``lab01_fx_passes/conv_bn.py``;
- inside an installed package (``site-packages``, ``dist-packages``) or the standard library
  (``lib/python3.12``): from the package on, ``torch/fx/graph.py``;
- anything else (a scratch folder, the grader's home): its last component only, as ``.../name``.

:func:`student_message` also shortens a message with :func:`labkit.step_summary.shorten` (a sentence
or clause boundary, never mid-word) instead of a cut at a character count.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from labkit.step_summary import shorten

#: Top-level folders of every course besides its labs' packages.
COURSE_FOLDERS = ("labkit", "grader", "solutions")
#: Folders after which an installed module's own path begins.
INSTALL_ROOTS = ("site-packages", "dist-packages")
_STDLIB = re.compile(r"^python\d+(\.\d+)?$")
#: An absolute POSIX path of two or more components (not a ratio like ``3/4``, not part of a URL).
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~-])/(?:[^\s/'\"<>()\[\]{},;|`]+/)+[^\s/'\"<>()\[\]{},;|`]*")


def _relative(path: str, course_folders: frozenset[str]) -> str:
    trailing = re.search(r"[.:]+$", path)  # a sentence's full stop or a ``file.py:12:`` colon is not the path's
    tail = trailing.group() if trailing and not path.endswith(".py") else ""
    segments = [segment for segment in path[: len(path) - len(tail)].split("/") if segment]
    if not segments:
        return path
    for index, segment in enumerate(segments):
        if segment in course_folders:
            return "/".join(segments[index:]) + tail
    for index in range(len(segments) - 1, -1, -1):
        if segments[index] in INSTALL_ROOTS or (
            _STDLIB.match(segments[index]) and index and segments[index - 1] == "lib"
        ):
            if index + 1 < len(segments):
                return "/".join(segments[index + 1 :]) + tail
    return ".../" + segments[-1] + tail


def course_relative(text: str, packages: Iterable[str] = ()) -> str:
    """``text`` with every absolute path rewritten as the student knows it (see the module docstring).

    Args:
        packages: the labs' package names (``lab01_fx_passes``); :data:`COURSE_FOLDERS` are added.
    """
    folders = frozenset((*packages, *COURSE_FOLDERS))
    return _ABSOLUTE_PATH.sub(lambda match: _relative(match.group(), folders), text)


def student_message(text: str, packages: Iterable[str] = (), limit: int = 300) -> str:
    """One line for a table cell: paths made course-relative, at most ``limit`` characters, cut cleanly."""
    return shorten(course_relative(text, packages), limit)
