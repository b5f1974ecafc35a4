"""Read what graded code could have written, as hostile input: no link followed, nothing but a regular
file, never more than a cap, never blocking; and clear the folders it wrote the same way.

Everything a graded process leaves in its writable folders (its JSON report, its caches, its home) is
under its control until the grader reads it: the report may have been replaced by a symbolic link (to
the grader's own ``/proc/self/environ``, to a reference solution), a FIFO or a device whose ``read``
never returns (``/proc/kmsg``), a hard link to another file, or a file of gigabytes. So:

- :func:`read_untrusted` opens a file with ``O_NOFOLLOW | O_NONBLOCK`` inside a folder itself opened
  without following links, checks with ``fstat`` (on the opened file, not its name) that it is a regular
  file with one link, on the folder's own filesystem, no larger than the cap, then reads at most the cap.
  It never raises for what it finds: the answer is the bytes, or why they were not taken (:class:`Taken`).
- :func:`parse_untrusted_json` parses those bytes with a bound on nesting depth (a ``[[[[...]]]]`` report
  must not exhaust the grader's stack or memory), again answering a reason instead of raising.
- :func:`clear_path` removes whatever is at a path (file, link, FIFO, folder tree) without following a
  link out of it, so a folder graded code wrote can be made fresh before the next process.

A problem found here is the submission's (it wrote that), never the grader's: callers record the
reason and go on.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Deepest nesting of lists and objects taken from graded code's JSON (pytest-json-report's is under 10).
MAX_JSON_DEPTH = 64
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
)


@dataclass(frozen=True)
class Taken:
    """What :func:`read_untrusted` took: ``data`` (None when nothing was taken) and why not (``problem``).

    ``missing`` is True when there was no file at all (a process that died before writing it): not a
    problem of the submission's making, so ``problem`` is then empty.
    """

    data: bytes | None
    problem: str = ""
    missing: bool = False


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words (``a symbolic link``, ``a FIFO``...)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_untrusted(path: Path, cap: int) -> Taken:
    """The bytes of ``path``, a regular file graded code may have written, if it is at most ``cap`` bytes.

    ``path``'s folder is opened without following a link (a drop folder replaced by a link is refused
    too), then the file inside it, so neither name can be swapped for a link between check and read.
    """
    try:
        folder = os.open(path.parent, _DIRECTORY_FLAGS)
    except FileNotFoundError:
        return Taken(None, missing=True)
    except OSError as error:
        return Taken(None, f"its folder could not be opened without following links ({error.strerror})")
    try:
        try:
            handle = os.open(path.name, _OPEN_FLAGS, dir_fd=folder)
        except FileNotFoundError:
            return Taken(None, missing=True)
        except OSError as error:  # ELOOP: a symbolic link; ENXIO: a socket; EACCES...
            kind = _lstat_kind(path.name, folder)
            return Taken(None, f"it is {kind}" if kind else f"it could not be opened ({error.strerror})")
        try:
            return _read_open(handle, os.fstat(folder), cap)
        finally:
            os.close(handle)
    finally:
        os.close(folder)


def _lstat_kind(name: str, folder: int) -> str:
    try:
        return kind_of(os.lstat(name, dir_fd=folder).st_mode)
    except OSError:
        return ""


def _read_open(handle: int, folder: os.stat_result, cap: int) -> Taken:
    info = os.fstat(handle)
    if not stat.S_ISREG(info.st_mode):
        return Taken(None, f"it is {kind_of(info.st_mode)}")
    if info.st_nlink != 1:
        return Taken(None, "it is a hard link to another file")
    if info.st_dev != folder.st_dev:
        return Taken(None, "it is a file of another filesystem mounted there")
    if info.st_size > cap:
        return Taken(None, f"it is {info.st_size:,} bytes, over the limit of {cap:,}")
    chunks, left = [], cap + 1  # one byte more than the cap tells a file that grew past it
    while left > 0:
        chunk = os.read(handle, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    data = b"".join(chunks)
    if len(data) > cap:
        return Taken(None, f"it grew past the limit of {cap:,} bytes while being read")
    return Taken(data)


def json_depth_problem(value: Any, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Why ``value`` (parsed JSON) is nested too deeply (None when it is not); iterative, any depth."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > max_depth:
                return f"it is nested more than {max_depth} levels deep"
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return None


def parse_untrusted_json(data: bytes, max_depth: int = MAX_JSON_DEPTH) -> tuple[Any, str]:
    """(the JSON value of ``data``, "") or (None, why it is not taken): not JSON, or nested too deeply.

    Python's parser recurses once per level and stops with ``RecursionError`` near its recursion limit;
    both that and a shallower but still absurd depth are refused here, so no reader of the value
    (which may recurse too) meets it.
    """
    try:
        value = json.loads(data.decode("utf-8", errors="replace"))
    except RecursionError:
        return None, f"it is nested more than {max_depth} levels deep"
    except ValueError as error:
        return None, f"it is not JSON ({str(error)[:200]})"
    problem = json_depth_problem(value, max_depth)
    return (None, problem) if problem else (value, "")


def read_untrusted_json(path: Path, cap: int, max_depth: int = MAX_JSON_DEPTH) -> tuple[Any, str]:
    """:func:`read_untrusted` then :func:`parse_untrusted_json`: (value, "") or (None, why not; "" if missing)."""
    taken = read_untrusted(path, cap)
    if taken.data is None:
        return None, taken.problem
    return parse_untrusted_json(taken.data, max_depth)


def clear_path(path: Path) -> None:
    """Remove whatever is at ``path``, never following a link (a link is removed, not what it names).

    A folder tree is removed by :func:`remove_tree`: however deep graded code made it, and whatever
    permissions it left on it.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        path.unlink()
        return
    remove_tree(path)


def remove_tree(path: Path) -> None:
    """Remove the folder tree at ``path`` without recursion and without following links.

    ``shutil.rmtree`` recurses once per level: a tree 1,500 folders deep (cheap to make, with
    ``mkdir(dir_fd=...)``) raises ``RecursionError``. coreutils' ``chmod -R`` and ``rm -rf`` walk with
    ``fts``, which needs no recursion, opens each folder relative to its parent, and never enters a
    linked folder: the first makes every folder the grader owns readable again (graded code may have
    made some ``000``), the second removes the tree. ``shutil.rmtree`` is used only where ``rm`` is missing.

    Raises:
        OSError: the tree is still there afterwards (``rm``'s message says why).
    """
    try:
        subprocess.run(["chmod", "-R", "u+rwx", "--", str(path)], capture_output=True, check=False)
        done = subprocess.run(["rm", "-rf", "--", str(path)], capture_output=True, text=True, check=False)
    except FileNotFoundError:  # no coreutils: Python's own, which handles every tree but the deepest

        def writable_then_retry(function, name, _error):
            os.chmod(os.path.dirname(name), stat.S_IRWXU, follow_symlinks=False)
            if os.path.isdir(name) and not os.path.islink(name):
                os.chmod(name, stat.S_IRWXU)
                shutil.rmtree(name)
            else:
                os.unlink(name)

        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=writable_then_retry)
        else:
            shutil.rmtree(path, onerror=writable_then_retry)
        return
    if os.path.lexists(path):
        raise OSError(f"could not remove {path}: {done.stderr.strip()[-300:]}")


def fresh_folder(path: Path) -> Path:
    """``path`` as a new empty folder, whatever was there before (see :func:`clear_path`)."""
    clear_path(path)
    path.mkdir(parents=True)
    return path
