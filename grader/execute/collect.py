"""Collect a lab's rubric from the pristine course (pytest --collect-only with the probe), cached by content hash."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from grader.course.labs import SUPPORT_PATHS, Course, is_noise
from grader.course.reference_times import read_reference_times
from grader.course.rubric import (
    RUBRIC_VERSION,
    LabRubric,
    Rubric,
    _lab_from_dict,
    parse_collected,
    with_reference_times,
)
from grader.evidence.text import truncate_text
from grader.execute import probe as pytest_probe
from grader.execute.command import pytest_command, pytest_env
from labkit.labspec import LabSpec

DEFAULT_CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "course-grader"



def rubric_key(course: Course, spec: LabSpec) -> str:
    """Hash of every file the collection of ``spec``'s tests can depend on."""
    digest = hashlib.sha256(f"rubric-v{RUBRIC_VERSION}".encode())
    roots = [spec.directory, *(course.root / name for name in SUPPORT_PATHS), Path(pytest_probe.__file__)]
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
        for path in files:
            if any(is_noise(Path(part)) for part in path.parts):
                continue
            digest.update(str(path.relative_to(root.parent)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]



def collect_lab_rubric(course: Course, spec: LabSpec, python: str = sys.executable,
                       timeout_s: float = 600.0) -> LabRubric:
    """Collect ``spec``'s pristine tests in a subprocess (never raises: failures become ``error``)."""
    with tempfile.TemporaryDirectory(prefix="grader-rubric-") as scratch:
        out = Path(scratch) / "collected.json"
        command = pytest_command(python, spec.package, course.root, "--collect-only", "-q",
                                 "--grader-rubric", str(out))
        try:
            done = subprocess.run(command, cwd=course.root, env=pytest_env(course.root, "off"),
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return LabRubric(spec.id, spec.package, spec.title, error=f"collecting the tests took over {timeout_s:.0f} s")
        if done.returncode != 0 or not out.is_file():
            output = truncate_text((done.stdout + done.stderr).strip(), 3000)
            return LabRubric(spec.id, spec.package, spec.title,
                             error=f"the course's own tests do not collect (pytest exit {done.returncode}):\n{output}")
        try:
            lab = parse_collected(spec, json.loads(out.read_text(encoding="utf-8")))
            return with_reference_times(lab, read_reference_times(spec.directory))
        except (ValueError, KeyError) as error:
            return LabRubric(spec.id, spec.package, spec.title, error=str(error))



def build_rubric(course: Course, labs: list[LabSpec], cache_dir: Path | None = DEFAULT_CACHE_DIR,
                 python: str = sys.executable) -> Rubric:
    """The rubric of ``labs``, from the cache when the pristine files are unchanged.

    Args:
        course: the pristine course.
        labs: the labs to grade.
        cache_dir: where rubrics are cached; ``None`` disables the cache.
        python: the interpreter that runs pytest (the course environment's).
    """
    rubrics = []
    for spec in labs:
        cached = cache_dir / f"{spec.package}-{rubric_key(course, spec)}.json" if cache_dir else None
        if cached is not None and cached.is_file():
            try:
                rubrics.append(_lab_from_dict(json.loads(cached.read_text(encoding="utf-8"))))
                continue
            except (ValueError, KeyError, TypeError):
                pass  # a damaged cache entry is recollected
        lab = collect_lab_rubric(course, spec, python)
        if cached is not None and lab.error is None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps(asdict(lab)), encoding="utf-8")
        rubrics.append(lab)
    return Rubric(tuple(rubrics))
