"""``class.html``: the class report as one self-contained page (:func:`render_page`, pure but for the PNGs).

What an instructor looks for, in that order:

1. **Summary per lab**: maximum, mean, median, full marks, pending GPU points, held-out mean and the
   lab statuses, with a total row; a navigation bar links every section.
2. **Students**: one row per student (total, pending, each lab's score and, when it was not graded
   normally, its status); second on the page, and linked from the top.
3. **One section per lab**: the score histogram (matplotlib, embedded as a PNG), the pass rate of
   every test as an HTML bar table (full test names: a parametrised case keeps its ``[case]`` and
   wraps instead of being cut, so cases never look alike), talking-point readiness.
4. **Flagged submissions**.
5. **Similar submissions** (:mod:`grader.report.similarity`): flagged pairs per lab with the thresholds,
   each linked to its side-by-side page (:func:`pair_page`), or why nothing was compared.
6. **Gradebook** (:mod:`grader.report.gradebook`): where the LMS file went and every student it could
   not match, or how to get one.

Text lives in HTML, not in images: it wraps, can be searched and copied, and nothing is truncated.
Wide tables scroll inside their own box (``.scroll``) so the page itself never overflows; the
``report-check`` nox session renders the page in headless Chromium and checks exactly that.
"""

from __future__ import annotations

import base64
import html
import io
import re
import textwrap
from typing import Any

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1200px;
padding:0 1em;color:#222}
h1{margin-bottom:0.2em}h2{border-bottom:2px solid #4C72B0;margin-top:1.8em}h3{margin-bottom:0.3em}
nav{position:sticky;top:0;background:#fff;padding:0.5em 0;border-bottom:1px solid #ddd;z-index:1;
display:flex;flex-wrap:wrap;gap:0.2em 1em}
nav a{white-space:nowrap}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:0.4em 0 1.2em}
td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;vertical-align:top}
th{background:#f0f0f0;text-align:left}
.num{text-align:right;white-space:nowrap}
.bad{color:#b00;font-weight:600}
.total td{font-weight:600;background:#fafafa}
code{font-size:12px}.param{font-weight:700;color:#1f4e99}
.tag{font-size:11px;background:#eee;border-radius:3px;padding:0 4px;margin-left:4px;white-space:nowrap}
.track{display:inline-block;width:160px;height:10px;background:#eee;vertical-align:middle;margin-right:6px}
.fill{display:block;height:10px;background:#55A868}.fill.pending{background:#bbb}.rate{white-space:nowrap}
img{max-width:100%;height:auto}
figure{margin:0.5em 0}figcaption{font-size:13px;color:#555}
"""


#: The gradebook's lists of students it could not treat as usual (keys of its report entry), with their headings.
GRADEBOOK_LISTS = (
    ("not_in_roster", "Graded, not in the roster"),
    ("not_in_class", "In the roster, not graded"),
    ("left_blank", "Cells left empty (not 0)"),
    ("pending_gpu", "Scores without their pending GPU points"),
    ("not_in_moodle", "Left out of the Moodle file"),
)


class Html(str):
    """A table cell that is already HTML (not escaped again)."""


def _one_decimal(value: float) -> float:
    """Means and medians as people read them (``73.983`` -> ``74.0``); the JSON keeps the full value."""
    return round(float(value), 1)


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _table(headers: list[str], rows: list[list[Any]], *, row_classes: list[str] | None = None) -> str:
    """A table in a horizontally scrolling box; ints and floats right-aligned, strings escaped,
    :class:`Html` cells inserted as they are."""
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = []
    for index, row in enumerate(rows):
        cells = "".join(
            f"<td class='num'>{c}</td>"
            if isinstance(c, (int, float))
            else f"<td>{c}</td>"
            if isinstance(c, Html)
            else f"<td>{_esc(c)}</td>"
            for c in row
        )
        css = f" class='{row_classes[index]}'" if row_classes and row_classes[index] else ""
        body.append(f"<tr{css}>{cells}</tr>")
    return f"<div class='scroll'><table><tr>{head}</tr>{''.join(body)}</table></div>"


# ---------------------------------------------------------------- charts (matplotlib, embedded as PNG)


def histogram_png(lab_id: str, lab: dict[str, Any]) -> str:
    """The lab's score histogram as a base64 PNG, its full title wrapped (never cut)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    top = max(lab["max_score"], 1)
    figure, axes = plt.subplots(figsize=(7.0, 2.8))
    axes.hist(lab["scores"], bins=min(top + 1, 40), range=(0, top + 1), color="#4C72B0", rwidth=0.9)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlim(0, top + 1)
    axes.set_xlabel(f"score (of {lab['max_score']})")
    axes.set_ylabel("students")
    axes.set_title(textwrap.fill(f"{lab_id}: {lab['title']}: score per student", 70), fontsize=11)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


# ---------------------------------------------------------------- sections


def _lab_cell(row: dict[str, Any], lab_id: str) -> Html:
    score = f"{row.get(f'{lab_id}_score', 0)}/{row.get(f'{lab_id}_max', 0)}"
    status = row.get(f"{lab_id}_status", "")
    if status and status != "graded":
        return Html(f"{_esc(score)} <span class='bad'>{_esc(status)}</span>")
    return Html(_esc(score))


def summary_section(summary: dict[str, Any]) -> str:
    """Per-lab statistics, then the class total."""
    rows, classes = [], []
    for lab_id, lab in summary["labs"].items():
        statuses = ", ".join(f"{status} {count}" for status, count in sorted(lab["statuses"].items()))
        pending = (
            f"{lab['pending_points']} points for {lab['pending_students']} students"
            if lab["pending_students"]
            else "none"
        )
        heldout = (
            f"{_one_decimal(lab['heldout_mean'])} of {lab['heldout_max_score']}" if lab["heldout_max_score"] else "none"
        )
        rows.append(
            [
                Html(f"<a href='#{_esc(lab_id)}'>{_esc(lab_id)}</a>"),
                lab["title"],
                lab["max_score"],
                _one_decimal(lab["mean"]),
                _one_decimal(lab["median"]),
                f"{lab['full_marks']} / {lab['students']}",
                pending,
                heldout,
                _extension_cell(lab),
                statuses,
            ]
        )
        classes.append("")
    total = summary["total"]
    rows.append(
        [
            "total",
            "",
            total["max_score"],
            _one_decimal(total["mean"]),
            _one_decimal(total["median"]),
            f"{total['full_marks']} / {summary['students']}",
            "",
            "",
            "",
            "",
        ]
    )
    classes.append("total")
    headers = [
        "lab",
        "title",
        "max",
        "mean",
        "median",
        "full marks",
        "pending GPU",
        "held-out mean",
        EXTENSION_HEADER,
        "statuses",
    ]
    if not _has_heldout(summary):
        headers, rows = _without_column(headers, rows, "held-out mean")
    if not _has_extension(summary):
        headers, rows = _without_column(headers, rows, EXTENSION_HEADER)
    return (
        "<section id='summary'><h2>Summary per lab</h2>"
        "<p>Full marks: every CPU point earned (GPU points may still be pending)."
        + (
            " <em>Optional extension</em>: a step whose points are apart, in no maximum, mean or total."
            if _has_extension(summary)
            else ""
        )
        + "</p>"
        + _table(headers, rows, row_classes=classes)
        + "</section>"
    )


def students_section(summary: dict[str, Any]) -> str:
    """One row per student, each lab's score with its status when it was not graded normally."""
    lab_ids = summary["lab_ids"]
    headers = ["student", "total", "pending GPU", "held-out", *lab_ids, EXTENSION_HEADER, "flags"]
    rows = []
    for row in summary["rows"]:
        heldout = f"{row.get('heldout_score', 0)}/{row.get('heldout_max', 0)}" if row.get("heldout_max") else ""
        extension = f"{row.get('extension_score', 0)}/{row.get('extension_max', 0)}" if row.get("extension_max") else ""
        flags = row.get("flags", "")
        rows.append(
            [
                row["student"],
                f"{row['score']}/{row['max_score']}",
                row.get("pending", 0),
                heldout,
                *(_lab_cell(row, lab_id) for lab_id in lab_ids),
                extension,
                Html(f"<span class='bad' title='{_esc(flags)}'>{len(flags.split(' | '))}</span>") if flags else "",
            ]
        )
    if not _has_heldout(summary):
        headers, rows = _without_column(headers, rows, "held-out")
    if not _has_extension(summary):
        headers, rows = _without_column(headers, rows, EXTENSION_HEADER)
    return (
        f"<section id='students'><h2>Students ({len(rows)})</h2>"
        "<p>Each lab's score; a status in red means that lab was not graded normally (see the student's "
        "<code>feedback.md</code>).</p>" + _table(headers, rows) + "</section>"
    )


def _has_heldout(summary: dict[str, Any]) -> bool:
    return any(lab["heldout_max_score"] for lab in summary["labs"].values())


#: The column of an optional extension step's points (apart from every score and maximum).
EXTENSION_HEADER = "optional extension"


def _has_extension(summary: dict[str, Any]) -> bool:
    return any(lab.get("extension_max_score") for lab in summary["labs"].values())


def _extension_cell(lab: dict[str, Any]) -> str:
    """``mean 4.2 of 27 · 3 tried`` for a lab with an extension step, ``none`` without one."""
    if not lab.get("extension_max_score"):
        return "none"
    return (
        f"mean {_one_decimal(lab['extension_mean'])} of {lab['extension_max_score']} · "
        f"{lab['extension_students']} with points"
    )


def _without_column(headers: list[str], rows: list[list[Any]], header: str) -> tuple[list[str], list[list[Any]]]:
    index = headers.index(header)
    return headers[:index] + headers[index + 1 :], [row[:index] + row[index + 1 :] for row in rows]


def _breakable(text: str) -> str:
    """``text`` escaped, with a line-break opportunity (``<wbr>``) after each ``_``, ``-`` and ``.``:
    a long test name wraps at a word of its own on a narrow screen, never inside one."""
    return re.sub(r"([_.-])", r"\1<wbr>", _esc(text))


def _test_name(name: str, entry: dict[str, Any]) -> Html:
    """``test_x[case]`` in full, the case in bold; a held-out test is tagged."""
    function, bracket, case = name.partition("[")
    text = (
        f"<code>{_breakable(function)}"
        + (f"<wbr><span class='param'>[{_breakable(case)}</span>" if bracket else "")
        + "</code>"
    )
    if entry.get("visibility", "visible") != "visible":
        text += "<span class='tag'>held-out</span>"
    if entry.get("extension"):
        text += "<span class='tag'>extension (optional)</span>"
    if entry.get("pending"):
        text += "<span class='tag'>GPU</span>"
    return Html(text)


def _rate_bar(entry: dict[str, Any]) -> Html:
    """A bar of the pass rate; grey for a GPU test graded without a GPU (pending, not failed)."""
    if entry["pending"]:
        return Html(
            "<span class='rate'><span class='track'><span class='fill pending' style='width:100%'></span></span>"
            "needs a GPU</span>"
        )
    percent = 100 * entry["pass_rate"]
    return Html(
        f"<span class='rate'><span class='track'><span class='fill' style='width:{percent:.0f}%'></span></span>"
        f"{percent:.0f}%</span>"
    )


def lab_section(lab_id: str, lab: dict[str, Any], histogram: str) -> str:
    """The lab's statistics, histogram, pass rate per test and talking-point readiness."""
    statuses = ", ".join(f"{status} {count}" for status, count in sorted(lab["statuses"].items()))
    split = (
        f" · visible tests: mean {_one_decimal(lab['visible_mean'])} of {lab['max_score'] - lab['heldout_max_score']}"
        f" · held-out tests: mean {_one_decimal(lab['heldout_mean'])} of {lab['heldout_max_score']}"
        if lab["heldout_max_score"]
        else ""
    )
    if lab.get("extension_max_score"):
        split += (
            f" · optional extension (apart from the score): mean {_one_decimal(lab['extension_mean'])} of "
            f"{lab['extension_max_score']}, {lab['extension_students']} students with points"
        )
    tests = [
        [
            _test_name(name, entry),
            entry["points"],
            f"pending ({entry['pending']})" if entry["pending"] else f"{entry['passed']} / {entry['graded']}",
            _rate_bar(entry),
        ]
        for name, entry in lab["tests"].items()
    ]
    points = [
        [
            p["kind"].replace("_", " "),
            p["text"],
            Html(", ".join(f"<code>{_breakable(e)}</code>" for e in p["evidence"])),
            f"{100 * p['ready_rate']:.0f}%",
            p["pending"],
        ]
        for p in lab["talking_points"].values()
    ]
    return (
        f"<section id='{_esc(lab_id)}'><h2>{_esc(lab_id)}: {_esc(lab['title'])}</h2>"
        f"<p>max {lab['max_score']} · mean {_one_decimal(lab['mean'])} · "
        f"median {_one_decimal(lab['median'])} · full marks "
        f"{lab['full_marks']}/{lab['students']} · {_esc(statuses)}{split}</p>"
        f"<figure><img alt='{_esc(lab_id)} score histogram' src='data:image/png;base64,{histogram}'>"
        f"<figcaption>Score per student, {lab['students']} students.</figcaption></figure>"
        f"<h3>Pass rate per test ({len(tests)} tests)</h3>"
        + _table(["test", "points", "students passing", "pass rate"], tests)
        + "<h3>Talking-point readiness</h3>"
        + _table(["kind", "talking point", "evidence tests", "ready (evidence passed)", "pending GPU"], points)
        + "</section>"
    )


def _percent(value: float) -> str:
    return f"{100 * value:.0f}%"


def thresholds_text(thresholds: dict[str, Any]) -> str:
    """The similarity thresholds in words (the report and the pair pages state them)."""
    return (
        f"flagged when {_percent(thresholds['similarity'])} or more of the two students' code is found in the "
        f"other's and they share at least {thresholds['min_overlap']} characters of normalised code; "
        f"the starter code, and code found in at least {thresholds['common_students']} students' files "
        f"(or {_percent(thresholds['common_fraction'])} of the class), are set aside; matches shorter than "
        f"{thresholds['noise']} normalised characters are ignored"
    )


def _pair_cells(pair: dict[str, Any]) -> list[Any]:
    first, second = pair["students"]
    share_first, share_second = pair["shares"]
    return [
        f"{first} ~ {second}",
        _percent(pair["score"]),
        f"{_percent(share_first)} of {first}'s, {_percent(share_second)} of {second}'s",
        pair["overlap"],
    ]


def similarity_section(similarity: dict[str, Any]) -> str:
    """Flagged pairs per lab (with a link to each side-by-side page), the thresholds, or why it is empty."""
    parts = [
        "<section id='similarity'><h2>Similar submissions</h2>",
        f"<p>Detector: {_esc(similarity['detector'])} (MOSS-style winnowing: names, comments and the order "
        f"of functions do not matter). Pairs are {_esc(thresholds_text(similarity['thresholds']))}. A flag "
        "is a reason to read the two submissions side by side, not a verdict.</p>",
    ]
    if similarity["empty"]:
        parts.append(f"<p class='bad'>Nothing compared: {_esc(similarity['empty'])}</p>")
    headers = ["pair", "similarity", "code found in the other's", "shared (normalised characters)", "side by side"]
    for lab_id, lab in similarity["labs"].items():
        parts.append(f"<h3>{_esc(lab_id)}</h3>")
        if "skipped" in lab:
            parts.append(f"<p class='bad'>Not compared: {_esc(lab['skipped'])}</p>")
            continue
        compared = len(lab["compared"])
        parts.append(
            f"<p>{compared} students compared ({lab['pairs']} pairs); {len(lab['unchanged'])} handed in "
            f"nothing beyond the starter; code in at least {lab['common_count']} students' files counts "
            f"as common. <b>Pairs flagged: {len(lab['flagged'])}.</b></p>"
        )
        if lab["flagged"]:
            rows = [[*_pair_cells(pair), Html(f"<a href='{_esc(pair['page'])}'>open</a>")] for pair in lab["flagged"]]
            parts.append(_table(headers, rows))
        if lab["highest_unflagged"]:
            pair = lab["highest_unflagged"]
            first, second = pair["students"]
            parts.append(
                f"<p>Highest pair not flagged: {_esc(first)} ~ {_esc(second)}, {_percent(pair['score'])}, "
                f"{pair['overlap']} shared characters.</p>"
            )
    parts.append("</section>")
    return "".join(parts)


def pair_page(
    lab_id: str, title: str, pair: dict[str, Any], thresholds: dict[str, Any], first_html: str, second_html: str
) -> str:
    """One flagged pair's files side by side, the matched code highlighted (a self-contained page)."""
    first, second = pair["students"]
    cells = _pair_cells(pair)
    # Two columns that share the window whatever the lines' length: each file scrolls in its own box.
    style = STYLE + (
        "body{max-width:none}.pair{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1em}"
        ".pair pre{overflow:auto;max-height:80vh;border:1px solid #ccc;padding:6px;font-size:12px;margin:0}"
        "mark{background:#f6c28b}"
    )
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{_esc(lab_id)}: {_esc(first)} ~ {_esc(second)}</title><style>{style}</style></head><body>"
        f"<h1>{_esc(lab_id)}: {_esc(first)} ~ {_esc(second)}</h1>"
        f"<p>{_esc(title)} · similarity {cells[1]} ({_esc(cells[2])}) · {pair['overlap']} normalised characters "
        f"shared. Highlighted: the runs of code found in both students' files (a run may reach into the starter "
        f"code around it; starter and common code alone never count). Pairs are "
        f"{_esc(thresholds_text(thresholds))}.</p>"
        f"<div class='pair'><div><h3>{_esc(first)}</h3><pre>{first_html}</pre></div>"
        f"<div><h3>{_esc(second)}</h3><pre>{second_html}</pre></div></div></body></html>"
    )


def gradebook_section(gradebook: dict[str, Any]) -> str:
    """Where the LMS gradebook went, and every student it could not match (or how to get one)."""
    parts = ["<section id='gradebook'><h2>Gradebook</h2>"]
    if not gradebook.get("written"):
        parts.append(f"<p>{_esc(gradebook['hint'])}</p></section>")
        return "".join(parts)
    parts.append(
        f"<p><code>{_esc(gradebook['written'])}</code>: {gradebook['rows']} students, columns "
        f"{_esc(', '.join(gradebook['columns']))}. {_esc(gradebook['formats'])}</p>"
    )
    for key, heading in GRADEBOOK_LISTS:
        if gradebook[key]:
            parts.append(
                f"<h3>{_esc(heading)} ({len(gradebook[key])})</h3>"
                + _table(["student", "why"], [[entry["student"], entry["why"]] for entry in gradebook[key]])
            )
    parts.append("</section>")
    return "".join(parts)


def render_page(summary: dict[str, Any], histograms: dict[str, str]) -> str:
    """The whole page (see the module docstring) from :func:`grader.report.summary.class_summary`'s dict."""
    total = summary["total"]
    links = [
        ("summary", "Summary"),
        ("students", f"Students ({summary['students']})"),
        *((lab_id, lab_id) for lab_id in summary["labs"]),
    ]
    if summary["flagged"]:
        links.append(("flagged", f"Flagged ({len(summary['flagged'])})"))
    if "similarity" in summary:
        pairs = sum(len(lab.get("flagged", ())) for lab in summary["similarity"]["labs"].values())
        links.append(("similarity", f"Similar submissions ({pairs})"))
    if "gradebook" in summary:
        links.append(("gradebook", "Gradebook"))
    nav = "<nav>" + "".join(f"<a href='#{_esc(anchor)}'>{_esc(text)}</a>" for anchor, text in links) + "</nav>"
    parts = [
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>Class report</title>"
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Class report</h1><p>{summary['students']} students · mean total {_one_decimal(total['mean'])} of "
        f"{total['max_score']} · median {_one_decimal(total['median'])}</p>",
        nav,
        summary_section(summary),
        students_section(summary),
    ]
    parts += [lab_section(lab_id, lab, histograms[lab_id]) for lab_id, lab in summary["labs"].items()]
    if summary["flagged"]:
        parts.append(
            "<section id='flagged'><h2>Flagged submissions</h2>"
            + _table(["student", "flags"], [[f["student"], " | ".join(f["flags"])] for f in summary["flagged"]])
            + "</section>"
        )
    if "similarity" in summary:
        parts.append(similarity_section(summary["similarity"]))
    if "gradebook" in summary:
        parts.append(gradebook_section(summary["gradebook"]))
    parts.append("</body></html>")
    return "\n".join(parts)
