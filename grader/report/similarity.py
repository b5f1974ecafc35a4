"""Similar submissions: pairs of students whose editable files are unusually alike.

The detector is `copydetect <https://github.com/blingenf/copydetect>`_, a maintained implementation of
MOSS's winnowing (Schleimer, Wilkerson and Aiken, SIGMOD 2003). Each student's editable files of a lab
(``GRADED/<student>/submitted/<package>/...``, kept by the grader as graded; the starter's file where
the student handed none in) are read as one document. copydetect tokenizes it with Pygments and
replaces every name by one letter, so renamed variables and functions change nothing; comments and
blank lines are dropped; fingerprints are position-free, so reordered functions change nothing either.

What is never evidence of copying:

- **the starter code** (signatures, docstrings, TODO text): every fingerprint of the lab's starter
  files is boilerplate, as copydetect's ``boilerplate_dirs`` does;
- **code most of the class shares** (MOSS's ``-m``): a fingerprint found in at least
  :attr:`Thresholds.common_students` students' documents, or :attr:`Thresholds.common_fraction` of
  them, is common idiom (the handout's recipe, the one obvious line), not a copy. A group of that size
  copying the same source is therefore not flagged: the check finds pairs and small groups.

A pair's **similarity** is the share of both students' remaining code that is found in the other's
(JPlag's "average similarity"), and the pair is **flagged** when it reaches :attr:`Thresholds.similarity`
and the shared code is at least :attr:`Thresholds.min_overlap` characters of copydetect's filtered text
(roughly 3 to 5 per source token), so that two students who each wrote one small function the same way
are not flagged. The score is symmetric: a student who copied one function of a much longer submission
scores low (the check finds submissions that are mostly the same code; the report lists each pair's
two shares). A flag is a reason for a person to look at the pair side by side (the HTML view), never a
verdict.

:func:`compare_lab` is pure (documents in, scores out); reading the graded folders is
:func:`lab_documents`, at the edge.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from grader.course.labs import Course
from grader.evidence.layout import SUBMITTED_DIR
from labkit.labspec import LabSpec

#: Pygments' language for every document (the editable files are Python modules).
LANGUAGE = "python"


@dataclass(frozen=True)
class Thresholds:
    """What the check calls similar; every value is printed in the report.

    Attributes:
        noise: fingerprint length in filtered characters: a shared run shorter than this is never a
            match (copydetect's ``noise_t``, its default 25).
        guarantee: a shared run at least this long is always found (copydetect's ``guarantee_t``).
            Equal to ``noise``: every fingerprint is kept, no winnowing, so scores do not depend on
            Python's per-process string hashing (winnowing keeps the smallest hash of each window).
        similarity: flag when the share of the two students' code (beyond the starter and common code)
            found in the other's reaches this (:attr:`Pair.score`).
        min_overlap: and the code they share is at least this many filtered characters.
        common_students, common_fraction: a fingerprint in at least ``max(common_students,
            ceil(common_fraction x students))`` documents is common code, never a match.
    """

    noise: int = 25
    guarantee: int = 25
    similarity: float = 0.7
    min_overlap: int = 300
    common_students: int = 5
    common_fraction: float = 0.2

    def common_count(self, documents: int) -> int:
        """How many documents must hold a fingerprint for it to be common code."""
        return max(self.common_students, math.ceil(self.common_fraction * documents))

    def to_dict(self) -> dict[str, Any]:
        return {
            "noise": self.noise,
            "guarantee": self.guarantee,
            "similarity": self.similarity,
            "min_overlap": self.min_overlap,
            "common_students": self.common_students,
            "common_fraction": self.common_fraction,
        }


@dataclass(frozen=True)
class Pair:
    """Two students' documents compared (lengths in copydetect's filtered characters).

    Attributes:
        first, second: the students (``first < second``).
        code_first, code_second: each one's code beyond the starter and common code.
        matched_first, matched_second: how much of it is found in the other's.
        slices: for each document, the ``(starts, ends)`` of the matched spans in its text (the HTML view).
    """

    first: str
    second: str
    code_first: int
    code_second: int
    matched_first: int
    matched_second: int
    slices: tuple[Any, Any] = field(repr=False, compare=False, default=(None, None))

    @property
    def score(self) -> float:
        """The pair's similarity: the share of both students' code that the other holds (JPlag's average)."""
        return (self.matched_first + self.matched_second) / max(self.code_first + self.code_second, 1)

    @property
    def shares(self) -> tuple[float, float]:
        """The share of each one's code found in the other's."""
        return self.matched_first / max(self.code_first, 1), self.matched_second / max(self.code_second, 1)

    @property
    def overlap(self) -> int:
        """The code they share (the smaller of the two matched lengths)."""
        return min(self.matched_first, self.matched_second)

    def flagged(self, thresholds: Thresholds) -> bool:
        return self.score >= thresholds.similarity and self.overlap >= thresholds.min_overlap

    def to_dict(self) -> dict[str, Any]:
        return {
            "students": [self.first, self.second],
            "score": round(self.score, 4),
            "shares": [round(share, 4) for share in self.shares],
            "overlap": self.overlap,
            "code": [self.code_first, self.code_second],
        }


@dataclass(frozen=True)
class LabSimilarity:
    """One lab's comparison.

    Attributes:
        compared: students whose document holds code beyond the starter and common code.
        unchanged: students whose document holds none (the starter, or only common code): not compared.
        pairs: every compared pair that shares any code, highest score first.
        common_count: documents a fingerprint had to be in to count as common code.
    """

    compared: tuple[str, ...]
    unchanged: tuple[str, ...]
    pairs: tuple[Pair, ...]
    common_count: int

    def flagged(self, thresholds: Thresholds) -> list[Pair]:
        return [pair for pair in self.pairs if pair.flagged(thresholds)]


def _fingerprint(name: str, text: str, thresholds: Thresholds):
    """copydetect's fingerprint of ``text`` (tokenized once: Pygments is most of the check's time)."""
    from copydetect.detector import CodeFingerprint

    return CodeFingerprint(
        name, thresholds.noise, thresholds.guarantee - thresholds.noise + 1, language=LANGUAGE, fp=io.StringIO(text)
    )


def _every_kgram(fingerprint, thresholds: Thresholds) -> set[int]:
    """Every fingerprint of the text, before winnowing: what boilerplate and common code are found in."""
    from copydetect.utils import hashed_kgrams

    return set(hashed_kgrams(fingerprint.filtered_code, thresholds.noise).tolist())


def _set_aside(fingerprint, boilerplate, thresholds: Thresholds) -> None:
    """Drop the ``boilerplate`` fingerprints from ``fingerprint``, with the functions copydetect's own
    ``CodeFingerprint`` uses for its ``boilerplate`` argument (without tokenizing the text again)."""
    from copydetect.utils import get_document_fingerprints, get_token_coverage

    window = thresholds.guarantee - thresholds.noise + 1
    hashes, where = get_document_fingerprints(fingerprint.filtered_code, thresholds.noise, window, boilerplate)
    fingerprint.hashes, fingerprint.hash_idx = hashes, where
    fingerprint.token_coverage = get_token_coverage(where, thresholds.noise, len(fingerprint.filtered_code))


def compare_lab(documents: dict[str, str], starter: str, thresholds: Thresholds = Thresholds()) -> LabSimilarity:
    """Compare every pair of ``documents`` (student -> the lab's editable files as one text).

    ``starter`` (the lab's starter files as one text) and code common to much of the class are
    boilerplate (see the module docstring). Pure: the same documents give the same scores.
    """
    import numpy as np
    from copydetect.detector import compare_files

    starter_kgrams = _every_kgram(_fingerprint("starter", starter, thresholds), thresholds)
    prints = {student: _fingerprint(student, text, thresholds) for student, text in sorted(documents.items())}
    holders: dict[int, int] = {}
    for fingerprint in prints.values():
        for value in _every_kgram(fingerprint, thresholds) - starter_kgrams:
            holders[value] = holders.get(value, 0) + 1
    common_count = thresholds.common_count(len(documents))
    boilerplate = np.array(
        sorted(starter_kgrams | {value for value, count in holders.items() if count >= common_count}), dtype=np.int64
    )
    for fingerprint in prints.values():
        _set_aside(fingerprint, boilerplate, thresholds)
    compared = tuple(student for student, fingerprint in prints.items() if fingerprint.token_coverage > 0)
    unchanged = tuple(student for student in prints if student not in compared)
    pairs = []
    for first, second in combinations(compared, 2):
        overlap, (share_first, share_second), slices = compare_files(prints[first], prints[second])
        if overlap:
            code_first, code_second = int(prints[first].token_coverage), int(prints[second].token_coverage)
            pairs.append(
                Pair(
                    first,
                    second,
                    code_first,
                    code_second,
                    round(share_first * code_first),
                    round(share_second * code_second),
                    tuple(slices),
                )
            )
    pairs.sort(key=lambda pair: (-pair.score, pair.first, pair.second))
    return LabSimilarity(compared, unchanged, tuple(pairs), common_count)


def highlighted(text: str, slices) -> str:
    """``text`` as HTML with the matched spans in ``<mark>`` (copydetect's highlighter)."""
    import html

    from copydetect.utils import highlight_overlap

    if slices is None or len(slices[0]) == 0:
        return html.escape(text)
    marked, _ = highlight_overlap(text, slices, "<mark>", "</mark>", escape_html=True)
    return marked


# ---------------------------------------------------------------- reading the graded folders


def lab_document(files: dict[str, str]) -> str:
    """The lab's editable files as one document, each under a comment naming it (comments are not compared)."""
    return "".join(f"# ---- {name} ----\n{text.rstrip()}\n\n" for name, text in files.items())


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def starter_document(spec: LabSpec) -> str:
    """The lab's starter files as one document (a missing one counts as empty)."""
    return lab_document({name: _read(spec.directory / name) or "" for name in spec.editable})


def lab_documents(graded: Path, students: list[str], spec: LabSpec) -> dict[str, str]:
    """Each student's document for ``spec``: the files kept under ``submitted/`` (the starter's where the
    grader used the starter's). Students whose folder holds no ``submitted/`` are left out."""
    documents = {}
    for student in students:
        kept = graded / student / SUBMITTED_DIR
        if not kept.is_dir():
            continue
        files = {}
        for name in spec.editable:
            text = _read(kept / spec.package / name)
            files[name] = text if text is not None else (_read(spec.directory / name) or "")
        documents[student] = lab_document(files)
    return documents


# ---------------------------------------------------------------- the class report's section

#: Folder of the report holding one side-by-side page per flagged pair.
PAIRS_DIR = "similarity"
#: Why the section is empty when no graded folder kept the editable files.
NO_FILES = (
    f"no graded folder holds the editable files (`{SUBMITTED_DIR}/`): the class was graded before the "
    "grader kept them. Grade it again (`python -m grader batch ...`) to compare submissions."
)


def pair_page_name(lab_id: str, pair: Pair) -> str:
    """The pair's page, relative to the report folder: readable (the names reduced to safe file-name
    characters, each at most 40 of them), bounded (far below the 255 bytes a file name may have) and one
    page per pair (a digest of the exact names: ``x y`` and ``x_y`` reduce alike but never share a page)."""
    safe = [re.sub(r"[^\w.-]", "_", name)[:40] for name in (lab_id, pair.first, pair.second)]
    digest = hashlib.sha256(json.dumps([lab_id, pair.first, pair.second]).encode("utf-8", "surrogatepass")).hexdigest()
    return f"{PAIRS_DIR}/{'--'.join(safe)}--{digest[:12]}.html"


def class_similarity(
    graded: Path,
    labs: dict[str, str],
    course: Course | None,
    out: Path,
    thresholds: Thresholds = Thresholds(),
    course_problem: str = "",
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Compare every lab of the class in ``graded`` and write a side-by-side page per flagged pair under ``out``.

    Args:
        labs: lab id -> its package, for the labs the class was graded on.
        course: the course whose starter files are boilerplate (None: it could not be loaded,
            ``course_problem`` says why).
        log: told which lab is being compared (a class of 200 takes about a minute per lab).

    Returns:
        The report's ``similarity`` entry: the thresholds, and per lab the flagged pairs (each with its
        page), the highest pair not flagged, who was compared and who handed in only the starter; or
        ``empty``, the reason nothing was compared.
    """
    from copydetect import __version__

    from grader.report.html import pair_page

    section: dict[str, Any] = {
        "detector": f"copydetect {__version__}",
        "thresholds": thresholds.to_dict(),
        "labs": {},
        "empty": "",
    }
    students = sorted(
        folder.name
        for folder in graded.iterdir()
        if folder.is_dir() and not folder.name.startswith(".") and (folder / SUBMITTED_DIR).is_dir()
    )
    if not students:
        section["empty"] = NO_FILES
        return section
    specs = {spec.package: spec for spec in course.labs} if course else {}
    for lab_id, package in labs.items():
        spec = specs.get(package)
        if spec is None:
            why = (
                course_problem
                or f"{package} is not a lab of the course at {course.root}: pass its course with --course"
            )
            section["labs"][lab_id] = {"skipped": why}
            continue
        log(f"similarity: comparing {lab_id} across {len(students)} students ...")
        documents = lab_documents(graded, students, spec)
        result = compare_lab(documents, starter_document(spec), thresholds)
        flagged = []
        for pair in result.flagged(thresholds):
            page = pair_page_name(lab_id, pair)
            (out / page).parent.mkdir(parents=True, exist_ok=True)
            (out / page).write_text(
                pair_page(
                    lab_id,
                    spec.title,
                    pair.to_dict(),
                    thresholds.to_dict(),
                    highlighted(documents[pair.first], pair.slices[0]),
                    highlighted(documents[pair.second], pair.slices[1]),
                ),
                encoding="utf-8",
            )
            flagged.append({**pair.to_dict(), "page": page})
        unflagged = next((pair for pair in result.pairs if not pair.flagged(thresholds)), None)
        section["labs"][lab_id] = {
            "title": spec.title,
            "compared": list(result.compared),
            "unchanged": list(result.unchanged),
            "common_count": result.common_count,
            "pairs": len(result.compared) * (len(result.compared) - 1) // 2,
            "flagged": flagged,
            "highest_unflagged": unflagged.to_dict() if unflagged else None,
        }
    return section
