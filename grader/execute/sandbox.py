"""Build the folder a submission is graded in: the pristine course plus ONLY the student's editable files.

A submission is a student's copy of the course (a folder, or a ``.zip`` of one). It may hold anything:
edited tests, an added ``conftest.py`` that marks every test passed, a changed harness, a copy of the
grader, symbolic links pointing at the instructor's files. None of it is used. The sandbox is

1. a fresh copy of the pristine course (tests, harness, lab packages, held-out tests; never
   ``solutions/``), which the graded processes see read-only (:mod:`grader.execute.isolation`; a
   visible-test run sees no held-out test at all),
2. with each lab's ``editable`` files (``lab.toml``) copied over from the submission: regular files
   only, reached without following any symbolic link, inside the submission,
3. and a ``solutions`` package that refuses to import (without isolation, the course's editable
   install would otherwise let student code ``import solutions...`` on an instructor's machine).

:func:`find_tampering` compares everything else the submission has in the places pytest or Python
would look (lab folders, harness, the grader, root config) with the pristine course, and reports each
difference as a flag line: it was ignored, and the TA should know it was tried.
"""

from __future__ import annotations

import filecmp
import os
import stat
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from grader.course.labs import SOLUTIONS_DIR, SUPPORT_PATHS, Course, copy_pristine, is_noise
from grader.execute.archive import MAX_DEPTH, ArchiveError, archive_format_problem, extract_zip
from grader.execute.course_root import choose_course_root, holders_on_disk, links_near_top
from labkit.labspec import TEST_FILE, LabSpec

#: Root files pytest reads as configuration or plugins (flagged when a submission adds or edits them).
ROOT_CONFIG_FILES = ("conftest.py", "pyproject.toml", "pytest.ini", "tox.ini", "setup.cfg", "sitecustomize.py")
#: Files of these kinds, changed or added inside a lab folder or the harness, are flagged as tampering.
CODE_SUFFIXES = (".py", ".pth", ".so", ".toml", ".ini", ".cfg", ".json")
#: The grader's own package: a copy in a submission is never run, but flagged when it differs.
GRADER_DIR = "grader"
#: Most tampering flags listed for one submission (the rest are counted in one line).
MAX_TAMPERING_FLAGS = 50
#: Largest editable file taken from a submission.
MAX_EDITABLE_BYTES = 2 * 1024 * 1024
SOLUTIONS_STUB = '''"""Stand-in installed by the grader: reference solutions are not importable while grading."""

raise ImportError("the reference solutions are not available to graded code")
'''


class SubmissionError(ValueError):
    """The submission cannot be read at all (not a folder or zip; a zip that is empty, encrypted, corrupt,
    unsafe or over a limit): graded as ``bad-submission``, the message saying why."""


@dataclass
class Overlay:
    """What building the sandbox took from the submission and what it flagged."""

    taken: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def unpack_submission(submission: Path, scratch: Path, lab_packages: Collection[str]) -> Path:
    """Return the course folder of a submission, extracting a ``.zip`` into ``scratch`` safely
    (:func:`grader.execute.archive.extract_zip`: limits checked before and while extracting), then
    finding the course inside it (:func:`find_course_root`).

    Raises:
        SubmissionError: for a missing path, another file type (a ``.tar.gz`` is named as such), or a zip
            that is empty, encrypted, unreadable, unsafe or over a limit.
    """
    if submission.is_dir():
        return find_course_root(submission, lab_packages)
    problem = archive_format_problem(submission) if submission.is_file() else "there is no such file or folder"
    if problem:
        raise SubmissionError(f"{submission.name}: {problem}")
    target = scratch / "unpacked"
    try:
        extract_zip(submission, target, lab_packages=lab_packages)
    except ArchiveError as error:
        raise SubmissionError(f"{submission.name}: {error}") from None
    return find_course_root(target, lab_packages)


def find_course_root(folder: Path, lab_packages: Collection[str]) -> Path:
    """The folder of ``folder``'s tree that holds the course, by the rule of
    :mod:`grader.execute.course_root` (the same for zips): the shallowest, up to three levels down, with
    a lab package folder holding a file of the course; ``folder`` itself when there is none, or no single one."""
    return folder.joinpath(*choose_course_root(holders_on_disk(folder, lab_packages)).parts)


def _differs(candidate: Path, pristine: Path) -> bool:
    return not pristine.is_file() or not filecmp.cmp(candidate, pristine, shallow=False)


def _walk(folder: Path, problems: list[tuple[Path, str]]):
    """Every entry under ``folder`` that is not a folder (files, symbolic links, FIFOs...), in name order,
    without following links (a link to a folder is yielded, not entered) and without recursion (a tree
    thousands of levels deep would exhaust Python's stack, as ``os.walk`` does). Noise folders are
    skipped; a folder that cannot be listed, or one deeper than :data:`MAX_DEPTH` levels, is added to
    ``problems`` instead of entered."""
    stack = [(folder, 0)]
    while stack:
        here, depth = stack.pop()
        try:
            entries = sorted(os.scandir(here), key=lambda entry: entry.name)
        except OSError as error:
            problems.append((here, f"cannot be read ({error.strerror})"))
            continue
        subfolders = []
        for entry in entries:
            path = here / entry.name
            if is_noise(path):
                continue
            if entry.is_dir(follow_symlinks=False):
                subfolders.append(path)
            else:
                yield path
        if subfolders and depth + 1 > MAX_DEPTH:
            problems.append((here, f"holds folders nested deeper than {MAX_DEPTH} levels (not compared)"))
            continue
        stack.extend((path, depth + 1) for path in reversed(subfolders))


def _kind_problem(path: Path) -> str | None:
    """Why ``path`` is never opened (None for a regular file): it is a symbolic link, which could lead
    anywhere on the grader's machine (``grader -> /``), or not a file at all (a FIFO would block a read
    forever, a device could be anything)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "unreadable"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        return "not a regular file"
    return None


def _kind(rel: str) -> str:
    name = Path(rel).name
    return "a test file" if name == TEST_FILE else "a pytest plugin" if name == "conftest.py" else "a course file"


def find_tampering(course: Course, submission: Path) -> list[str]:
    """Flag lines for every file the submission changed or added where pytest would pick it up.

    Nothing in the submission is followed or opened unless :func:`_kind_problem` finds it a regular file
    or folder: a symbolic link anywhere (a whole ``grader`` folder linked to ``/``) or a FIFO is flagged
    by its name alone.
    """
    editable = {str(path) for path in course.editable_paths()}
    flags = []
    folders = [spec.package for spec in course.labs] + [n for n in SUPPORT_PATHS if n not in ROOT_CONFIG_FILES]
    for name in (*folders, GRADER_DIR, *ROOT_CONFIG_FILES):
        top = submission / name
        if not os.path.lexists(top):
            continue
        if problem := _kind_problem(top):
            flags.append(f"tampering: {name} is {problem} (ignored: only the editable files are graded)")
        elif name in ROOT_CONFIG_FILES:
            flags += _change_flags(top, course.root / name, f"{name} at the top of the course")
        else:
            walk_problems: list[str] = []
            for path in _walk(top, walk_problems):
                rel = path.relative_to(submission).as_posix()
                if rel not in editable and (problem := _kind_problem(path)):
                    flags.append(f"tampering: {rel} is {problem} (ignored: only the editable files are graded)")
                elif rel not in editable and path.suffix in CODE_SUFFIXES:
                    flags += _change_flags(path, course.root / rel, f"{_kind(rel)} {rel}")
            flags += [
                f"tampering: {Path(p).relative_to(submission).as_posix()} {why} (ignored)" for p, why in walk_problems
            ]
    return capped(flags)


def _change_flags(path: Path, pristine: Path, what: str) -> list[str]:
    """The flag for a regular file of the submission that is not its pristine twin (none when it is)."""
    try:
        differs = _differs(path, pristine)
    except OSError:
        return [f"tampering: {what} cannot be read (ignored: only the editable files are graded)"]
    verb = "changed" if pristine.is_file() else "added"
    return [f"tampering: {verb} {what} (ignored: only the editable files are graded)"] if differs else []


def capped(flags: list[str], limit: int = MAX_TAMPERING_FLAGS) -> list[str]:
    """The first ``limit`` flags and one line counting the rest: a submission holding a whole virtual
    environment in a lab folder (5,000 added ``.py`` files) must not make a 700 KB feedback file."""
    if len(flags) <= limit:
        return flags
    return [*flags[:limit], f"tampering: and {len(flags) - limit} more like these (only the first {limit} are listed)"]


def regular_file_problem(root: Path, rel: str) -> str | None:
    """Why ``root/rel`` may not be taken as a student's file (None when it may).

    Each folder on the way must be a real folder and the file a regular file, none of them a symbolic
    link (a lab folder linked to the reference's would otherwise hand in the reference), and the file
    must have no other hard link.
    """
    current = root
    parts = Path(rel).parts
    for index, part in enumerate(parts):
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return "missing"
        except OSError:
            return "cannot be read"
        if stat.S_ISLNK(info.st_mode):
            return f"{'/'.join(parts[: index + 1])} is a symbolic link"
        last = index == len(parts) - 1
        if not last and not stat.S_ISDIR(info.st_mode):
            return "missing"
        if last and not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        if last and info.st_nlink > 1:
            return "a hard link to another file"
    return None


def overlay_editable(labs: list[LabSpec], submission: Path, sandbox: Path) -> Overlay:
    """Copy each lab's editable files from the submission into the sandbox (missing ones keep the starter)."""
    overlay = Overlay()
    for spec in labs:
        for name in spec.editable:
            rel = f"{spec.package}/{name}"
            source = submission / rel
            problem = regular_file_problem(submission, rel)
            if problem == "missing":
                overlay.notes.append(f"{rel} is missing from the submission: the starter's file was used")
            elif problem:
                overlay.flags.append(f"tampering: {rel}: {problem} (ignored: the starter's file was used)")
            elif source.stat().st_size > MAX_EDITABLE_BYTES:
                overlay.flags.append(
                    f"{rel} is larger than {MAX_EDITABLE_BYTES // 1024} KiB (ignored: the starter's file was used)"
                )
            else:
                try:
                    content = source.read_bytes()
                except OSError as error:
                    overlay.flags.append(f"{rel} cannot be read ({error.strerror}; the starter's file was used)")
                    continue
                target = sandbox / spec.package / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
                overlay.taken.append(rel)
    wanted = sum(len(spec.editable) for spec in labs)
    if wanted and not overlay.taken and len(overlay.notes) == wanted:
        overlay.flags.append(
            "none of the labs' editable files is in the submission (every lab was graded with the starter's "
            f"files): {_why_nothing_was_found(submission)}"
        )
    return overlay


def _why_nothing_was_found(submission: Path) -> str:
    """The likeliest reason a submission holds no editable file: a course behind a symbolic link (never
    followed), else a folder that is not a copy of the course."""
    links = links_near_top(submission)
    if links:
        names = ", ".join(link.as_posix() for link in links)
        return (
            f"{names} {'is a symbolic link' if len(links) == 1 else 'are symbolic links'}, which the grader never "
            "follows: submit the folder itself, not a link to it"
        )
    return "is it a copy of the course folder?"


def build_sandbox(course: Course, labs: list[LabSpec], submission: Path, sandbox: Path) -> Overlay:
    """Create the grading folder ``sandbox`` for ``submission`` (see the module docstring)."""
    copy_pristine(course, sandbox)
    stub = sandbox / SOLUTIONS_DIR
    stub.mkdir(exist_ok=True)
    (stub / "__init__.py").write_text(SOLUTIONS_STUB, encoding="utf-8")
    overlay = overlay_editable(labs, submission, sandbox)
    overlay.flags[:0] = find_tampering(course, submission)
    return overlay
