"""Each lab's ``lab.toml``: the files students edit, and the talking points the tests give evidence for.

The format, defined once for all labs (``lab01_fx_passes/lab.toml`` is a complete example)::

    [lab]
    id = "lab01"                      # short name used by nox sessions and the grader
    package = "lab01_fx_passes"       # the lab's Python package (starter); solutions.<package> is the reference
    title = "FX graph transformation passes"
    editable = ["conv_bn.py", "dce.py"]   # the only files a student submission may change

    [[steps]]                         # the handout's steps, in its order
    step = 1                          # the number the handout gives it (0 or 1 first, then +1)
    title = "Conv+BN fusion"
    files = ["conv_bn.py"]            # where the student writes this step (editable files)
    tests = ["test_conv_bn_fused_matches_original"]   # test functions in the lab's test_lab.py

    [[talking_points]]
    id = "conv-bn-math"
    kind = "talking_point"            # or "interview"
    text = "What is the mathematical equivalence behind conv+BN fusion?"
    evidence = ["test_conv_bn_fused_matches_original"]   # test functions in the lab's test_lab.py

The grader takes only ``editable`` files from a submission, and marks a talking point
"evidence: passed" when every test named in ``evidence`` passed.

Besides ``test_lab.py``, a lab may hold instructor-only **held-out tests** in ``heldout/test_*.py``
(:data:`HELDOUT_DIR`): graded like the others, never shipped to students (see the grader's README).
``nox -s labNN`` ends with the points per step and the first step that still fails
(:mod:`labkit.step_summary`); every graded test belongs to exactly one step, and every step has a
test (:func:`step_coverage_problems`).

A lab's top level shows a student which files are theirs: the ``editable`` modules, the tests, the
handout and the spec; everything else a lab gives (harness modules, data, commands) lives in its
``given/`` subpackage (:data:`GIVEN_DIR`, checked by :func:`layout_problems`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import tomllib

#: The course's labs, in teaching order.
LAB_PACKAGES = ("lab01_fx_passes", "lab02_npu_backend", "lab03_triton_lowering")
#: The repository root (the folder holding the lab packages).
COURSE_ROOT = Path(__file__).resolve().parent.parent
#: Name of the spec file in every lab folder.
SPEC_FILE = "lab.toml"
#: Name of the graded test file in every lab folder.
TEST_FILE = "test_lab.py"
#: Folder, inside a lab, of its held-out tests: graded, never shipped to students (``test_*.py`` files).
HELDOUT_DIR = "heldout"
#: Folder, inside a lab, of its given code: what the student's files import, the tests' models and
#: checks, the lab's commands. A lab's top level holds the student's files and :data:`LAB_TOP_LEVEL` alone.
GIVEN_DIR = "given"
#: What may stand at a lab's top level beside its ``editable`` files (and its ``test_*.py`` files): the
#: package's public API, the handout, the spec, the reference's recorded times and the folders.
LAB_TOP_LEVEL = frozenset({"__init__.py", "README.md", SPEC_FILE, "reference_times.json", GIVEN_DIR, HELDOUT_DIR,
                           "figures"})  # fmt: skip
#: How much of a graded test a student sees in their feedback (Gradescope's and otter-grader's values):
#: ``visible`` (every test of ``test_lab.py``: students have them), ``hidden`` (held-out: only its
#: area and points are reported), ``after_due_date`` (held-out; Gradescope reveals it after the due date).
VISIBLE, HIDDEN, AFTER_DUE_DATE = "visible", "hidden", "after_due_date"
VISIBILITIES = (VISIBLE, HIDDEN, AFTER_DUE_DATE)
TALKING_POINT_KINDS = ("talking_point", "interview")


class LabSpecError(ValueError):
    """A ``lab.toml`` is missing a key, has a wrong type, or names a test that does not exist."""


@dataclass(frozen=True)
class TalkingPoint:
    """One talking point or interview question and the tests that give evidence for it."""

    id: str
    kind: str
    text: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Step:
    """One step of the lab's handout: where the student writes it, and the tests that grade it."""

    number: int
    title: str
    files: tuple[str, ...]
    tests: tuple[str, ...]


@dataclass(frozen=True)
class LabSpec:
    """Everything the harness and grader know about a lab, read from its ``lab.toml``."""

    id: str
    package: str
    title: str
    editable: tuple[str, ...]
    talking_points: tuple[TalkingPoint, ...]
    directory: Path
    steps: tuple[Step, ...] = ()

    @property
    def test_file(self) -> Path:
        """The lab's graded test file."""
        return self.directory / TEST_FILE

    def step_of(self, test_function: str) -> Step | None:
        """The step whose ``tests`` list ``test_function`` (a function name, without parameters)."""
        return step_listing(self.steps, test_function)


def step_listing(steps: tuple[Step, ...], test_function: str) -> Step | None:
    """The step of ``steps`` whose ``tests`` list ``test_function`` (a function name, without parameters)."""
    return next((step for step in steps if test_function in step.tests), None)


def _require(table: dict, key: str, kind: type, where: str):
    if key not in table:
        raise LabSpecError(f"{where}: missing key {key!r}")
    value = table[key]
    if not isinstance(value, kind):
        raise LabSpecError(f"{where}: {key!r} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _strings(table: dict, key: str, where: str) -> tuple[str, ...]:
    values = _require(table, key, list, where)
    if not values or not all(isinstance(v, str) and v for v in values):
        raise LabSpecError(f"{where}: {key!r} must be a non-empty list of non-empty strings")
    return tuple(values)


def parse_lab_spec(data: dict, directory: Path, source: str = SPEC_FILE) -> LabSpec:
    """Build a :class:`LabSpec` from parsed TOML, validating every field.

    Raises:
        LabSpecError: naming the file, the entry and the key that is wrong.
    """
    lab = _require(data, "lab", dict, source)
    where = f"{source} [lab]"
    points = []
    for index, entry in enumerate(data.get("talking_points", [])):
        at = f"{source} [[talking_points]] #{index + 1}"
        kind = _require(entry, "kind", str, at)
        if kind not in TALKING_POINT_KINDS:
            raise LabSpecError(f"{at}: kind {kind!r} is not one of {TALKING_POINT_KINDS}")
        points.append(
            TalkingPoint(
                id=_require(entry, "id", str, at),
                kind=kind,
                text=_require(entry, "text", str, at),
                evidence=_strings(entry, "evidence", at),
            )
        )
    ids = [p.id for p in points]
    if len(ids) != len(set(ids)):
        raise LabSpecError(f"{source}: talking point ids are not unique: {ids}")
    editable = _strings(lab, "editable", where)
    return LabSpec(
        id=_require(lab, "id", str, where),
        package=_require(lab, "package", str, where),
        title=_require(lab, "title", str, where),
        editable=editable,
        talking_points=tuple(points),
        directory=directory,
        steps=_parse_steps(data.get("steps", []), editable, source),
    )


def _parse_steps(entries: list, editable: tuple[str, ...], source: str) -> tuple[Step, ...]:
    """The ``[[steps]]`` tables: numbered consecutively, files among ``editable``, no test in two steps."""
    steps: list[Step] = []
    for index, entry in enumerate(entries):
        at = f"{source} [[steps]] #{index + 1}"
        number = _require(entry, "step", int, at)
        if steps and number != steps[-1].number + 1:
            raise LabSpecError(f"{at}: step {number} follows step {steps[-1].number} (number them in order)")
        if not steps and number not in (0, 1):
            raise LabSpecError(f"{at}: the first step is numbered {number} (0 or 1 expected)")
        files = _strings(entry, "files", at)
        unknown = [name for name in files if name not in editable]
        if unknown:
            raise LabSpecError(f"{at}: files {unknown} are not in [lab] editable")
        steps.append(Step(number, _require(entry, "title", str, at), files, _strings(entry, "tests", at)))
    seen: dict[str, int] = {}
    for step in steps:
        for test in step.tests:
            if test in seen:
                raise LabSpecError(f"{source}: {test} is listed in step {seen[test]} and step {step.number}")
            seen[test] = step.number
    return tuple(steps)


def load_lab_spec(package: str, root: Path = COURSE_ROOT) -> LabSpec:
    """Read and validate ``<root>/<package>/lab.toml``."""
    path = root / package / SPEC_FILE
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LabSpecError(f"{path}: no lab spec file") from None
    except tomllib.TOMLDecodeError as error:
        raise LabSpecError(f"{path}: invalid TOML: {error}") from None
    return parse_lab_spec(data, path.parent, source=str(path))


def all_lab_specs(root: Path = COURSE_ROOT) -> list[LabSpec]:
    """The specs of every lab of the course, in teaching order."""
    return [load_lab_spec(package, root) for package in LAB_PACKAGES]


def lab_spec_by_id(lab_id: str, root: Path = COURSE_ROOT) -> LabSpec:
    """Find a lab by its short id (``lab01``) or package name."""
    for spec in all_lab_specs(root):
        if lab_id in (spec.id, spec.package):
            return spec
    known = ", ".join(spec.id for spec in all_lab_specs(root))
    raise LabSpecError(f"unknown lab {lab_id!r}; known labs: {known}")


def test_functions(test_file: Path) -> set[str]:
    """Names of the ``test_*`` functions defined at module level or in classes of ``test_file``."""
    tree = ast.parse(test_file.read_text(encoding="utf-8"), filename=str(test_file))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")
    }


def missing_evidence(spec: LabSpec) -> list[str]:
    """Evidence entries of ``spec`` that name no test in its ``test_lab.py`` (empty when consistent)."""
    defined = test_functions(spec.test_file)
    return [f"{point.id}: {test}" for point in spec.talking_points for test in point.evidence if test not in defined]


def step_coverage_problems(spec: LabSpec) -> list[str]:
    """What keeps ``spec``'s steps from covering its tests exactly (empty when they do).

    Every test function of ``test_lab.py`` must belong to a step (so the per-step points add up to
    the lab's points), every test a step names must exist, and the spec must list steps at all.
    """
    if not spec.steps:
        return [f"{spec.package}: lab.toml lists no [[steps]]"]
    defined = test_functions(spec.test_file)
    listed = {test for step in spec.steps for test in step.tests}
    problems = [f"{test}: in no step of lab.toml" for test in sorted(defined - listed)]
    problems += [
        f"step {step.number}: {test} is not a test function of {TEST_FILE}"
        for step in spec.steps
        for test in step.tests
        if test not in defined
    ]
    return problems


def layout_problems(spec: LabSpec) -> list[str]:
    """What stands at ``spec``'s top level that is neither the student's nor in :data:`LAB_TOP_LEVEL`
    (empty when the tree shows the student's files at a glance). Caches (``__pycache__``, dot-folders)
    are not the lab's and are passed over."""
    allowed = LAB_TOP_LEVEL | set(spec.editable)
    return [
        f"{spec.package}/{path.name}: neither an editable file nor one of {sorted(LAB_TOP_LEVEL)}; "
        f"given code belongs in {spec.package}/{GIVEN_DIR}/"
        for path in sorted(spec.directory.iterdir())
        if path.name not in allowed
        and not (path.name.startswith("test_") and path.suffix == ".py")
        and not path.name.startswith(".")
        and path.name != "__pycache__"
    ]


test_functions.__test__ = False  # a helper, not a pytest test


def is_heldout_test_file(path: Path) -> bool:
    """True for a held-out test module: ``<lab>/heldout/test_*.py``."""
    return path.parent.name == HELDOUT_DIR and path.name.startswith("test_") and path.suffix == ".py"


def is_graded_test_file(path: Path) -> bool:
    """True for the files whose tests are graded: a lab's ``test_lab.py`` and its held-out test modules."""
    return path.name == TEST_FILE or is_heldout_test_file(path)


def lab_folder_of(test_path: Path) -> Path:
    """The lab folder (the one holding ``lab.toml``) of a graded test file, held-out ones included."""
    return test_path.parent.parent if is_heldout_test_file(test_path) else test_path.parent


def lab_package_of(test_path: Path) -> str:
    """The lab package a graded test file belongs to (``lab01_fx_passes`` for ``lab01_fx_passes/heldout/test_x.py``)."""
    return lab_folder_of(test_path).name
