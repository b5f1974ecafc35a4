"""The reference solution's recorded times, one file per lab: ``<lab package>/reference_times.json``.

The grader's time limits derive from these times (:mod:`grader.execute.limits`), so they are recorded once by
the instructor and shipped with the lab (students grading themselves get the same limits)::

    python -m grader selfcheck --record-times          # grade the reference, write every lab's file

The file (schema ``reference-times/1``)::

    {"schema": "reference-times/1",
     "recorded": {"date", "cpus", "platform", "python", "gpu"},
     "lab_wall_s": 14.8,                  # the whole pytest run of the lab, start-up included
     "tests": {"<node id>": 0.412, ...}}  # setup + call + teardown of each test the reference passed

Only tests the reference *passed* are timed: a GPU test skipped on a machine without one has no time
(its limit is the grader's default for unmeasured tests) until it is recorded on a GPU machine. A
new recording keeps the old entries of tests it could not time, so a CPU recording never erases GPU
times. The lab folder is part of the rubric's cache key, so a new file means a new rubric.

Held-out tests' times go to ``<lab package>/heldout/reference_times.json`` instead: their node ids
(names, parameters) must not reach students, and the release drops every ``heldout/`` folder.
:func:`read_reference_times` reads both files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.labspec import HELDOUT_DIR

TIMES_FILE = "reference_times.json"
SCHEMA = "reference-times/1"


@dataclass(frozen=True)
class ReferenceTimes:
    """One lab's recorded times (see the module docstring)."""

    tests: dict[str, float]
    lab_wall_s: float | None = None
    recorded: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "recorded": self.recorded, "lab_wall_s": self.lab_wall_s,
                "tests": dict(sorted(self.tests.items()))}


def _read_file(path: Path) -> ReferenceTimes | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("tests"), dict):
        return None
    tests = {str(nodeid): float(seconds) for nodeid, seconds in data["tests"].items()
             if isinstance(seconds, (int, float)) and seconds >= 0}
    wall = data.get("lab_wall_s")
    return ReferenceTimes(tests, float(wall) if isinstance(wall, (int, float)) else None, data.get("recorded") or {})


def read_reference_times(lab_dir: Path) -> ReferenceTimes | None:
    """The lab's recorded times (held-out tests' included), or None when the lab has no readable file."""
    visible, heldout = _read_file(lab_dir / TIMES_FILE), _read_file(lab_dir / HELDOUT_DIR / TIMES_FILE)
    if visible is None:
        return heldout
    return visible if heldout is None else ReferenceTimes({**heldout.tests, **visible.tests}, visible.lab_wall_s,
                                                         visible.recorded)


def is_heldout_nodeid(nodeid: str) -> bool:
    """True for a test in the lab's ``heldout/`` folder (never shipped to students)."""
    return HELDOUT_DIR in nodeid.split("::")[0].split("/")


def merged(new: ReferenceTimes, old: ReferenceTimes | None, nodeids: set[str]) -> ReferenceTimes:
    """``new``, plus ``old``'s times of tests ``new`` could not time that still exist (see the module docstring)."""
    kept = {nodeid: seconds for nodeid, seconds in (old.tests.items() if old else ()) if nodeid in nodeids}
    return ReferenceTimes({**kept, **new.tests}, new.lab_wall_s, new.recorded)


def write_reference_times(lab_dir: Path, times: ReferenceTimes) -> Path:
    """Write ``times`` into the lab's file, held-out tests' into ``heldout/`` (see the module docstring)."""
    heldout = {nodeid: seconds for nodeid, seconds in times.tests.items() if is_heldout_nodeid(nodeid)}
    visible = {nodeid: seconds for nodeid, seconds in times.tests.items() if nodeid not in heldout}
    if heldout:
        (lab_dir / HELDOUT_DIR).mkdir(exist_ok=True)
        _write(lab_dir / HELDOUT_DIR / TIMES_FILE, ReferenceTimes(heldout, None, times.recorded))
    path = lab_dir / TIMES_FILE
    _write(path, ReferenceTimes(visible, times.lab_wall_s, times.recorded))
    return path


def _write(path: Path, times: ReferenceTimes) -> None:
    path.write_text(json.dumps(times.to_dict(), indent=1) + "\n", encoding="utf-8")
