"""The class report, looked at in a real browser: ``python -m grader.report.browser_check`` (``nox -s report-check``).

A class report that renders but cannot be read (a table wider than the screen, a chart shrunk until
its labels are a blur, the student table buried at the bottom) fails no unit test. So this renders
``class.html`` in headless Chromium at several window widths and asks the browser, with a small
script run after the page has loaded (:data:`LAYOUT_PROBE`):

- does the page scroll sideways, does any element stick out of the window, is any text clipped?
- does any table cell hold text wider than the cell, or break a word between two of its letters?
- did every chart load, and is any shown at less than :data:`MIN_IMAGE_SCALE` of its size?
- are the sections in order (summary, students, labs), and does the student table start within the
  first two screens of a desktop window?

Wide tables may scroll inside their own box (``.scroll``) on a phone, never on a desktop.
Screenshots of each width are written next to the findings (``layout.json``) for a person to look at.

With no report given, a demo class is made first: the real course's rubric (every test name, as
long as they come) and random outcomes for ``--students`` students, written as ``grader run``
would (:func:`grader.synthetic.classes.write_outcomes`), a few of them with grader errors and flags.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: Window sizes the report is checked at (name -> width, height). 500 px is the narrowest window
#: headless Chromium opens (a narrower --window-size still lays out at 500).
VIEWPORTS = {"desktop": (1280, 900), "laptop": (1024, 768), "narrow": (500, 900)}
#: Viewports on which a table may scroll inside its box (narrow screens only).
SCROLL_ALLOWED = ("narrow",)
#: A chart shown below this fraction of its pixel width is too small to read (desktop and laptop).
MIN_IMAGE_SCALE = 0.75
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
RESULT_ID = "layout-check-result"

#: Runs in the page after load; writes its findings as JSON into <pre id="layout-check-result">.
LAYOUT_PROBE = r"""<script>
addEventListener("load", () => setTimeout(() => {
  const doc = document.documentElement, width = doc.clientWidth, problems = [], notes = [];
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
      (el.className && typeof el.className === "string" ? "." + el.className.split(" ")[0] : "") +
      ' "' + (el.textContent || el.alt || "").trim().slice(0, 60) + '"';
  if (doc.scrollWidth > width + 1)
    problems.push(`the page scrolls sideways: ${doc.scrollWidth}px in a ${width}px window`);
  const outside = new Set();
  for (const el of document.body.querySelectorAll("*")) {
    if (el.closest(".scroll") && !el.classList.contains("scroll")) continue;
    const box = el.getBoundingClientRect();
    if (box.width && box.right > width + 1) {
      outside.add(el);  // only the outermost element that sticks out is reported
      if (!outside.has(el.parentElement))
        problems.push(`sticks out of the window (${Math.round(box.right)}px > ${width}px): ${name(el)}`);
    }
    const style = getComputedStyle(el);
    if (["hidden", "clip"].includes(style.overflowX) && el.scrollWidth > el.clientWidth + 1)
      problems.push(`text clipped: ${name(el)}`);
  }
  // A line break between two letters of a word (a squeezed column breaks words letter by letter):
  // walk each cell's text character by character and compare the line each one lands on.
  const range = document.createRange();
  for (const cell of document.querySelectorAll("td, th")) {
    if (cell.scrollWidth > cell.clientWidth + 1) { problems.push(`wider than its cell: ${name(cell)}`); continue; }
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let broken = false;
    for (let node = walker.nextNode(); node && !broken; node = walker.nextNode()) {
      const text = node.textContent;
      let lastTop = null;
      for (let i = 0; i < text.length && !broken; i++) {
        range.setStart(node, i); range.setEnd(node, i + 1);
        const rect = range.getClientRects()[0];
        if (!rect) continue;
        broken = lastTop !== null && rect.top > lastTop + 2 && /\w/.test(text[i - 1]) && /\w/.test(text[i]);
        lastTop = rect.top;
      }
    }
    if (broken) problems.push(`a word is broken across lines: ${name(cell)}`);
  }
  const scrolling = [...document.querySelectorAll(".scroll")].filter((box) => box.scrollWidth > box.clientWidth + 1);
  const images = [...document.images].map((img) => ({alt: img.alt, loaded: img.complete && img.naturalWidth > 0,
      scale: img.naturalWidth ? img.getBoundingClientRect().width / img.naturalWidth : 0}));
  const top = (selector) => { const el = document.querySelector(selector);
      return el ? el.getBoundingClientRect().top + scrollY : null; };
  const labs = [...document.querySelectorAll("section[id]")].map((s) => s.id).filter((id) =>
      !["summary", "students", "flagged"].includes(id));
  const smallest = Math.min(...[...document.querySelectorAll("td, th, p, code, a")].map((el) =>
      parseFloat(getComputedStyle(el).fontSize)));
  const result = {width, height: doc.scrollHeight, problems, scrolling_tables: scrolling.map(name), images,
      sections: {summary: top("#summary"), students: top("#students"),
        first_lab: labs.length ? top("#" + labs[0]) : null},
      smallest_font_px: smallest, notes};
  const out = document.createElement("pre"); out.id = "RESULT_ID"; out.hidden = true;
  out.textContent = JSON.stringify(result); document.body.appendChild(out);
}, 100));
</script>""".replace("RESULT_ID", RESULT_ID)


class BrowserError(RuntimeError):
    """No Chromium, or Chromium did not render the page."""


def find_chromium() -> str:
    """The Chromium (or Chrome) executable: ``$CHROMIUM``, else the first of :data:`CHROMIUM_NAMES` on PATH.

    Raises:
        BrowserError: none found (the message says how to install it).
    """
    for candidate in (os.environ.get("CHROMIUM"), *CHROMIUM_NAMES):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    raise BrowserError(
        "no Chromium on this machine: install it (Debian/Ubuntu: apt-get install -y chromium) "
        "or point $CHROMIUM at a Chrome/Chromium executable"
    )


def _chromium(browser: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="report-check-profile-") as profile:
        command = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-extensions",
            f"--user-data-dir={profile}",
            *args,
        ]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def measure_layout(browser: str, page: Path, width: int, height: int) -> dict[str, Any]:
    """Load ``page`` (with :data:`LAYOUT_PROBE` added) in a ``width`` x ``height`` window;
    return the probe's findings."""
    with tempfile.TemporaryDirectory(prefix="report-check-") as scratch:
        probed = Path(scratch) / page.name
        probed.write_text(
            page.read_text(encoding="utf-8").replace("</body>", LAYOUT_PROBE + "</body>"), encoding="utf-8"
        )
        done = _chromium(
            browser, f"--window-size={width},{height}", "--virtual-time-budget=10000", "--dump-dom", probed.as_uri()
        )
    found = re.search(rf'<pre id="{RESULT_ID}"[^>]*>(.*?)</pre>', done.stdout, re.DOTALL)
    if not found:
        raise BrowserError(
            f"Chromium did not run the layout probe (exit {done.returncode}): {done.stderr.strip()[-800:]}"
        )
    return json.loads(html.unescape(found.group(1)))


def screenshot(browser: str, page: Path, out: Path, width: int, height: int) -> Path:
    """A PNG of the whole page (``height``: the page's height, as :func:`measure_layout` found it)."""
    done = _chromium(
        browser,
        f"--window-size={width},{min(height, 16000)}",
        f"--screenshot={out}",
        "--virtual-time-budget=10000",
        page.resolve().as_uri(),
    )
    if not out.is_file():
        raise BrowserError(f"Chromium wrote no screenshot (exit {done.returncode}): {done.stderr.strip()[-800:]}")
    return out


def layout_problems(viewport: str, found: dict[str, Any]) -> list[str]:
    """Judge one viewport's findings (pure): every problem, in words, prefixed with the viewport."""
    problems = list(found["problems"])
    if viewport not in SCROLL_ALLOWED:
        problems += [f"a table needs sideways scrolling: {table}" for table in found["scrolling_tables"]]
        problems += [
            f"chart shown at {image['scale']:.0%} of its size: {image['alt']}"
            for image in found["images"]
            if image["loaded"] and image["scale"] < MIN_IMAGE_SCALE
        ]
    problems += [f"chart did not load: {image['alt']}" for image in found["images"] if not image["loaded"]]
    sections = found["sections"]
    order = [sections["summary"], sections["students"], sections["first_lab"]]
    if None in order or order != sorted(order):
        problems.append(f"sections out of order (summary, students, first lab at {order})")
    elif viewport == "desktop" and sections["students"] > 2 * VIEWPORTS["desktop"][1]:
        problems.append(f"the student table starts {sections['students']:.0f}px down: more than two screens")
    if found["smallest_font_px"] < 11:
        problems.append(f"text as small as {found['smallest_font_px']}px")
    return [f"{viewport}: {problem}" for problem in problems]


def check_report(page: Path, out: Path, browser: str | None = None, log=print) -> list[str]:
    """Render ``page`` at every :data:`VIEWPORTS` size; write screenshots and ``layout.json`` into ``out``.

    Returns:
        Every layout problem found (empty when the report reads well everywhere).
    """
    browser = browser or find_chromium()
    out.mkdir(parents=True, exist_ok=True)
    findings, problems = {}, []
    for viewport, (width, height) in VIEWPORTS.items():
        found = measure_layout(browser, page, width, height)
        findings[viewport] = found
        problems += layout_problems(viewport, found)
        shot = screenshot(browser, page, out / f"class-{viewport}.png", width, found["height"])
        log(
            f"  {viewport} {width}x{found['height']}: {len(found['problems'])} layout problem(s), "
            f"{len(found['scrolling_tables'])} table(s) scrolling in their box -> {shot}"
        )
    (out / "layout.json").write_text(
        json.dumps({"findings": findings, "problems": problems}, indent=1) + "\n", encoding="utf-8"
    )
    return problems


def make_demo_report(out: Path, students: int, seed: int = 0) -> Path:
    """A class of ``students`` on the real course's rubric with random outcomes; return its ``class.html``."""
    from grader.course.labs import load_course
    from grader.execute.collect import build_rubric
    from grader.report.summary import HTML_FILE, write_report
    from grader.scoring.feedback import write_outputs
    from grader.scoring.score import grader_error_result, rescore
    from grader.synthetic.classes import Student, roll, write_class, write_outcomes

    course = load_course()
    rubric = build_rubric(course, course.select(None))

    def write_student(folder: Path, student: Student) -> None:
        if student.set_aside is not None:  # a grader failure: every lab grader-error, flagged
            folder.mkdir(parents=True)
            failure = RuntimeError("container would not start")
            write_outputs(grader_error_result(rubric, failure, submission=folder.name), folder)
            return
        write_outcomes(folder, rubric, student)
        write_outputs(rescore(folder), folder)

    graded = out / "graded"
    shutil.rmtree(graded, ignore_errors=True)
    write_class(graded, roll(students, seed, (0.1, 1.0), set_aside=15), write_student)
    write_report(graded, out / "report")
    return out / "report" / HTML_FILE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.report.browser_check", description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, nargs="?", help="a class.html (default: make a demo class first)")
    parser.add_argument("--out", type=Path, default=Path("results/report-check"), help="screenshots and layout.json")
    parser.add_argument("--students", type=int, default=60, help="size of the demo class (default 60)")
    args = parser.parse_args(argv)
    try:
        browser = find_chromium()
    except BrowserError as error:
        print(f"report-check: {error}", file=sys.stderr)
        return 2
    page = args.report or make_demo_report(args.out, args.students)
    print(f"checking {page} in {browser}")
    problems = check_report(page, args.out, browser)
    print(f"wrote {args.out}/layout.json and the screenshots class-*.png: look at them")
    if problems:
        print("LAYOUT PROBLEMS:\n  " + "\n  ".join(problems))
        return 1
    print("ok: nothing overflows, no text is clipped, every chart loads at a readable size, sections in order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
