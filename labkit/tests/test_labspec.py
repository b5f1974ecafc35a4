"""The lab.toml format, and every lab's spec being consistent with its tests."""

import pytest

from labkit.labspec import LAB_PACKAGES, LabSpecError, load_lab_spec, missing_evidence, parse_lab_spec

VALID = {
    "lab": {"id": "labX", "package": "labX_demo", "title": "Demo", "editable": ["demo.py"]},
    "talking_points": [
        {"id": "why", "kind": "talking_point", "text": "Why?", "evidence": ["test_a"]},
        {"id": "how", "kind": "interview", "text": "How?", "evidence": ["test_a", "test_b"]},
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
