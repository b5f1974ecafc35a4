"""The course the grader grades against: which labs exist, and which of their files are pristine.

A *course root* is a folder holding one package per lab (each with ``lab.toml`` and ``test_lab.py``),
the harness files every run needs (``conftest.py``, ``pyproject.toml``, ``labkit/`` when present) and,
for instructors, ``solutions/``. The grader's default course is the installed repository
(:data:`labkit.labspec.COURSE_ROOT`); its own tests use a tiny demo course with the same layout.

Labs are discovered, not listed: every sub-folder with a ``lab.toml`` is a lab. The course's declared
packages (:data:`labkit.labspec.LAB_PACKAGES`) that have no ``lab.toml`` yet are reported as *not
ready* with a reason, so the grader works while a lab is still being written.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from labkit.labspec import (
    COURSE_ROOT,
    HELDOUT_DIR,
    LAB_PACKAGES,
    SPEC_FILE,
    TEST_FILE,
    LabSpec,
    LabSpecError,
    load_lab_spec,
)  # fmt: skip

#: Files and folders at the course root that every graded run needs (copied pristine into each sandbox).
SUPPORT_PATHS = ("conftest.py", "pyproject.toml", "labkit")
#: Folder (at the course root) holding the reference solutions: instructor material.
SOLUTIONS_DIR = "solutions"
#: Caches and environments: never a course's, wherever they are (a zip of the course with its ``.nox``).
CACHE_NAMES = frozenset(
    {
        "__pycache__",
        ".pytest_cache",
        ".hypothesis",
        ".nox",
        ".venv",
        "venv",
        ".git",
        ".ipynb_checkpoints",
        ".DS_Store",
    }
)
CACHE_SUFFIXES = (".pyc", ".pyo", ".egg-info")
#: Build and grading output: noise *inside* a course, but a folder of that name may also be what a
#: student wrapped the course in (``results/course/lab01_fx_passes``), so it is not skipped around one.
OUTPUT_NAMES = frozenset({"build", "dist", "results", "graded"})


class CourseError(ValueError):
    """The course root is unusable (no labs, an unsafe ``editable`` entry, an unknown lab id)."""


def is_cache(path: Path) -> bool:
    """True for caches and environments (:data:`CACHE_NAMES`), skipped wherever they are."""
    return path.name in CACHE_NAMES or path.name.endswith(CACHE_SUFFIXES)


def is_noise(path: Path) -> bool:
    """True for caches and build output that never belong to a course, for a path *inside* a course or a
    submission's course root (outside one, only :func:`is_cache` is skipped)."""
    return is_cache(path) or path.name in OUTPUT_NAMES


def ignore_noise(_folder: str, names: list[str]) -> list[str]:
    """``shutil.copytree`` ignore function dropping :func:`is_noise` entries."""
    return [name for name in names if is_noise(Path(name))]


@dataclass(frozen=True)
class Course:
    """A course root and its labs.

    Attributes:
        root: the course folder.
        labs: the labs with a valid ``lab.toml``, in folder-name order (``lab01`` < ``lab02``...).
        not_ready: lab package -> why it cannot be graded yet (missing or invalid ``lab.toml``/tests).
    """

    root: Path
    labs: tuple[LabSpec, ...]
    not_ready: dict[str, str] = field(default_factory=dict)

    def select(self, lab_ids: list[str] | None) -> list[LabSpec]:
        """The labs named by id or package (all ready labs for ``None``).

        Raises:
            CourseError: naming any id that is neither a ready lab nor a known package.
        """
        if not lab_ids:
            return list(self.labs)
        chosen = []
        for wanted in lab_ids:
            match = [spec for spec in self.labs if wanted in (spec.id, spec.package)]
            if not match:
                known = ", ".join(spec.id for spec in self.labs) or "none"
                hint = f" ({self.not_ready[wanted]})" if wanted in self.not_ready else ""
                raise CourseError(f"unknown or unready lab {wanted!r}{hint}; ready labs: {known}")
            chosen.extend(match)
        return chosen

    def editable_paths(self, labs: list[LabSpec] | None = None) -> list[PurePosixPath]:
        """Every student-editable file, relative to the course root (``lab01_fx_passes/conv_bn.py``)."""
        return [PurePosixPath(spec.package) / name for spec in (labs or self.labs) for name in spec.editable]

    @property
    def lab_packages(self) -> frozenset[str]:
        """Every lab package's folder name, ready or not: what tells a copy of the course's root folder
        from a folder wrapped around it (:func:`grader.execute.sandbox.find_course_root`)."""
        return frozenset({*(spec.package for spec in self.labs), *self.not_ready})

    @property
    def solutions(self) -> Path:
        return self.root / SOLUTIONS_DIR

    @property
    def holds_instructor_material(self) -> bool:
        """True when the course has reference solutions or held-out tests: what graded code must never see."""
        return self.solutions.is_dir() or any((spec.directory / HELDOUT_DIR).is_dir() for spec in self.labs)


def check_editable(spec: LabSpec) -> None:
    """Refuse ``editable`` entries that would let a submission replace tests or harness.

    Raises:
        CourseError: for absolute paths, ``..``, test files, ``conftest.py`` or ``lab.toml``.
    """
    for name in spec.editable:
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts or "\\" in name:
            raise CourseError(f"{spec.package}/{SPEC_FILE}: editable entry {name!r} must be a path inside the lab")
        if path.name in ("conftest.py", SPEC_FILE) or path.name.startswith("test_"):
            raise CourseError(f"{spec.package}/{SPEC_FILE}: editable entry {name!r} is a test or config file")


def load_course(root: Path = COURSE_ROOT) -> Course:
    """Discover the labs of the course at ``root``.

    Raises:
        CourseError: when ``root`` is not a folder or an ``editable`` entry is unsafe.
    """
    root = Path(root).resolve()
    if not root.is_dir():
        raise CourseError(f"course root {root} is not a folder")
    labs, not_ready = [], {}
    candidates = {p.name for p in root.iterdir() if p.is_dir() and (p / SPEC_FILE).is_file()}
    if root == COURSE_ROOT.resolve():
        candidates |= {name for name in LAB_PACKAGES if (root / name).is_dir()}
    for package in sorted(candidates - {SOLUTIONS_DIR}):
        folder = root / package
        if not (folder / SPEC_FILE).is_file():
            not_ready[package] = f"no {SPEC_FILE} yet"
            continue
        if not (folder / TEST_FILE).is_file():
            not_ready[package] = f"no {TEST_FILE} yet"
            continue
        try:
            spec = load_lab_spec(package, root)
        except LabSpecError as error:
            not_ready[package] = str(error)
            continue
        check_editable(spec)
        labs.append(spec)
    return Course(root=root, labs=tuple(labs), not_ready=not_ready)


def copy_pristine(course: Course, dest: Path) -> None:
    """Copy the course's tests, harness and lab packages (never ``solutions/``) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in SUPPORT_PATHS:
        source = course.root / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=ignore_noise, dirs_exist_ok=True)
        elif source.is_file():
            shutil.copy2(source, dest / name)
    for spec in course.labs:
        shutil.copytree(spec.directory, dest / spec.package, ignore=ignore_noise, dirs_exist_ok=True)


def make_reference_submission(course: Course, dest: Path) -> Path:
    """A submission made of the reference solutions' editable files (``solutions/<pkg>/<file>``).

    Labs whose solution lacks an editable file keep the starter's (the reference is then incomplete,
    and grading it shows which tests fail).
    """
    dest.mkdir(parents=True, exist_ok=True)
    for spec in course.labs:
        for name in spec.editable:
            source = course.solutions / spec.package / name
            if source.is_file():
                target = dest / spec.package / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
    return dest
