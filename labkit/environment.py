"""Is this Python the course's environment? If not, say which interpreter to use instead.

Every command of the course (``python -m grader ...``, ``python -m lab02_npu_backend.given.report``, the
benchmarks) needs the packages pinned in ``pyproject.toml`` (torch, pytest-json-report, ...). nox
installs them once into the shared environment ``.nox/course-env`` (see ``noxfile.py``); a plain
``python`` from the shell is usually *another* interpreter, and fails deep inside an import with
``No module named 'torch'``. :func:`require_course_environment` turns that into one clear message
that names the right interpreter, before anything else runs.

The check reads installed distributions' metadata (``importlib.metadata``), not modules: it imports
nothing heavy and costs a few milliseconds, so the labs' ``__init__`` can afford to call it.
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
from importlib import metadata
from pathlib import Path

import tomllib

from labkit.labspec import COURSE_ROOT

#: The shared environment nox creates for every session (``noxfile.py``'s ``SHARED_ENV``).
COURSE_ENV = COURSE_ROOT / ".nox" / "course-env"
#: The nox session that only creates (or updates) that environment.
CREATE_ENV_COMMAND = "python3 -m pip install nox && python3 -m nox -s course-env"


class CourseEnvironmentError(ImportError):
    """This interpreter lacks packages the course needs (the message says which, and what to run)."""


def _pyproject(pyproject: Path) -> dict:
    try:
        return tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def requirements_of(pyproject: Path) -> tuple[str, ...]:
    """The ``[project].dependencies`` of ``pyproject`` (empty when the file or the table is absent)."""
    return tuple(_pyproject(pyproject).get("project", {}).get("dependencies", ()))


def supported_versions_of(pyproject: Path) -> dict[str, str]:
    """``[tool.course.supported]``: versions accepted beside the exact pins (``{"torch": ">=2.11,<2.15"}``)."""
    return dict(_pyproject(pyproject).get("tool", {}).get("course", {}).get("supported", {}))


def _name_and_pin(requirement: str) -> tuple[str, str]:
    """``"torch==2.14.1"`` -> ``("torch", "==2.14.1")`` (environment markers and extras dropped)."""
    spec = requirement.split(";", 1)[0].strip()
    for index, char in enumerate(spec):
        if char in "<>=!~[ (":
            return spec[:index], spec[index:].split("]")[-1].strip()
    return spec, ""


def unmet_requirements(
    requirements: tuple[str, ...], *, check_versions: bool = True, supported: dict[str, str] | None = None
) -> list[str]:
    """Each requirement this interpreter does not satisfy, in words (``"torch (not installed)"``).

    Args:
        requirements: PEP 508 strings, e.g. from :func:`requirements_of`.
        check_versions: also compare installed versions with the pins (needs ``packaging``, which
            pytest depends on; skipped where it is absent).
        supported: package -> specifier of versions accepted besides the pin (from
            :func:`supported_versions_of`).
    """
    supported = supported or {}
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
    except ImportError:
        check_versions = False
    unmet = []
    for requirement in requirements:
        name, pin = _name_and_pin(requirement)
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            unmet.append(f"{name} (not installed)")
            continue
        if check_versions and pin:
            try:
                accepted = [SpecifierSet(pin), *([SpecifierSet(supported[name])] if name in supported else [])]
                if not any(spec.contains(installed, prereleases=True) for spec in accepted):
                    also = f", and also supports {supported[name]}" if name in supported else ""
                    unmet.append(f"{name} {installed} (the course pins {pin}{also})")
            except InvalidSpecifier:
                pass
    return unmet


def unmet_course_requirements(pyproject: Path, *, check_versions: bool = True) -> list[str]:
    """:func:`unmet_requirements` for the course described by ``pyproject``: its pins, and its supported versions."""
    return unmet_requirements(
        requirements_of(pyproject), check_versions=check_versions, supported=supported_versions_of(pyproject)
    )


def shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it, else absolute."""
    relative = os.path.relpath(path)
    return relative if not relative.startswith("..") else str(path)


def course_python() -> Path:
    """The course environment's interpreter (it may not exist yet)."""
    return COURSE_ENV / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def what_to_run(command: str, nox_session: str | None = None) -> str:
    """The lines telling a user how to run ``command`` (the arguments after ``python``) correctly."""
    python = course_python()
    lines = []
    if python.exists():
        lines.append(f"Run it with the course environment's interpreter:\n    {shown_path(python)} {command}")
    else:
        lines.append(
            f"The course environment does not exist yet. Create it (once, a few minutes):\n"
            f"    {CREATE_ENV_COMMAND}\n"
            f"then run:\n    {shown_path(python)} {command}"
        )
    if nox_session:
        lines.append(f"or let nox pick the interpreter:\n    python3 -m nox -s {nox_session}")
    return "\n".join(lines)


def current_command() -> str:
    """This process's command line after the interpreter and its options
    (``-m lab02_npu_backend.given.report --model all``)."""
    argv = list(getattr(sys, "orig_argv", sys.argv))[1:]
    for index, arg in enumerate(argv):
        if arg in ("-m", "-c") or not arg.startswith("-"):
            return shlex.join(argv[index:])
    return "..."


@functools.cache
def _unmet_for_this_interpreter(root: Path, check_versions: bool) -> tuple[str, ...]:
    return tuple(unmet_course_requirements(root / "pyproject.toml", check_versions=check_versions))


def require_course_environment(
    *,
    command: str | None = None,
    nox_session: str | None = None,
    check_versions: bool = False,
    root: Path = COURSE_ROOT,
) -> None:
    """Stop with a clear message when this interpreter lacks the course's packages.

    Called first thing by ``python -m grader`` and by each lab's ``__init__`` (so ``python -m
    lab02_npu_backend.given.report`` fails before ``import torch`` does). While ``python -m package.module``
    imports its package, the message is printed and the process exits with status 2 (no traceback to
    read); anywhere else (``python -m grader``, an import inside pytest, a notebook) it raises.

    Args:
        command: what the user ran, after ``python`` (default: this process's command line).
        nox_session: a nox session that runs the same thing, to suggest as well.
        check_versions: also refuse installed versions outside the pins (the grader does: grades must
            come from the pinned torch).
        root: the course root whose ``pyproject.toml`` lists the requirements.

    Raises:
        CourseEnvironmentError: when a requirement is unmet (outside a ``python -m`` package import).
    """
    unmet = _unmet_for_this_interpreter(Path(root), check_versions)
    if not unmet:
        return
    message = (
        f"this Python ({sys.executable}) is not the course's environment: it lacks "
        f"{', '.join(unmet)}.\n{what_to_run(command or current_command(), nox_session)}"
    )
    # While `python -m pkg.module` imports pkg, sys.argv[0] is "-m" (see the -m entry of `python --help`).
    if sys.argv[:1] == ["-m"]:
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)
    raise CourseEnvironmentError(message)
