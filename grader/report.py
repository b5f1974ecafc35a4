"""The ``report`` verb: the instructor's view of a graded class.

Reads ``GRADED_DIR/<student>/summary.json`` (what ``batch`` wrote) and writes into ``--out``:

- ``class.csv``: one row per student: total (and its visible / held-out split), then per lab score, max,
  pending points, held-out score and max, status, flags;
- ``class.json``: the same rows plus per-lab statistics, per-test pass rates, talking-point readiness;
- ``class.html``: one self-contained page (matplotlib PNGs embedded as base64): a score histogram and
  a per-test pass-rate chart per lab, talking-point readiness across the class, flagged submissions.

A student folder without a readable ``summary.json`` still gets a row (status ``missing``).
:func:`class_summary` is pure; reading files and drawing charts happen at the edges.
"""

from __future__ import annotations

import argparse
import base64
import csv
import html
import io
import json
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from grader.artifacts import SUMMARY_FILE
from grader.results import EVIDENCE_PASSED, EVIDENCE_PENDING, PASSED, SubmissionResult

CSV_FILE, JSON_FILE, HTML_FILE = "class.csv", "class.json", "class.html"
MISSING = "missing"


def load_results(graded: Path) -> tuple[list[SubmissionResult], list[str]]:
    """Every student's result under ``graded``, and the ids whose summary is missing or unreadable."""
    if not graded.is_dir():
        raise FileNotFoundError(f"{graded} is not a graded folder (run `python -m grader batch` first)")
    results, missing = [], []
    for folder in sorted(path for path in graded.iterdir() if path.is_dir()):
        summary = folder / SUMMARY_FILE
        try:
            results.append(SubmissionResult.from_dict(json.loads(summary.read_text(encoding="utf-8"))))
        except FileNotFoundError:
            if any(folder.iterdir()):
                missing.append(folder.name)
        except (ValueError, KeyError, TypeError):
            missing.append(folder.name)
    return results, missing


def student_row(result: SubmissionResult, lab_ids: list[str]) -> dict[str, Any]:
    """One CSV row: totals, then ``<lab>_score``, ``_max``, ``_pending``, ``_status`` for each lab."""
    total = result.total
    row: dict[str, Any] = {"student": result.submission, "score": total["score"], "max_score": total["max_score"],
                           "pending": total["pending"], "visible_score": total["visible"]["score"],
                           "heldout_score": total["heldout"]["score"], "heldout_max": total["heldout"]["max_score"]}
    labs = {lab.lab: lab for lab in result.labs}
    for lab_id in lab_ids:
        lab = labs.get(lab_id)
        row.update({f"{lab_id}_score": lab.score if lab else 0, f"{lab_id}_max": lab.max_score if lab else 0,
                    f"{lab_id}_pending": lab.pending if lab else 0,
                    f"{lab_id}_heldout_score": lab.heldout.score if lab else 0,
                    f"{lab_id}_heldout_max": lab.heldout.max_score if lab else 0,
                    f"{lab_id}_status": lab.status if lab else MISSING})
    row["flags"] = " | ".join(result.flags)
    return row


def _lab_statistics(results: list[SubmissionResult], lab_id: str) -> dict[str, Any]:
    labs = [lab for result in results for lab in result.labs if lab.lab == lab_id]
    scores = [lab.score for lab in labs]
    tests: dict[str, dict[str, Any]] = {}
    points: dict[str, dict[str, Any]] = {}
    for lab in labs:
        for test in lab.tests:
            entry = tests.setdefault(test.nodeid.split("::", 1)[-1], {"points": test.max_points, "passed": 0, "pending": 0,
                                                                      "graded": 0, "visibility": test.visibility})
            entry["graded"] += 1
            entry["passed"] += test.outcome == PASSED
            entry["pending"] += test.outcome == "pending"
        for point in lab.talking_points:
            entry = points.setdefault(point.id, {"kind": point.kind, "text": point.text, "evidence": list(point.evidence),
                                                 "ready": 0, "pending": 0, "students": 0})
            entry["students"] += 1
            entry["ready"] += point.status == EVIDENCE_PASSED
            entry["pending"] += point.status == EVIDENCE_PENDING
    for entry in tests.values():
        entry["pass_rate"] = round(entry["passed"] / entry["graded"], 4) if entry["graded"] else 0.0
    for entry in points.values():
        entry["ready_rate"] = round(entry["ready"] / entry["students"], 4) if entry["students"] else 0.0
    return {
        "title": labs[0].title if labs else lab_id,
        "max_score": max((lab.max_score for lab in labs), default=0),
        "students": len(labs),
        "mean": round(statistics.fmean(scores), 3) if scores else 0.0,
        "heldout_max_score": max((lab.heldout.max_score for lab in labs), default=0),
        "heldout_mean": round(statistics.fmean(lab.heldout.score for lab in labs), 3) if labs else 0.0,
        "visible_mean": round(statistics.fmean(lab.visible.score for lab in labs), 3) if labs else 0.0,
        "median": statistics.median(scores) if scores else 0,
        "min": min(scores, default=0),
        "max": max(scores, default=0),
        # every CPU point earned (GPU points may still be pending)
        "full_marks": sum(1 for lab in labs if lab.max_score and lab.score + lab.pending == lab.max_score),
        "statuses": dict(Counter(lab.status for lab in labs)),
        "scores": scores,
        "tests": tests,
        "talking_points": points,
    }


def class_summary(results: list[SubmissionResult], missing: list[str] = ()) -> dict[str, Any]:
    """Everything the report shows, as one JSON-ready dict (pure)."""
    lab_ids = list(dict.fromkeys(lab.lab for result in results for lab in result.labs))
    rows = [student_row(result, lab_ids) for result in results]
    for student in missing:
        rows.append({"student": student, "score": 0, "max_score": 0, "pending": 0,
                     **{key: (MISSING if key.endswith("_status") else 0) for lab in lab_ids
                        for key in (f"{lab}_score", f"{lab}_max", f"{lab}_pending", f"{lab}_status")},
                     "flags": "no readable summary.json: grade this submission again"})
    rows.sort(key=lambda row: row["student"])
    totals = [row["score"] for row in rows]
    return {
        "students": len(rows),
        "lab_ids": lab_ids,
        "total": {"mean": round(statistics.fmean(totals), 3) if totals else 0.0,
                  "max_score": max((row["max_score"] for row in rows), default=0)},
        "labs": {lab_id: _lab_statistics(results, lab_id) for lab_id in lab_ids},
        "flagged": [{"student": r.submission, "flags": list(r.flags)} for r in results if r.flags],
        "rows": rows,
    }


def write_csv(summary: dict[str, Any], path: Path) -> None:
    rows = summary["rows"]
    fields = list(rows[0]) if rows else ["student"]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


# ---------------------------------------------------------------- charts (matplotlib, embedded as PNG)

def _png(figure) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def lab_charts(lab: dict[str, Any]) -> tuple[str, str]:
    """(score histogram, per-test pass-rate chart) of one lab, as base64 PNGs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    top = max(lab["max_score"], 1)
    figure, axes = plt.subplots(figsize=(5.5, 2.8))
    axes.hist(lab["scores"], bins=range(0, top + 2), align="left", color="#4C72B0", rwidth=0.85)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel(f"score (of {lab['max_score']})")
    axes.set_ylabel("students")
    axes.set_title(f"{lab['title']}: scores")
    histogram = _png(figure)

    names = list(lab["tests"])
    rates = [100 * lab["tests"][name]["pass_rate"] for name in names]
    # A GPU test graded without a GPU is pending, not failed: grey, so nobody reads it as 0% passing.
    pending = [lab["tests"][name]["pending"] > 0 for name in names]
    figure, axes = plt.subplots(figsize=(6.5, 0.8 + 0.28 * max(len(names), 1)))
    axes.barh(range(len(names)), [100.0 if p else r for p, r in zip(pending, rates)],
              color=["#CCCCCC" if p else "#55A868" for p in pending])
    for row, is_pending in enumerate(pending):
        if is_pending:
            axes.text(2, row, "pending (needs a GPU)", va="center", fontsize=7)
    # Held-out tests are the instructor's to see here: marked, so nobody mistakes them for test_lab.py's.
    labels = [("[held-out] " if lab["tests"][name].get("visibility", "visible") != "visible" else "") + name
              for name in names]
    axes.set_yticks(range(len(names)), [label if len(label) < 48 else label[:45] + "..." for label in labels], fontsize=7)
    axes.invert_yaxis()
    axes.set_xlim(0, 100)
    axes.set_xlabel("% of students passing")
    axes.set_title(f"{lab['title']}: pass rate per test")
    return histogram, _png(figure)


# ---------------------------------------------------------------- HTML

STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}
th{background:#f0f0f0}.num{text-align:right}.bad{color:#b00}h2{border-bottom:2px solid #4C72B0}
.bar{background:#55A868;height:10px;display:inline-block}"""


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td class='num'>{c}</td>" if isinstance(c, (int, float)) else f"<td>{html.escape(str(c))}</td>"
                         for c in row) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def to_html(summary: dict[str, Any], charts: dict[str, tuple[str, str]]) -> str:
    """The self-contained class page."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>Class report</title><style>{STYLE}</style></head><body>",
             f"<h1>Class report</h1><p>{summary['students']} students · mean total {summary['total']['mean']} "
             f"of {summary['total']['max_score']}</p>"]
    for lab_id, lab in summary["labs"].items():
        histogram, pass_rates = charts[lab_id]
        statuses = ", ".join(f"{status}: {count}" for status, count in sorted(lab["statuses"].items()))
        split = (f"<p>visible tests: mean {lab['visible_mean']} of {lab['max_score'] - lab['heldout_max_score']}"
                 f" · held-out tests: mean {lab['heldout_mean']} of {lab['heldout_max_score']}</p>"
                 if lab["heldout_max_score"] else "")
        parts.append(f"<h2>{html.escape(lab_id)}: {html.escape(lab['title'])}</h2>"
                     f"<p>max {lab['max_score']} · mean {lab['mean']} · median {lab['median']} · "
                     f"full marks {lab['full_marks']}/{lab['students']} · {html.escape(statuses)}</p>{split}"
                     f"<img alt='score histogram' src='data:image/png;base64,{histogram}'>"
                     f"<img alt='pass rate per test' src='data:image/png;base64,{pass_rates}'>")
        points = [[p["kind"].replace("_", " "), p["text"], ", ".join(p["evidence"]),
                   f"{100 * p['ready_rate']:.0f}%", p["pending"]] for p in lab["talking_points"].values()]
        parts.append("<h3>Talking-point readiness</h3>" + _table(
            ["kind", "talking point", "evidence tests", "ready (evidence passed)", "pending GPU"], points))
    if summary["flagged"]:
        parts.append("<h2>Flagged submissions</h2>" + _table(
            ["student", "flags"], [[f["student"], " | ".join(f["flags"])] for f in summary["flagged"]]))
    columns = ["student", "score", "max_score", "pending", "heldout_score", "heldout_max"] + [
        f"{lab}_{k}" for lab in summary["lab_ids"] for k in ("score", "heldout_score", "status")]
    parts.append("<h2>Students</h2>" + _table(columns, [[row.get(c, "") for c in columns] for row in summary["rows"]]))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(graded: Path, out: Path) -> dict[str, Any]:
    """Read ``graded``, write ``class.csv``, ``class.json`` and ``class.html`` into ``out``."""
    results, missing = load_results(graded)
    summary = class_summary(results, missing)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(summary, out / CSV_FILE)
    (out / JSON_FILE).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    charts = {lab_id: lab_charts(lab) for lab_id, lab in summary["labs"].items()}
    (out / HTML_FILE).write_text(to_html(summary, charts), encoding="utf-8")
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("graded_dir", type=Path, help="a folder written by `grader batch`")
    parser.add_argument("--out", type=Path, required=True, help="folder for class.csv, class.json, class.html")


def main(args: argparse.Namespace) -> int:
    try:
        summary = write_report(args.graded_dir, args.out)
    except FileNotFoundError as error:
        print(f"grader report: {error}", file=sys.stderr)
        return 2
    print(f"class report: {summary['students']} students, mean total {summary['total']['mean']} of "
          f"{summary['total']['max_score']}")
    for lab_id, lab in summary["labs"].items():
        print(f"  {lab_id}: mean {lab['mean']}/{lab['max_score']}, full marks {lab['full_marks']}, {lab['statuses']}")
    print(f"  flagged submissions: {len(summary['flagged'])}")
    print(f"wrote {args.out}/{CSV_FILE}, {JSON_FILE}, {HTML_FILE}")
    return 0
