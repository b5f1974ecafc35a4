"""Mutation testing of the reference (grader.mutation) on the demo course: one mutant killed, one survivor.

Demo lab A's step 1 tests ``add`` and ``mean``; two of cosmic-ray's operators give three mutants of
``solutions/labA_arith/arith.py``: ``a + b`` becomes ``a - b`` in ``add`` (the visible tests kill it) and
in ``fib`` (step 3's ``test_fib`` kills it: every step that edits ``arith.py`` judges its mutants), and
``sum(values) / len(values)`` becomes ``//`` in ``mean``, which every list the tests average survives
(their sums divide evenly).
"""

from __future__ import annotations

import json

import pytest

from grader import mutation
from grader.tests.corpus import DEMO_COURSE

pytest.importorskip("cosmic_ray", reason="mutation testing needs cosmic-ray: pip install -e '.[mutation]'")

OPERATORS = r"ReplaceBinaryOperator_(Add_Sub|Div_FloorDiv)$"
ARITH = DEMO_COURSE / "solutions" / "labA_arith" / "arith.py"


def test_mutation_kills_sub_for_add_and_names_the_floor_division_that_survives(tmp_path, capsys):
    before = ARITH.read_text()
    out = tmp_path / "mutation.json"
    argv = ["--course", str(DEMO_COURSE), "--lab", "labA", "--step", "1", "--operators", OPERATORS, "--json", str(out)]

    assert mutation.main(argv) == 0

    assert ARITH.read_text() == before, "the course's own reference was mutated"
    (step,) = json.loads(out.read_text())["steps"]
    assert step["summary"] == {"tried": 3, "killed": 2, "survived": 1, "timeout": 0, "incompetent": 0, "score": 2 / 3}
    survivors = [mutant for mutant in step["mutants"] if mutant["outcome"] == "survived"]
    assert [(m["file"], m["line"], m["operator"]) for m in survivors] == [
        ("solutions/labA_arith/arith.py", 11, "core/ReplaceBinaryOperator_Div_FloorDiv")
    ]
    assert "+    return sum(values) // len(values)" in survivors[0]["diff"]
    killed_lines = sorted(m["line"] for m in step["mutants"] if m["outcome"] == "killed")
    assert killed_lines == [6, 23]  # add's a + b (step 1's tests), fib's a + b (step 3's test_fib)
    assert step["judged_by_steps"] == [1, 2, 3, 4]  # every step of lab A edits arith.py
    printed = capsys.readouterr().out
    assert "labA      1     3      2        1       0       0 67%" in printed
    assert "survived: solutions/labA_arith/arith.py:11 core/ReplaceBinaryOperator_Div_FloorDiv" in printed


def test_a_timeout_is_counted_apart_from_kills():
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    normal = WorkerOutcome.NORMAL
    assert mutation._outcome(WorkResult(normal, output="timeout", test_outcome=TestOutcome.KILLED)) == "timeout"
    assert mutation._outcome(WorkResult(normal, output="1 failed", test_outcome=TestOutcome.KILLED)) == "killed"
    assert mutation._outcome(WorkResult(normal, output="", test_outcome=TestOutcome.SURVIVED)) == "survived"
    assert mutation._outcome(WorkResult(WorkerOutcome.EXCEPTION, test_outcome=TestOutcome.INCOMPETENT)) == "incompetent"
    step = mutation.StepResult("labA", 1, "t", ["arith.py"], 3, 1.0, 13.0)
    step.mutants = [mutation.Mutant("f", 1, "op", 0, outcome, "") for outcome in ("timeout", "killed", "survived")]
    assert step.score == 0.5  # the timeout is in neither count


def test_a_reference_that_fails_its_own_tests_is_refused(tmp_path):
    copy = mutation.copy_course(DEMO_COURSE, tmp_path)
    arith = copy / "solutions" / "labA_arith" / "arith.py"
    arith.write_text(arith.read_text().replace("return a + b", "return a * b"))
    spec = mutation.load_lab_spec("labA_arith", copy)
    with pytest.raises(RuntimeError, match="fail on the unmutated reference"):
        mutation.mutate_step(copy, spec, 1, sample=1, seed=0, heldout=False)


def test_mutants_inside_never_evaluated_annotations_are_left_out():
    lazy = (
        "from __future__ import annotations\n\n\n"
        "def f(x: int | None, *, y: dict[str, int]) -> A | None:\n"
        "    z: B | C = 1\n"
    )
    spans = mutation.annotation_spans(lazy)
    assert sorted(spans) == [((4, 9), (4, 19)), ((4, 27), (4, 41)), ((4, 46), (4, 54)), ((5, 7), (5, 12))]
    assert mutation._inside((4, 48), spans)  # the | of A | None
    assert not mutation._inside((5, 15), spans)  # the value 1
    # Evaluated when the function is defined: a mutant there breaks the import, a real mutant.
    assert mutation.annotation_spans(lazy.replace("from __future__ import annotations\n", "")) == []


def test_a_mutant_is_judged_by_every_step_that_edits_its_file(tmp_path):
    """Step 1's sample of ``arith.py`` holds ``fib``'s ``a + b``, which only step 3's ``test_fib`` runs: judged by
    step 1's tests alone (and no held-out tests) it would "survive", a mistake no student could hand in unseen."""
    out = tmp_path / "mutation.json"
    argv = ["--course", str(DEMO_COURSE), "--lab", "labA", "--step", "1", "--no-heldout",
            "--operators", r"ReplaceBinaryOperator_Add_Sub$", "--json", str(out)]  # fmt: skip

    assert mutation.main(argv) == 0

    (step,) = json.loads(out.read_text())["steps"]
    outcomes = sorted((m["line"], m["outcome"]) for m in step["mutants"])
    assert outcomes == [(6, "killed"), (23, "killed")], "fib's a - b must be killed by step 3's test_fib"
    assert mutation.test_command(mutation.find_lab(DEMO_COURSE, "labA"), [1, 3], heldout=False).count("--step") == 2
