"""The lab.toml format, and every lab's spec being consistent with its tests."""

import pytest

from labkit.labspec import (
    LAB_PACKAGES,
    LabSpecError,
    layout_problems,
    load_lab_spec,
    missing_evidence,
    parse_lab_spec,
    step_coverage_problems,
)

VALID = {
    "lab": {"id": "labX", "package": "labX_demo", "title": "Demo", "editable": ["demo.py"]},
    "talking_points": [
        {"id": "why", "kind": "talking_point", "text": "Why?", "evidence": ["test_a"]},
        {"id": "how", "kind": "interview", "text": "How?", "evidence": ["test_a", "test_b"]},
    ],
    "steps": [
        {"step": 1, "title": "First", "files": ["demo.py"], "tests": ["test_a"]},
        {"step": 2, "title": "Second", "files": ["demo.py"], "tests": ["test_b"]},
    ],
}


def test_parses_a_valid_spec(tmp_path):
    spec = parse_lab_spec(VALID, tmp_path)
    assert spec.editable == ("demo.py",)
    assert [p.kind for p in spec.talking_points] == ["talking_point", "interview"]
    assert spec.talking_points[1].evidence == ("test_a", "test_b")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("lab"), "missing key 'lab'"),
        (lambda d: d["lab"].pop("editable"), "missing key 'editable'"),
        (lambda d: d["lab"].update(editable=[]), "non-empty list"),
        (lambda d: d["talking_points"][0].update(kind="essay"), "kind 'essay'"),
        (lambda d: d["talking_points"][1].update(id="why"), "not unique"),
        (lambda d: d["talking_points"][0].update(evidence="test_a"), "'evidence' must be list"),
        (lambda d: d["steps"][1].update(step=3), "step 3 follows step 1"),
        (lambda d: d["steps"][0].update(step=5), "first step is numbered 5"),
        (lambda d: d["steps"][0].update(files=["other.py"]), r"files \['other.py'\] are not in \[lab\] editable"),
        (lambda d: d["steps"][1].update(tests=["test_a"]), "test_a is listed in step 1 and step 2"),
        (lambda d: d["steps"][0].update(tests=[]), "'tests' must be a non-empty list"),
    ],
)
def test_invalid_specs_name_what_is_wrong(tmp_path, mutate, message):
    import copy

    data = copy.deepcopy(VALID)
    mutate(data)
    with pytest.raises(LabSpecError, match=message):
        parse_lab_spec(data, tmp_path)


def test_invalid_toml_names_the_file(tmp_path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "lab.toml").write_text("[lab\n")
    with pytest.raises(LabSpecError, match="invalid TOML"):
        load_lab_spec("broken", tmp_path)


@pytest.mark.parametrize("package", LAB_PACKAGES)
def test_every_lab_spec_is_valid_and_its_evidence_exists(package):
    spec = load_lab_spec(package)
    assert spec.package == package
    assert spec.talking_points, "each lab lists its talking points"
    assert missing_evidence(spec) == []
    for name in spec.editable:
        assert (spec.directory / name).is_file(), f"editable file {name} missing from the starter"
        solution = spec.directory.parent / "solutions" / package / name
        assert solution.is_file(), f"the reference solution must provide {name} (drop-in replacement)"


def test_steps_are_parsed_in_handout_order(tmp_path):
    spec = parse_lab_spec(VALID, tmp_path)
    assert [(step.number, step.tests) for step in spec.steps] == [(1, ("test_a",)), (2, ("test_b",))]
    assert spec.step_of("test_b").title == "Second"
    assert spec.step_of("test_c") is None


def test_step_coverage_names_unlisted_tests_and_missing_ones(tmp_path):
    (tmp_path / "test_lab.py").write_text("def test_a():\n    pass\n\ndef test_c():\n    pass\n")
    spec = parse_lab_spec(VALID, tmp_path)
    assert step_coverage_problems(spec) == [
        "test_c: in no step of lab.toml",
        "step 2: test_b is not a test function of test_lab.py",
    ]


@pytest.mark.parametrize("package", LAB_PACKAGES)
def test_every_graded_test_belongs_to_exactly_one_handout_step(package):
    """So ``nox -s labNN``'s points per step add up to the lab's points, and no step goes ungraded."""
    spec = load_lab_spec(package)
    assert step_coverage_problems(spec) == []
    assert all(step.tests for step in spec.steps), "every step has at least one test"
    handout = (spec.directory / "README.md").read_text(encoding="utf-8")
    for step in spec.steps:
        for name in step.files:
            assert f"`{name}`" in handout, f"step {step.number}'s file {name} is not in the handout"


@pytest.mark.parametrize("package", LAB_PACKAGES)
def test_every_labs_top_level_holds_the_students_files_and_no_given_code(package):
    """A student names their files from the tree: given code is in the lab's given/ folder."""
    spec = load_lab_spec(package)
    assert layout_problems(spec) == []
    assert (spec.directory / "given" / "__init__.py").is_file(), "the given code is a subpackage"


def test_a_given_module_at_a_labs_top_level_is_named(tmp_path):
    for name in ("demo.py", "helpers.py", "test_lab.py", "lab.toml", "data.json"):
        (tmp_path / name).write_text("")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "given").mkdir()
    spec = parse_lab_spec(VALID, tmp_path)
    problems = layout_problems(spec)
    assert [problem.split(":")[0] for problem in problems] == ["labX_demo/data.json", "labX_demo/helpers.py"]
    assert "given code belongs in labX_demo/given/" in problems[0]
