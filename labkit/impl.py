"""Choose which implementation of a lab the tests, benchmarks and grader exercise.

Every lab exists twice with the same public API: the student's package (``lab01_fx_passes``) and
the reference solution (``solutions.lab01_fx_passes``). Code that uses a lab never imports either
directly; it asks :func:`load_lab`, so one switch (``--impl`` for pytest, ``LABKIT_IMPL`` for
scripts) selects the implementation everywhere.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

#: The two implementations every lab has.
IMPLS = ("student", "solution")
#: Environment variable read when no implementation is passed explicitly.
IMPL_ENV_VAR = "LABKIT_IMPL"


def selected_impl() -> str:
    """Return the implementation chosen through ``LABKIT_IMPL`` (default ``"student"``).

    Raises:
        ValueError: if the variable holds anything but ``student`` or ``solution``.
    """
    impl = os.environ.get(IMPL_ENV_VAR, "student")
    if impl not in IMPLS:
        raise ValueError(f"{IMPL_ENV_VAR}={impl!r}: expected one of {', '.join(IMPLS)}")
    return impl


def module_name(package: str, impl: str | None = None) -> str:
    """Return the importable name of ``package`` for ``impl`` (``solutions.<package>`` for the reference)."""
    impl = impl or selected_impl()
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r}: expected one of {', '.join(IMPLS)}")
    return package if impl == "student" else f"solutions.{package}"


def load_lab(package: str, impl: str | None = None) -> ModuleType:
    """Import and return a lab's public API.

    Args:
        package: the lab's package name, e.g. ``"lab01_fx_passes"``.
        impl: ``"student"`` or ``"solution"``; ``None`` reads ``LABKIT_IMPL``.

    Returns:
        The imported package (its ``__init__`` is the lab's public API).
    """
    return importlib.import_module(module_name(package, impl))
