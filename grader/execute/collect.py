"""Collect a lab's rubric from the pristine course (``pytest --collect-only`` with the probe), cached.

Collecting a real lab imports torch and the lab's harness (seconds), so rubrics are cached under
``cache_dir`` (``~/.cache/course-grader``: never visible to a graded process,
:mod:`grader.execute.isolation`), keyed by a hash of everything collection depends on (the lab folder,
the course's support files, the probe). The cache is the grader's own state and is checked when read:
an entry must carry its key and a digest of its content, and every test in it must be a test function
of the pristine files with the points their ``@pytest.mark.points(n)`` decorator declares. An entry
that fails any check is collected again (and said so), never trusted.
"""

from __future__ import annotations

import ast
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
from labkit.labspec import HELDOUT_DIR, TEST_FILE, LabSpec

#: ``$COURSE_GRADER_CACHE`` (the container image's, collected while it is built), else the user's cache.
DEFAULT_CACHE_DIR = Path(
    os.environ.get("COURSE_GRADER_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "course-grader"
)
CACHE_SCHEMA = "rubric-cache/1"


def rubric_key(course: Course, spec: LabSpec) -> str:
    """Hash of every file the collection of ``spec``'s tests can depend on."""
    digest = hashlib.sha256(f"rubric-v{RUBRIC_VERSION}".encode())
    roots = [spec.directory, *(course.root / name for name in SUPPORT_PATHS), Path(pytest_probe.__file__)]
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
        for path in files:
            rel = path.relative_to(root.parent)  # the course's own parts: a course under ~/build/ is no noise
            if any(is_noise(Path(part)) for part in rel.parts):
                continue
            digest.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def collect_lab_rubric(
    course: Course, spec: LabSpec, python: str = sys.executable, timeout_s: float = 600.0
) -> LabRubric:
    """Collect ``spec``'s pristine tests in a subprocess (never raises: failures become ``error``)."""
    with tempfile.TemporaryDirectory(prefix="grader-rubric-") as scratch:
        out = Path(scratch) / "collected.json"
        command = pytest_command(
            python, [spec.package], course.root, "--collect-only", "-q", "--grader-rubric", str(out)
        )
        try:
            done = subprocess.run(
                command,
                cwd=course.root,
                env=pytest_env(course.root, "off"),
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            return LabRubric(
                spec.id, spec.package, spec.title, error=f"collecting the tests took over {timeout_s:.0f} s"
            )
        if done.returncode != 0 or not out.is_file():
            output = truncate_text((done.stdout + done.stderr).strip(), 3000)
            return LabRubric(
                spec.id,
                spec.package,
                spec.title,
                error=f"the course's own tests do not collect (pytest exit {done.returncode}):\n{output}",
            )
        try:
            lab = parse_collected(spec, json.loads(out.read_text(encoding="utf-8")))
            return with_reference_times(lab, read_reference_times(spec.directory))
        except (ValueError, KeyError) as error:
            return LabRubric(spec.id, spec.package, spec.title, error=str(error))


def declared_points(spec: LabSpec) -> dict[str, int | None]:
    """Test function name -> the points its ``@pytest.mark.points(n)`` declares (None: not a literal), read
    from the lab's pristine test files without running them."""
    declared: dict[str, int | None] = {}
    for path in [spec.directory / TEST_FILE, *sorted((spec.directory / HELDOUT_DIR).glob("test_*.py"))]:
        if not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                declared[node.name] = None
                for decorator in node.decorator_list:
                    if (
                        isinstance(decorator, ast.Call)
                        and ast.unparse(decorator.func).endswith("mark.points")
                        and decorator.args
                        and isinstance(decorator.args[0], ast.Constant)
                    ):
                        declared[node.name] = decorator.args[0].value
    return declared


def cache_problem(entry: object, key: str, spec: LabSpec) -> str | None:
    """Why a cache entry may not be used (None when it may): see the module docstring."""
    if not isinstance(entry, dict) or entry.get("schema") != CACHE_SCHEMA or entry.get("key") != key:
        return "it is not an entry for these pristine files"
    payload = json.dumps(entry.get("lab"), sort_keys=True)
    if hashlib.sha256(payload.encode()).hexdigest() != entry.get("digest"):
        return "its content does not match its digest"
    try:
        lab = _lab_from_dict(entry["lab"])
    except (ValueError, KeyError, TypeError) as error:
        return f"it is unreadable ({error!r})"
    declared = declared_points(spec)
    for test in lab.tests:
        if test.name not in declared:
            return f"{test.name} is not a test of the pristine files"
        if declared[test.name] is not None and declared[test.name] != test.points:
            return f"{test.name} is worth {declared[test.name]} points in the pristine files, not {test.points}"
    return None


def _write_entry(path: Path, key: str, lab: LabRubric) -> None:
    payload = asdict(lab)
    entry = {
        "schema": CACHE_SCHEMA,
        "key": key,
        "lab": payload,
        "digest": hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest(),
    }
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(entry), encoding="utf-8")
    temporary.chmod(0o600)
    temporary.replace(path)


def build_rubric(
    course: Course,
    labs: list[LabSpec],
    cache_dir: Path | None = DEFAULT_CACHE_DIR,
    python: str = sys.executable,
    log=lambda line: print(line, file=sys.stderr),
) -> Rubric:
    """The rubric of ``labs``, from the cache when the pristine files are unchanged (and the entry checks out).

    Args:
        course: the pristine course.
        labs: the labs to grade.
        cache_dir: where rubrics are cached; ``None`` disables the cache.
        python: the interpreter that runs pytest (the course environment's).
    """
    rubrics = []
    for spec in labs:
        key = rubric_key(course, spec)
        cached = cache_dir / f"{spec.package}-{key}.json" if cache_dir else None
        if cached is not None and cached.is_file():
            try:
                entry = json.loads(cached.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                entry = None
            problem = cache_problem(entry, key, spec)
            if problem is None:
                rubrics.append(_lab_from_dict(entry["lab"]))
                continue
            log(f"  note: the cached rubric of {spec.id} ({cached}) was not used: {problem}; collecting it again")
        lab = collect_lab_rubric(course, spec, python)
        if cached is not None and lab.error is None:
            try:
                _write_entry(cached, key, lab)
            except OSError as error:  # a read-only cache (a container's): collected again next time
                log(f"  note: the rubric of {spec.id} could not be cached in {cache_dir} ({error.strerror or error})")
        rubrics.append(lab)
    return Rubric(tuple(rubrics))
