"""Lab 1's graded tests run what they inspect: a rewrite shown but not run earns nothing (course test).

``stale_forward.py`` builds the attack (every pass returns the reference's rewritten graph with
the code the module had before the pass) and its honest twin (every pass returns its input
untouched, claiming what the reference claims). Both are graded with lab 1's visible and held-out
tests, each in its own pytest process; the attack must not score more than its twin.

It grades the lab's whole suite twice: about 4 minutes on two cores (``nox -s tests`` runs it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from labkit.labspec import COURSE_ROOT

LAB = COURSE_ROOT / "lab01_fx_passes"


def score(kind: str, scratch: Path) -> tuple[int, int, dict[str, list]]:
    """(points earned, points possible, per-test outcomes) of the ``kind`` submission."""
    scores = scratch / f"{kind}.json"
    env = {**os.environ, "LAB01_SUBMISSION": kind, "LAB01_SCORES": str(scores), "LABKIT_IMPL": "student"}
    command = [sys.executable, "-m", "pytest", str(LAB / "test_lab.py"), str(LAB / "heldout"), "-q",
               "-p", "no:cacheprovider", "-p", "solutions.lab01_fx_passes.tests.stale_forward", "--tb=no"]  # fmt: skip
    subprocess.run(command, cwd=COURSE_ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False)
    outcomes = json.loads(scores.read_text())
    earned = sum(points for outcome, points in outcomes.values() if outcome == "passed")
    return earned, sum(points for _, points in outcomes.values()), outcomes


def test_a_rewrite_shown_but_not_run_earns_what_its_honest_code_earns(tmp_path):
    stale, possible, stale_outcomes = score("stale", tmp_path)
    honest, _, honest_outcomes = score("honest", tmp_path)
    gained = sorted(nodeid for nodeid, (outcome, _) in stale_outcomes.items()
                    if outcome == "passed" and honest_outcomes.get(nodeid, ["failed"])[0] != "passed")  # fmt: skip
    print(f"stale forward: {stale}/{possible}; honest twin: {honest}/{possible}")
    assert stale <= honest, (
        f"the stale-forward attack earned {stale}/{possible}, its honest code {honest}: {gained[:10]}"
    )
    assert not gained, f"tests the attack passes and its honest code fails: {gained[:10]}"
