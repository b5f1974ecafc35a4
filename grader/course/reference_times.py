"""The reference solution's recorded times, one file per lab: ``<lab package>/reference_times.json``.

The grader's time limits derive from these times (:mod:`grader.execute.limits`), so they are recorded once by
the instructor and shipped with the lab (students grading themselves get the same limits)::

    python -m grader selfcheck --record-times          # grade the reference, write every lab's file

The file (schema ``reference-times/2``)::

    {"schema": "reference-times/2",
     "recorded": {"date", "cpus", "platform", "python", "gpu", "caches"},
     "lab_wall_s": 14.8,                  # the whole pytest run of the lab's visible tests, start-up included
     "tests": {"<node id>": 0.412, ...},  # wall-clock seconds of setup + call + teardown of each test passed
     "cpu": {"<node id>": 0.398, ...}}    # the same tests' CPU seconds (the process and its children)

The grader's limits are in CPU seconds (:mod:`grader.execute.limits`); a file of schema
``reference-times/1`` (wall-clock times only) is still read, its wall times standing in for CPU times.

Only tests the reference *passed* are timed: a GPU test skipped on a machine without one has no time
(its limit is the grader's default for unmeasured tests) until it is recorded on a GPU machine. A
new recording keeps the old entries of tests it could not time, so a CPU recording never erases GPU
times. The lab folder is part of the rubric's cache key, so a new file means a new rubric.

Held-out tests' times go to ``<lab package>/heldout/reference_times.json`` instead: their node ids
(names, parameters) must not reach students, and the release drops every ``heldout/`` folder.
:func:`read_reference_times` reads both files.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.labspec import HELDOUT_DIR

TIMES_FILE = "reference_times.json"
SCHEMA = "reference-times/2"
READABLE_SCHEMAS = ("reference-times/1", SCHEMA)


def recorded_here(**extra: Any) -> dict[str, Any]:
    """Where and when a recording was made (a times file's ``recorded``), with ``extra`` entries."""
    return {
        "date": datetime.date.today().isoformat(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(terse=True),
        "python": platform.python_version(),
        **extra,
    }


@dataclass(frozen=True)
class ReferenceTimes:
    """One lab's recorded times (see the module docstring)."""

    tests: dict[str, float]
    lab_wall_s: float | None = None
    recorded: dict[str, Any] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "recorded": self.recorded,
            "lab_wall_s": self.lab_wall_s,
            "tests": dict(sorted(self.tests.items())),
            "cpu": dict(sorted(self.cpu.items())),
        }

    def only(self, keep) -> ReferenceTimes:
        """These times restricted to the node ids ``keep(nodeid)`` is true for."""
        return ReferenceTimes(
            {n: t for n, t in self.tests.items() if keep(n)},
            self.lab_wall_s,
            self.recorded,
            {n: t for n, t in self.cpu.items() if keep(n)},
        )


def _seconds_of(entries: object) -> dict[str, float]:
    if not isinstance(entries, dict):
        return {}
    return {
        str(nodeid): float(seconds)
        for nodeid, seconds in entries.items()
        if isinstance(seconds, (int, float)) and seconds >= 0
    }


def _read_file(path: Path) -> ReferenceTimes | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if (
        not isinstance(data, dict)
        or data.get("schema") not in READABLE_SCHEMAS
        or not isinstance(data.get("tests"), dict)
    ):
        return None
    wall = data.get("lab_wall_s")
    return ReferenceTimes(
        _seconds_of(data["tests"]),
        float(wall) if isinstance(wall, (int, float)) else None,
        data.get("recorded") or {},
        _seconds_of(data.get("cpu")),
    )


def read_reference_times(lab_dir: Path) -> ReferenceTimes | None:
    """The lab's recorded times (held-out tests' included), or None when the lab has no readable file."""
    visible, heldout = _read_file(lab_dir / TIMES_FILE), _read_file(lab_dir / HELDOUT_DIR / TIMES_FILE)
    if visible is None:
        return heldout
    return (
        visible
        if heldout is None
        else ReferenceTimes(
            {**heldout.tests, **visible.tests}, visible.lab_wall_s, visible.recorded, {**heldout.cpu, **visible.cpu}
        )
    )


def is_heldout_nodeid(nodeid: str) -> bool:
    """True for a test in the lab's ``heldout/`` folder (never shipped to students)."""
    return HELDOUT_DIR in nodeid.split("::")[0].split("/")


def merged(new: ReferenceTimes, old: ReferenceTimes | None, nodeids: set[str]) -> ReferenceTimes:
    """``new``, plus ``old``'s times of tests ``new`` could not time that still exist (see the module docstring)."""
    untimed = {nodeid for nodeid in nodeids if nodeid not in new.tests}
    kept = old.only(lambda nodeid: nodeid in untimed) if old else ReferenceTimes({})
    return ReferenceTimes({**kept.tests, **new.tests}, new.lab_wall_s, new.recorded, {**kept.cpu, **new.cpu})


def write_reference_times(lab_dir: Path, times: ReferenceTimes) -> Path:
    """Write ``times`` into the lab's file, held-out tests' into ``heldout/`` (see the module docstring)."""
    heldout, visible = times.only(is_heldout_nodeid), times.only(lambda nodeid: not is_heldout_nodeid(nodeid))
    if heldout.tests:
        (lab_dir / HELDOUT_DIR).mkdir(exist_ok=True)
        _write(lab_dir / HELDOUT_DIR / TIMES_FILE, ReferenceTimes(heldout.tests, None, times.recorded, heldout.cpu))
    path = lab_dir / TIMES_FILE
    _write(path, visible)
    return path


def _write(path: Path, times: ReferenceTimes) -> None:
    path.write_text(json.dumps(times.to_dict(), indent=1) + "\n", encoding="utf-8")
