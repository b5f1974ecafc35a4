"""The class report's similarity check: a planted near-copy is flagged, honest students are not.

The class is :func:`grader.synthetic.classes.similarity_class`: honest students who each pick their own
implementation of every function (one of four, the first the reference's) and write it in their own
hand, and one student who handed in a classmate's file with every variable renamed, the functions
reordered and comments added.
"""

from __future__ import annotations

import filecmp
import html
import random
import re

import pytest

from grader.__main__ import main
from grader.evidence.layout import SUBMITTED_DIR
from grader.report.similarity import NO_FILES, Thresholds, compare_lab, lab_document
from grader.synthetic import algorithms
from grader.synthetic.classes import Student, honest_module, similarity_class
from grader.tests.corpus import DEMO_COURSE
from grader.tests.report.graded_folders import lab, write_graded

CLASS_SIZE, SEED = 20, 0
#: Inputs on which every variant must compute what the reference computes.
CASES = {
    "moving_average": [([1.0, 2, 3, 4, 5], 2), ([1.0], 3), ([2.0, 4, 6], 3)],
    "histogram": [([0.0, 0.5, 1.0, 2.5, 3.0, -1, 4], 3, 0.0, 3.0), ([1.0, 1.9, 2.0], 2, 1.0, 2.0)],
    "word_counts": [("The cat, the HAT! and 42 cats",), ("",)],
    "run_lengths": [("aaabccdddd",), ("",), ("a\n\nb",)],
    "merge_intervals": [([(5, 6), (1, 3), (2, 4), (6, 8), (10, 11)],), ([],)],
    "topological_order": [(["a", "b", "c", "d"], [("c", "a"), ("a", "b"), ("d", "b")]), (["x"], [])],
    "search_sorted": [([1, 3, 3, 5], 3), ([1, 3, 3, 5], 6), ([], 1), ([1, 2], 0)],
    "transpose": [([[1, 2, 3], [4, 5, 6]],), ([],)],
    "flatten": [([1, [2, [3, []], 4], [[5]]],), ([],)],
}


def documents(modules: dict[str, str]) -> dict[str, str]:
    return {student: lab_document({algorithms.MODULE: text}) for student, text in modules.items()}


STARTER = lab_document({algorithms.MODULE: algorithms.starter()})


@pytest.fixture(scope="module")
def planted_class() -> tuple[dict[str, str], str]:
    """The honest class plus ``copier``, a near-copy of the honest student who solved the most."""
    modules = similarity_class(CLASS_SIZE, SEED)
    source = min(modules, key=lambda student: modules[student].count("NotImplementedError"))
    modules["copier"] = algorithms.near_copy(modules[source], random.Random(SEED))
    return modules, source


def _run(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, algorithms.MODULE, "exec"), namespace)  # noqa: S102 - the test's own synthetic modules
    return namespace


def test_every_student_of_the_synthetic_class_computes_what_the_reference_computes(planted_class):
    """The variants are honest implementations of one contract, and the copy still works."""
    modules, _ = planted_class
    reference = _run(algorithms.reference())
    for student, text in modules.items():
        functions = _run(text)
        for name, cases in CASES.items():
            for args in cases:
                try:
                    got = functions[name](*args)
                except NotImplementedError:
                    break  # left as the starter's stub
                assert got == reference[name](*args), (student, name, args)


def test_the_planted_near_copy_is_flagged_and_no_honest_pair_is(planted_class):
    modules, source = planted_class
    thresholds = Thresholds()
    result = compare_lab(documents(modules), STARTER, thresholds)
    flagged = result.flagged(thresholds)
    assert [(pair.first, pair.second) for pair in flagged] == [tuple(sorted(("copier", source)))]
    planted = flagged[0]
    honest = [pair for pair in result.pairs if "copier" not in (pair.first, pair.second)]
    print(
        f"\nplanted copy {planted.score:.3f} (threshold {thresholds.similarity}), {planted.overlap} characters "
        f"shared; highest honest pair {honest[0].first} ~ {honest[0].second} {honest[0].score:.3f}"
    )
    assert planted.score >= 0.85, "renaming and reordering hide almost nothing"
    assert honest[0].score < thresholds.similarity - 0.15, "honest pairs stay well below the threshold"


def test_renamed_variables_change_nothing_and_reordered_functions_little(planted_class):
    modules, source = planted_class
    original = modules[source]
    renamed = algorithms.rename_locals(original, random.Random(1))
    assert renamed != original
    others = {student: text for student, text in modules.items() if student not in (source, "copier")}

    def score(copy: str) -> float:
        result = compare_lab(documents({**others, "original": original, "copy": copy}), STARTER)
        return next(pair.score for pair in result.pairs if {pair.first, pair.second} == {"copy", "original"})

    assert score(renamed) == 1.0
    assert score(algorithms.near_copy(original, random.Random(1))) >= 0.9, (
        "only code across a function boundary changes"
    )


def test_code_much_of_the_class_shares_is_not_evidence():
    """Every honest student also wrote the handout's helper the same way: common code, set aside.
    Without that rule (MOSS's -m) the helper alone would flag pairs of honest students."""
    helper = """


def check_intervals(intervals: list[tuple[int, int]]) -> None:
    for position, (start, end) in enumerate(intervals):
        if not isinstance(start, int) or not isinstance(end, int):
            raise TypeError(f"interval {position} is not a pair of ints: {(start, end)!r}")
        if end < start:
            raise ValueError(f"interval {position} ends before it starts: {(start, end)!r}")


def check_graph(nodes: list[str], edges: list[tuple[str, str]]) -> None:
    known = set(nodes)
    if len(known) != len(nodes):
        raise ValueError("a node is listed twice")
    for source, target in edges:
        if source not in known or target not in known:
            raise ValueError(f"edge {(source, target)!r} names a node that is not listed")
        if source == target:
            raise ValueError(f"edge {(source, target)!r} is a loop")


def check_table(rows: list[list[float]]) -> None:
    widths = {len(row) for row in rows}
    if len(widths) > 1:
        raise ValueError(f"rows of different lengths: {sorted(widths)}")
    for index, row in enumerate(rows):
        for column, cell in enumerate(row):
            if not isinstance(cell, (int, float)):
                raise TypeError(f"cell ({index}, {column}) is not a number: {cell!r}")
"""
    rng = random.Random(3)
    students = [Student(f"student{k:02d}", 0.3, rng) for k in range(12)]
    modules = {student.name: honest_module(student) + helper for student in students}
    kept = compare_lab(documents(modules), STARTER)
    assert kept.flagged(Thresholds()) == []
    without_rule = Thresholds(common_students=len(modules) + 1, common_fraction=1.0)
    assert compare_lab(documents(modules), STARTER, without_rule).flagged(without_rule), (
        "the helper alone makes honest students look alike"
    )


def test_a_student_who_changed_nothing_is_not_compared():
    """The starter's code is set aside even where the class is too small for any code to be common."""
    modules = similarity_class(3, seed=5)
    modules["idle"] = algorithms.starter()
    result = compare_lab(documents(modules), STARTER)
    assert result.unchanged == ("idle",)
    assert all("idle" not in (pair.first, pair.second) for pair in result.pairs)


# ---------------------------------------------------------------- in the class report


def write_course(root):
    """A course of one lab, ``labS``, whose starter is the synthetic class's."""
    package = root / algorithms.PACKAGE
    package.mkdir(parents=True)
    (package / "lab.toml").write_text(
        f'[lab]\nid = "labS"\npackage = "{algorithms.PACKAGE}"\n'
        f'title = "Small algorithms"\neditable = ["{algorithms.MODULE}"]\n'
    )
    (package / "test_lab.py").write_text("def test_nothing():\n    pass\n")
    (package / algorithms.MODULE).write_text(algorithms.starter())
    return root


def test_the_report_lists_the_flagged_pair_with_its_side_by_side_page(planted_class, tmp_path, capsys):
    modules, source = planted_class
    for student, text in modules.items():
        write_graded(
            tmp_path / "graded",
            student,
            [lab("labS", 5, package=algorithms.PACKAGE)],
            {f"{algorithms.PACKAGE}/{algorithms.MODULE}": text},
        )
    course = write_course(tmp_path / "course")
    assert main(["report", str(tmp_path / "graded"), "--out", str(tmp_path / "report"), "--course", str(course)]) == 0
    printed = capsys.readouterr().out
    pair = " ~ ".join(sorted(("copier", source)))
    assert f"{pair}: 9" in printed and "pairs flagged: 1" in printed
    page = (tmp_path / "report" / "class.html").read_text()
    section = html.unescape(re.sub(r"<[^>]+>", "", page[page.index("id='similarity'") :]))
    assert pair in section and "flagged when 70% or more" in section and "Pairs flagged: 1." in section
    link = re.search(r"href='(similarity/[^']+\.html)'", page).group(1)
    side_by_side = (tmp_path / "report" / link).read_text()
    assert side_by_side.count("<mark>") > 5 and "copier" in side_by_side and source in side_by_side


def test_without_kept_files_the_section_says_why_and_the_report_still_works(tmp_path, capsys):
    write_graded(tmp_path / "graded", "alice", [lab("lab01", 5)])
    assert main(["report", str(tmp_path / "graded"), "--out", str(tmp_path / "report")]) == 0
    assert "similar submissions: none compared: no graded folder holds the editable files" in capsys.readouterr().out
    page = html.unescape((tmp_path / "report" / "class.html").read_text())
    assert NO_FILES in page


def test_a_lab_missing_from_the_course_is_reported_not_compared(tmp_path, capsys):
    for student in ("alice", "bob"):
        write_graded(
            tmp_path / "graded",
            student,
            [lab("labS", 5, package="labS_elsewhere")],
            {"labS_elsewhere/algorithms.py": algorithms.reference()},
        )
    assert (
        main(
            [
                "report",
                str(tmp_path / "graded"),
                "--out",
                str(tmp_path / "report"),
                "--course",
                str(write_course(tmp_path / "course")),
            ]
        )
        == 0
    )
    assert "labS: not compared: labS_elsewhere is not a lab of the course" in capsys.readouterr().out


def test_the_grader_keeps_the_editable_files_it_graded(graded_corpus, corpus_dir):
    """``run``/``batch`` copy what the sandbox took into ``submitted/``, and nothing else."""
    solution = graded_corpus / "solution" / SUBMITTED_DIR
    kept = sorted(path.relative_to(solution).as_posix() for path in solution.rglob("*") if path.is_file())
    assert kept == ["labA_arith/arith.py", "labB_text/text.py"]
    assert filecmp.cmp(
        solution / "labA_arith" / "arith.py", DEMO_COURSE / "solutions" / "labA_arith" / "arith.py", shallow=False
    )
    edited = graded_corpus / "edits_test_lab" / SUBMITTED_DIR
    assert not list(edited.rglob("test_*.py")), "an edited test is never kept: it was not graded"


def test_pair_pages_are_one_per_pair_and_short_whatever_the_names():
    """``x y`` and ``x_y`` reduce alike (a 100% pair's page was overwritten by an 82% one's), and two
    127-byte ids made a file name too long for the filesystem (the whole report was lost)."""
    from grader.report.similarity import Pair, pair_page_name

    def page(first, second):
        return pair_page_name("labA", Pair(first, second, 1, 1, 1, 1))

    assert page("c", "x y") != page("c", "x_y")
    long_a, long_b = "Jane Marie Doe-Smith_" * 6 + "a", "Jane Marie Doe-Smith_" * 6 + "b"
    assert page(long_a, long_b) != page(long_a, long_a + "c")
    assert len(page(long_a, long_b).split("/")[-1].encode()) < 200
    assert re.fullmatch(r"similarity/[\w.-]+\.html", page("<b>", "é\x1b"))
