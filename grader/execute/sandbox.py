"""Build the folder a submission is graded in: the pristine course plus ONLY the student's editable files.

A submission is a student's copy of the course (a folder, or a ``.zip`` of one). It may hold anything:
edited tests, an added ``conftest.py`` that marks every test passed, a changed harness. None of it is
used. The sandbox is

1. a fresh copy of the pristine course (tests, harness, lab packages; never ``solutions/``),
2. with each lab's ``editable`` files (``lab.toml``) copied over from the submission,
3. a ``solutions`` package that refuses to import (the course's editable install would otherwise let
   student code ``import solutions...`` on an instructor's machine),
4. and an always-failing canary test appended to each ``test_lab.py`` (see :mod:`grader.execute.probe`).

:func:`find_tampering` compares everything else the submission has in the places pytest would look
(lab folders, harness, root config) with the pristine course, and reports each difference as a flag
line: it was ignored, and the TA should know it was tried.
"""

from __future__ import annotations

import filecmp
import secrets
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from grader.course.labs import SOLUTIONS_DIR, SUPPORT_PATHS, Course, copy_pristine, is_noise
from labkit.labspec import TEST_FILE, LabSpec

#: Root files pytest reads as configuration or plugins (flagged when a submission adds or edits them).
ROOT_CONFIG_FILES = ("conftest.py", "pyproject.toml", "pytest.ini", "tox.ini", "setup.cfg", "sitecustomize.py")
#: Files of these kinds, changed or added inside a lab folder or the harness, are flagged as tampering.
CODE_SUFFIXES = (".py", ".pth", ".so", ".toml", ".ini", ".cfg", ".json")
#: Largest editable file taken from a submission.
MAX_EDITABLE_BYTES = 2 * 1024 * 1024
SOLUTIONS_STUB = '''"""Stand-in installed by the grader: reference solutions are not importable while grading."""

raise ImportError("the reference solutions are not available to graded code")
'''
CANARY_TEMPLATE = '''

# --- appended by the grader: a canary that must fail in every run (see grader.execute.probe) ---
import pytest as _grader_pytest


@_grader_pytest.mark.points(1)
@_grader_pytest.mark.parametrize("_slot", range({count}))
def {name}(_slot):
    assert _slot < 0, "grader canary: this test always fails"
'''


class SubmissionError(ValueError):
    """The submission cannot be read at all (not a folder or zip, unsafe zip)."""


@dataclass
class Overlay:
    """What building the sandbox took from the submission and what it flagged."""

    taken: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def new_canary_name() -> str:
    """A fresh, unguessable test name for this run's canary."""
    return f"test_{secrets.token_hex(6)}"


def unpack_submission(submission: Path, scratch: Path) -> Path:
    """Return a folder holding the submission, extracting a ``.zip`` into ``scratch`` safely.

    A zip whose single top-level folder holds the course is unwrapped (``alice.zip/course/...``).

    Raises:
        SubmissionError: for a missing path, another file type, or a zip entry escaping the folder.
    """
    if submission.is_dir():
        return submission
    if not submission.is_file() or submission.suffix != ".zip":
        raise SubmissionError(f"{submission}: a submission is a folder or a .zip file")
    target = scratch / "unpacked"
    try:
        with zipfile.ZipFile(submission) as archive:
            for member in archive.namelist():
                path = PurePosixPath(member)
                if path.is_absolute() or ".." in path.parts:
                    raise SubmissionError(f"{submission}: unsafe path {member!r} in the zip")
            archive.extractall(target)
    except zipfile.BadZipFile as error:
        raise SubmissionError(f"{submission}: not a readable zip ({error})") from None
    entries = [p for p in target.iterdir() if not is_noise(p) and p.name != "__MACOSX"]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return target


def _differs(candidate: Path, pristine: Path) -> bool:
    return not pristine.is_file() or not filecmp.cmp(candidate, pristine, shallow=False)


def _walk(folder: Path):
    for path in sorted(folder.rglob("*")):
        if any(is_noise(Path(part)) for part in path.relative_to(folder).parts):
            continue
        if path.is_file() or path.is_symlink():
            yield path


def find_tampering(course: Course, submission: Path) -> list[str]:
    """Flag lines for every file the submission changed or added where pytest would pick it up."""
    editable = {str(path) for path in course.editable_paths()}
    flags = []
    watched = [submission / spec.package for spec in course.labs]
    watched += [submission / name for name in SUPPORT_PATHS if (submission / name).is_dir()]
    for folder in watched:
        if not folder.is_dir():
            continue
        for path in _walk(folder):
            rel = path.relative_to(submission).as_posix()
            if rel in editable or path.suffix not in CODE_SUFFIXES:
                continue
            pristine = course.root / rel
            if _differs(path, pristine):
                verb = "changed" if pristine.is_file() else "added"
                kind = "a test file" if path.name == TEST_FILE else "a pytest plugin" if path.name == "conftest.py" else "a course file"
                flags.append(f"tampering: {verb} {kind} {rel} (ignored: only the editable files are graded)")
    for name in ROOT_CONFIG_FILES:
        path = submission / name
        if path.is_file() and _differs(path, course.root / name):
            verb = "changed" if (course.root / name).is_file() else "added"
            flags.append(f"tampering: {verb} {name} at the top of the course (ignored: only the editable files are graded)")
    return flags


def overlay_editable(labs: list[LabSpec], submission: Path, sandbox: Path) -> Overlay:
    """Copy each lab's editable files from the submission into the sandbox (missing ones keep the starter)."""
    overlay = Overlay()
    for spec in labs:
        for name in spec.editable:
            source = submission / spec.package / name
            rel = f"{spec.package}/{name}"
            if source.is_symlink():
                overlay.flags.append(f"tampering: {rel} is a symbolic link (ignored: the starter's file was used)")
            elif not source.is_file():
                overlay.notes.append(f"{rel} is missing from the submission: the starter's file was used")
            elif source.stat().st_size > MAX_EDITABLE_BYTES:
                overlay.flags.append(f"{rel} is larger than {MAX_EDITABLE_BYTES // 1024} KiB (ignored: the starter's file was used)")
            else:
                target = sandbox / spec.package / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(source.read_bytes())
                overlay.taken.append(rel)
    return overlay


def add_canary(sandbox: Path, spec: LabSpec, name: str, count: int) -> None:
    """Append the always-failing canary (``count`` cases) to the sandbox's copy of the lab's tests."""
    test_file = sandbox / spec.package / TEST_FILE
    test_file.write_text(test_file.read_text(encoding="utf-8") + CANARY_TEMPLATE.format(name=name, count=count),
                         encoding="utf-8")


def build_sandbox(course: Course, labs: list[LabSpec], submission: Path, sandbox: Path, *, canary: str,
                  canary_counts: dict[str, int]) -> Overlay:
    """Create the grading folder ``sandbox`` for ``submission`` (see the module docstring).

    Args:
        canary_counts: lab id -> number of canary cases (one per graded test, plus one).
    """
    copy_pristine(course, sandbox)
    stub = sandbox / SOLUTIONS_DIR
    stub.mkdir(exist_ok=True)
    (stub / "__init__.py").write_text(SOLUTIONS_STUB, encoding="utf-8")
    overlay = overlay_editable(labs, submission, sandbox)
    overlay.flags[:0] = find_tampering(course, submission)
    for spec in labs:
        add_canary(sandbox, spec, canary, canary_counts.get(spec.id, 1))
    return overlay
