"""``--step N`` on the real labs: for every lab and every step, exactly the tests its lab.toml lists
(and ``--step N --step M``: the tests of both, as the mutation runs use it).

One child process per lab collects the lab (``--collect-only``, the reference selected) once in full
and once per step, so every step is compared with the full collection: the step's run holds every
case of the step's test functions and nothing else (no other test, no held-out test).
"""

import json
import subprocess
import sys

import pytest

from labkit.labspec import COURSE_ROOT, LAB_PACKAGES, load_lab_spec

#: Collects ``package`` in full (key "all") and with ``--step N`` for each N given (a list: ``--step`` once for
#: each of its numbers); writes node ids as JSON.
COLLECT_EVERY_STEP = """
import json, sys
import pytest

class Collected:
    def __init__(self):
        self.nodeids = []

    def pytest_collection_finish(self, session):
        self.nodeids = [item.nodeid for item in session.items]

package, out, steps = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
result = {}
for step in ["all", *steps]:
    collected = Collected()
    numbers = [] if step == "all" else step if isinstance(step, list) else [step]
    select = [arg for number in numbers for arg in ("--step", str(number))]
    code = pytest.main([package, "--collect-only", "-qq", "--impl=solution", "-p", "no:cacheprovider", *select],
                       plugins=[collected])
    key = json.dumps(step) if isinstance(step, list) else str(step)
    result[key] = {"exit": int(code), "nodeids": collected.nodeids}
open(out, "w").write(json.dumps(result))
"""


def function_of(nodeid: str) -> str:
    return nodeid.split("::")[-1].split("[")[0]


@pytest.mark.parametrize("package", LAB_PACKAGES)
def test_step_selects_exactly_the_tests_lab_toml_lists_for_every_step(package, tmp_path):
    spec = load_lab_spec(package)
    numbers = [step.number for step in spec.steps]
    missing = max(numbers) + 1
    out = tmp_path / "collected.json"
    done = subprocess.run(
        [sys.executable, "-c", COLLECT_EVERY_STEP, package, str(out), json.dumps([*numbers, missing, numbers[-2:]])],
        cwd=COURSE_ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0 and out.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    collected = json.loads(out.read_text())
    everything = collected["all"]["nodeids"]
    assert collected["all"]["exit"] == 0 and everything
    for step in spec.steps:
        selected = collected[str(step.number)]
        expected = [
            nodeid
            for nodeid in everything
            if nodeid.startswith(f"{package}/test_lab.py::") and function_of(nodeid) in step.tests
        ]
        assert selected["exit"] == 0, f"--step {step.number} did not collect"
        assert selected["nodeids"] == expected, f"{spec.id} --step {step.number}: not exactly its tests"
        assert {function_of(nodeid) for nodeid in selected["nodeids"]} == set(step.tests)
    last_two = [step for step in spec.steps if step.number in numbers[-2:]]
    both = collected[json.dumps(numbers[-2:])]
    assert both["exit"] == 0 and both["nodeids"] == [
        nodeid
        for nodeid in everything
        if nodeid.startswith(f"{package}/test_lab.py::") and any(function_of(nodeid) in s.tests for s in last_two)
    ], f"{spec.id} --step {numbers[-2]} --step {numbers[-1]}: not exactly the tests of both steps"
    assert collected[str(missing)]["exit"] == pytest.ExitCode.USAGE_ERROR
    assert (
        f"--step {missing}: {spec.id} has no step {missing}; its steps are {', '.join(map(str, numbers))}"
        in done.stderr
    )
