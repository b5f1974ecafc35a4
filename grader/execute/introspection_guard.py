"""Refuse introspection from a student's own files inside a graded process (a PEP 578 audit hook).

The probe installs :func:`install` at ``pytest_configure``, before any test module (so any student
code) is imported; an audit hook cannot be removed. It refuses the operations that reach other code's
frames or objects (:data:`REFUSED`, and reading the frame or code attributes in :data:`FRAME_ATTRIBUTES`)
**when the code asking is one of the lab's editable files**: the first frame above the operation that is
not in an introspection wrapper of the standard library (``inspect``, ``traceback``), so that
``inspect.stack()`` written in a student's file counts as the student's. Torch, pytest and the grader
call the same functions (Dynamo reads frames, logging calls ``sys._getframe``): their calls are never
refused, even when a student's function is further up the stack.

A refusal raises :class:`IntrospectionRefused` (a ``RuntimeError``: the trick fails where it is tried)
and is reported through ``on_refusal`` (the probe sends it to the supervisor, and the submission is
flagged for review).

What it guarantees: a student file cannot call these operations *directly or through inspect/traceback*.
What it does not: code that reaches them another way (a C extension it builds, a callback it hands to
torch that torch calls) is not refused, nor is reading a module's attributes (CPython audits neither).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable

#: Audit events refused outright when a student file asks (CPython 3.11's names).
REFUSED = frozenset(
    {
        "sys._getframe",
        "sys._current_frames",
        "sys.settrace",
        "sys.setprofile",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
    }
)
#: Audit event prefixes refused (every ``ctypes`` operation: raw memory).
REFUSED_PREFIXES = ("ctypes.",)
#: Attributes whose reads CPython audits as ``object.__getattr__`` and that lead to a frame. Code objects
#: (``__code__``, ``f_code``) are not refused: ``inspect.signature`` reads them, a student's own
#: legitimate call, and a canary shares its twin's code object, so they tell nothing.
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
#: Standard-library modules that introspect on their caller's behalf: a call through them counts as
#: the caller's.
WRAPPERS = ("inspect.py", "traceback.py", "linecache.py", "dis.py")


class IntrospectionRefused(RuntimeError):
    """Raised in a student's file that tried an operation the grading refuses."""


def _stdlib_wrappers() -> set[str]:
    folder = os.path.dirname(os.__file__)
    return {os.path.join(folder, name) for name in WRAPPERS}


def install(editable: Iterable[str], on_refusal: Callable[[str, str, int], None]) -> None:
    """Refuse :data:`REFUSED` operations asked for by a file in ``editable`` (absolute paths).

    ``on_refusal(what, file, line)`` is called once per refusal before it raises.
    """
    student = {os.path.realpath(path) for path in editable}
    if not student:
        return
    wrappers = _stdlib_wrappers()
    busy = threading.local()
    real_paths: dict[str, str] = {}

    def asker(frame, through_wrappers: bool) -> tuple[str, int] | None:
        """The student file (and line) asking: the first frame (outside the wrappers, if
        ``through_wrappers``), when it is one."""
        while frame is not None:
            filename = frame.f_code.co_filename
            path = real_paths.get(filename)
            if path is None:
                path = real_paths[filename] = os.path.realpath(filename)
            if not through_wrappers or path not in wrappers:
                return (path, frame.f_lineno) if path in student else None
            frame = frame.f_back
        return None

    def hook(event: str, args: tuple) -> None:
        if event == "object.__getattr__":
            if len(args) < 2 or args[1] not in FRAME_ATTRIBUTES:
                return
            what, through_wrappers = f"reading .{args[1]}", False  # traceback.print_exc() reads tb_frame
        elif event in REFUSED or event.startswith(REFUSED_PREFIXES):
            what, through_wrappers = event, True
        else:
            return
        if getattr(busy, "on", False):
            return  # this hook's own frame walk
        busy.on = True
        try:
            found = asker(sys._getframe(1), through_wrappers)
        finally:
            busy.on = False
        if found is None:
            return
        on_refusal(what, *found)
        raise IntrospectionRefused(
            f"{what} from {os.path.basename(found[0])}:{found[1]} is not allowed while "
            "grading: a submission may not inspect the tests' or the grader's frames "
            "and objects"
        )

    sys.addaudithook(hook)
