"""Run lab 1's zoo on every core: one pytest process per shard, one PyTorch thread each.

    python -m solutions.lab01_fx_passes.tests.run_zoo [--shards N] [--out DIR] [-- PYTEST ARGS]

The zoo's cells are small (one 32x32 image), where a second thread buys little and a second process
on the other core doubles the throughput. Each shard is ``pytest -m zoo --zoo-shard=I/N`` with
``OMP_NUM_THREADS=1``; their rows are merged into one table (printed, and written as
``DIR/lab01_zoo.json`` and the handout's ``DIR/lab01_zoo.md``). Exits non-zero when a shard failed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from labkit.labspec import COURSE_ROOT

from .conftest import table_lines
from .zoo import DIALECTS, MODELS, input_size

FOLDER = Path(__file__).resolve().parent


def markdown(rows: list[dict]) -> str:
    """The handout's table: one line per model, one column per dialect."""
    cells = {(row["model"], row["dialect"]): row for row in rows}
    lines = ["| model | input | " + " | ".join(f"`{d}`" for d in DIALECTS) + " |",
             "|---|---|" + "---|" * len(DIALECTS)]  # fmt: skip
    for model in MODELS:
        entries = []
        for dialect in DIALECTS:
            row = cells.get((model, dialect))
            if row is None:
                entries.append("not run")
            elif "excluded" in row:
                entries.append(f"excluded: {row['excluded']}")
            elif not row["ok"]:
                entries.append(f"**FAILED**: {row.get('failure')}")
            else:
                entries.append(f"{row['batch_norms'] - row['left']}/{row['batch_norms']} BN folded"
                               if row["batch_norms"] else "ok (no BN)")  # fmt: skip
        lines.append(f"| {model} | {input_size(model)} | " + " | ".join(entries) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=os.cpu_count() or 1, help="processes (default: one per core)")
    parser.add_argument("--out", type=Path, default=COURSE_ROOT / "results" / "lab01", help="where the tables go")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    shards = []
    for index in range(args.shards):
        results, log = args.out / f"zoo-shard-{index}.json", args.out / f"zoo-shard-{index}.log"
        command = [sys.executable, "-m", "pytest", str(FOLDER), "-m", "zoo", "-q", "-p", "no:cacheprovider",
                   f"--zoo-shard={index}/{args.shards}", f"--zoo-results={results}", *args.pytest_args]  # fmt: skip
        handle = log.open("w", encoding="utf-8")
        shards.append((subprocess.Popen(command, cwd=COURSE_ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT),
                       handle, results, log))  # fmt: skip
        print(f"shard {index}/{args.shards}: {' '.join(command[2:])} (log: {log})", flush=True)
    codes = []
    for process, handle, _, _ in shards:
        codes.append(process.wait())
        handle.close()
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime  # one thread per shard: no time spent spinning
    rows = [row for _, _, results, _ in shards if results.is_file() for row in json.loads(results.read_text())]
    order = {(model, dialect): i for i, (model, dialect) in enumerate((m, d) for m in MODELS for d in DIALECTS)}
    rows.sort(key=lambda row: order.get((row["model"], row["dialect"]), len(order)))
    for line in table_lines(rows):
        print(line)
    ok = sum(row.get("ok", False) for row in rows)
    excluded = sum("excluded" in row for row in rows)
    failed = len(rows) - ok - excluded
    cell_seconds = sum(row.get("seconds", 0) for row in rows)
    print(f"lab01 zoo: {ok} cells ok, {failed} failed, {excluded} excluded; {wall:.0f} s wall on {args.shards} "
          f"shards ({cell_seconds:.0f} s in the cells); the shards' CPU time {cpu:.0f} s (on {args.shards} idle "
          f"cores: about {cpu / args.shards:.0f} s)")  # fmt: skip
    summary = {"wall_s": wall, "cpu_s": cpu, "shards": args.shards, "rows": rows}
    (args.out / "lab01_zoo.json").write_text(json.dumps(summary, indent=1))
    (args.out / "lab01_zoo.md").write_text(markdown(rows))
    for code, (_, _, _, log) in zip(codes, shards):
        if code not in (0, 5):  # 5: this shard had no test (a -k filter)
            print(f"a shard failed (exit {code}): see {log}", file=sys.stderr)
    return max((code for code in codes if code != 5), default=0)


if __name__ == "__main__":
    sys.exit(main())
