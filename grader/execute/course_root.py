"""Where the course is inside a submission: one rule for folders and for zips (before extraction).

Students wrap the course in folders of their own (``alice.zip/alice/course/...``; a class's zips each
unzipped into a folder named after the student), with a README or notes beside it, and sometimes an
old copy beside it (``results/``, ``graded/``), an emptied one, or one holding only caches. The course
root is the shallowest folder, up to :data:`MAX_WRAPPERS` levels down, holding a lab package folder
that holds a file of the course (not a cache, not build or grading output: an empty or cache-only
copy holds none). Folders named like output (:data:`grader.course.labs.OUTPUT_NAMES`) lose to the
others at any depth. Several at the same depth, or none: the submission's top is the root (graded as
given). A zip of ``lab01_fx_passes/`` alone is a course with that one lab: its top holds the lab.

One rule (:func:`choose_course_root`) judges the holders found on disk (:func:`holders_on_disk`: links
never followed) and in a zip's entry names before anything is extracted (:func:`holders_in_zip`), so a
folder and its zip give the same root. Caches, environments and macOS metadata are never searched.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Iterable
from pathlib import Path, PurePosixPath

from grader.course.labs import OUTPUT_NAMES, is_cache, is_noise

#: How many folders deep a course may be wrapped (``alice.zip`` -> ``alice/`` -> ``course/`` -> labs).
MAX_WRAPPERS = 3
#: The folder macOS's Archive Utility adds to every zip (resource forks of the same files).
MACOS_METADATA = "__MACOSX"
TOP = PurePosixPath()


#: Most entries looked at under one lab folder on disk before it counts as holding nothing of the course.
MAX_LOOKED_AT = 10_000


def _searched(name: str) -> bool:
    return not is_cache(Path(name)) and name != MACOS_METADATA


def choose_course_root(holders: Iterable[PurePosixPath]) -> PurePosixPath:
    """The course root among ``holders``: the folders (relative to the top, :data:`TOP` for the top
    itself) with a lab package folder that holds a file of the course. Folders named like output lose to
    the others, at any depth; then the shallowest wins, if it is the only one at its depth; otherwise
    (none, or several at one depth) the top."""
    holders = set(holders)
    own = {folder for folder in holders if not OUTPUT_NAMES.intersection(folder.parts)}
    pool = own or holders
    if not pool:
        return TOP
    depth = min(len(folder.parts) for folder in pool)
    shallowest = [folder for folder in pool if len(folder.parts) == depth]
    return shallowest[0] if len(shallowest) == 1 else TOP


def holders_in_zip(names: Iterable[str], lab_packages: Collection[str]) -> set[PurePosixPath]:
    """The folders a zip's file entries (``/``-separated ``names``) show holding a lab package with a
    file that would be extracted: folder entries, caches and output inside the lab hold nothing."""
    labs = set(lab_packages)
    holders = set()
    for name in names:
        if name.endswith("/"):
            continue  # a folder entry: an empty folder is no course
        parts = PurePosixPath(name).parts
        for depth in range(min(MAX_WRAPPERS, len(parts) - 2) + 1):
            if depth and not _searched(parts[depth - 1]):
                break  # inside a cache or macOS metadata: nothing below is the course
            if parts[depth] in labs and not any(is_noise(Path(part)) for part in parts[depth + 1 :]):
                holders.add(PurePosixPath(*parts[:depth]))
    return holders


def holders_on_disk(top: Path, lab_packages: Collection[str]) -> set[PurePosixPath]:
    """The folders under ``top`` (down to :data:`MAX_WRAPPERS` levels) holding a lab package folder with
    a regular file of the course in it (not a cache, not output); links are never followed."""
    holders, level = set(), [TOP]
    for depth in range(MAX_WRAPPERS + 1):
        for folder in level:
            if any(_is_real_dir(top / folder / name) and _holds_a_file(top / folder / name) for name in lab_packages):
                holders.add(folder)
        if depth < MAX_WRAPPERS:
            level = [folder / name for folder in level for name in _subfolder_names(top / folder)]
    return holders


def links_near_top(top: Path, limit: int = 5) -> list[PurePosixPath]:
    """The symbolic links among the folders where a course is looked for (down to :data:`MAX_WRAPPERS`
    levels, at most ``limit`` of them): the grader never follows one, so a course behind a link
    (``alice/course -> /home/alice/course``) is not found, and the result should say so."""
    links, level = [], [TOP]
    for depth in range(MAX_WRAPPERS + 1):
        for folder in level:
            try:
                entries = sorted(os.scandir(top / folder), key=lambda entry: entry.name)
            except OSError:
                continue
            links += [folder / entry.name for entry in entries if entry.is_symlink() and _searched(entry.name)]
        if depth < MAX_WRAPPERS:
            level = [folder / name for folder in level for name in _subfolder_names(top / folder)]
    return links[:limit]


def _holds_a_file(folder: Path) -> bool:
    """Whether ``folder`` holds a regular file outside caches and output (looks at most at
    :data:`MAX_LOOKED_AT` entries; no recursion, links not followed)."""
    stack, looked_at = [folder], 0
    while stack and looked_at < MAX_LOOKED_AT:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            looked_at += 1
            if is_noise(Path(entry.name)):
                continue
            if entry.is_file(follow_symlinks=False):
                return True
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
    return False


def _subfolder_names(folder: Path) -> list[str]:
    try:
        names = sorted(entry.name for entry in os.scandir(folder))
    except OSError:
        return []
    return [name for name in names if _searched(name) and _is_real_dir(folder / name)]


def _is_real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False
