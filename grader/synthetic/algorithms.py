"""The similarity lab, ``labS``: one editable module of nine small functions, and the ways to write it.

The starter of each function is a signature, a docstring and ``raise NotImplementedError``. For each
function :data:`VARIANTS` holds four honest implementations of the same contract: the first is the
reference, the others are the ways students write it (another algorithm, another loop, another library
call). Two honest students therefore share a function's code exactly when they happened to pick the same
variant (one time in four), as students writing the same short function independently often do.

Besides that material, the source transforms a synthetic student applies, each drawing from the random
stream it is given: :func:`rewrite_lines` (the same algorithm in one's own hand), :func:`rename_locals`
(one's own variable names) and :func:`near_copy`, what a copier does to a classmate's file (every local
variable renamed, the functions reordered, comments added; the code otherwise the same). Who solves
what is decided in :mod:`grader.synthetic.classes` (:func:`~grader.synthetic.classes.honest_module`).
"""

from __future__ import annotations

import io
import random
import re
import tokenize

PACKAGE, MODULE = "labS_algorithms", "algorithms.py"

HEADER = (
    '"""Lab S: small algorithms on lists, text and graphs. Fill in each function."""\n\n'
    "from __future__ import annotations\n"
)

#: function -> (signature, docstring) as the starter has them.
CONTRACTS = {
    "moving_average": (
        "def moving_average(values: list[float], window: int) -> list[float]:",
        "The mean of every run of ``window`` consecutive values, in order.",
    ),
    "histogram": (
        "def histogram(values: list[float], bins: int, low: float, high: float) -> list[int]:",
        "Counts of values in ``bins`` equal bins over [low, high] "
        "(high goes in the last bin; others outside are dropped).",
    ),
    "word_counts": (
        "def word_counts(text: str) -> dict[str, int]:",
        "How often each word occurs, words lower-cased and made of letters only.",
    ),
    "run_lengths": (
        "def run_lengths(text: str) -> list[tuple[str, int]]:",
        "Each run of one repeated character as (character, length), in order.",
    ),
    "merge_intervals": (
        "def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:",
        "Overlapping or touching (start, end) intervals merged, sorted by start.",
    ),
    "topological_order": (
        "def topological_order(nodes: list[str], edges: list[tuple[str, str]]) -> list[str]:",
        "Every node after the nodes it depends on (edge (a, b): b after a); ties in the order of ``nodes``.",
    ),
    "search_sorted": (
        "def search_sorted(items: list[int], target: int) -> int:",
        "The index of the first item >= target in sorted ``items`` (len(items) if none).",
    ),
    "transpose": (
        "def transpose(rows: list[list[float]]) -> list[list[float]]:",
        "The columns of a rectangular table as rows.",
    ),
    "flatten": (
        "def flatten(nested: list) -> list:",
        "Every non-list item of arbitrarily nested lists, left to right.",
    ),
}

#: function -> four honest implementations: (imports, body). The first is the reference.
VARIANTS: dict[str, list[tuple[str, str]]] = {
    "moving_average": [
        (
            "",
            """
    result = []
    for start in range(len(values) - window + 1):
        result.append(sum(values[start:start + window]) / window)
    return result
""",
        ),
        (
            "",
            """
    if window > len(values):
        return []
    total = sum(values[:window])
    means = [total / window]
    for index in range(window, len(values)):
        total += values[index] - values[index - window]
        means.append(total / window)
    return means
""",
        ),
        (
            "",
            """
    return [sum(values[i:i + window]) / window for i in range(0, len(values) - window + 1)]
""",
        ),
        (
            "from itertools import accumulate",
            """
    prefix = [0.0, *accumulate(values)]
    out = []
    for end in range(window, len(prefix)):
        out.append((prefix[end] - prefix[end - window]) / window)
    return out
""",
        ),
    ],
    "histogram": [
        (
            "",
            """
    counts = [0] * bins
    width = (high - low) / bins
    for value in values:
        if low <= value <= high:
            index = min(int((value - low) / width), bins - 1)
            counts[index] += 1
    return counts
""",
        ),
        (
            "import bisect",
            """
    step = (high - low) / bins
    edges = [low + step * k for k in range(1, bins)]
    result = [0 for _ in range(bins)]
    for v in values:
        if v < low or v > high:
            continue
        result[bisect.bisect_right(edges, v)] += 1
    return result
""",
        ),
        (
            "from collections import Counter",
            """
    size = (high - low) / bins
    found = Counter(min(bins - 1, int((x - low) // size)) for x in values if low <= x <= high)
    return [found.get(b, 0) for b in range(bins)]
""",
        ),
        (
            "",
            """
    hist = []
    for b in range(bins):
        left = low + (high - low) * b / bins
        right = low + (high - low) * (b + 1) / bins
        last = b == bins - 1
        hist.append(len([x for x in values if left <= x < right or (last and x == high)]))
    return hist
""",
        ),
    ],
    "word_counts": [
        (
            "import re\nfrom collections import Counter",
            """
    return dict(Counter(re.findall(r"[a-z]+", text.lower())))
""",
        ),
        (
            "",
            """
    counts = {}
    word = ""
    for char in text.lower() + " ":
        if char.isalpha() and char.isascii():
            word += char
        elif word:
            counts[word] = counts.get(word, 0) + 1
            word = ""
    return counts
""",
        ),
        (
            "import re",
            """
    cleaned = re.sub(r"[^a-z]+", " ", text.lower())
    result: dict[str, int] = {}
    for token in cleaned.split():
        if token in result:
            result[token] += 1
        else:
            result[token] = 1
    return result
""",
        ),
        (
            "import re\nfrom collections import defaultdict",
            """
    table = defaultdict(int)
    for match in re.finditer("[a-z]+", text.lower()):
        table[match.group(0)] += 1
    return dict(table)
""",
        ),
    ],
    "run_lengths": [
        (
            "from itertools import groupby",
            """
    return [(char, len(list(group))) for char, group in groupby(text)]
""",
        ),
        (
            "",
            """
    runs = []
    for char in text:
        if runs and runs[-1][0] == char:
            runs[-1] = (char, runs[-1][1] + 1)
        else:
            runs.append((char, 1))
    return runs
""",
        ),
        (
            "",
            """
    out = []
    i = 0
    while i < len(text):
        j = i
        while j < len(text) and text[j] == text[i]:
            j += 1
        out.append((text[i], j - i))
        i = j
    return out
""",
        ),
        (
            "import re",
            """
    return [(m.group(0)[0], len(m.group(0))) for m in re.finditer(r"(.)\\1*", text, re.DOTALL)]
""",
        ),
    ],
    "merge_intervals": [
        (
            "",
            """
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
""",
        ),
        (
            "",
            """
    if not intervals:
        return []
    ordered = sorted(intervals, key=lambda pair: pair[0])
    result = [ordered[0]]
    for current in ordered[1:]:
        last = result.pop()
        if current[0] > last[1]:
            result.extend([last, current])
        else:
            result.append((last[0], max(last[1], current[1])))
    return result
""",
        ),
        (
            "",
            """
    items = sorted(intervals)
    out = []
    i = 0
    while i < len(items):
        lo, hi = items[i]
        i += 1
        while i < len(items) and items[i][0] <= hi:
            hi = max(hi, items[i][1])
            i += 1
        out.append((lo, hi))
    return out
""",
        ),
        (
            "from functools import reduce",
            """
    def absorb(acc, interval):
        if acc and interval[0] <= acc[-1][1]:
            return acc[:-1] + [(acc[-1][0], max(acc[-1][1], interval[1]))]
        return acc + [interval]

    return reduce(absorb, sorted(intervals), [])
""",
        ),
    ],
    "topological_order": [
        (
            "",
            """
    indegree = {node: 0 for node in nodes}
    for _, target in edges:
        indegree[target] += 1
    order = []
    ready = [node for node in nodes if indegree[node] == 0]
    while ready:
        node = ready.pop(0)
        order.append(node)
        for source, target in edges:
            if source == node:
                indegree[target] -= 1
                if indegree[target] == 0:
                    ready.append(target)
                    ready.sort(key=nodes.index)
    return order
""",
        ),
        (
            "",
            """
    remaining = list(nodes)
    deps = {n: {a for a, b in edges if b == n} for n in nodes}
    done: list[str] = []
    while remaining:
        pick = next(n for n in remaining if deps[n] <= set(done))
        done.append(pick)
        remaining.remove(pick)
    return done
""",
        ),
        (
            "import heapq",
            """
    position = {name: k for k, name in enumerate(nodes)}
    parents = {name: 0 for name in nodes}
    children = {name: [] for name in nodes}
    for a, b in edges:
        parents[b] += 1
        children[a].append(b)
    heap = [position[name] for name in nodes if parents[name] == 0]
    heapq.heapify(heap)
    result = []
    while heap:
        name = nodes[heapq.heappop(heap)]
        result.append(name)
        for child in children[name]:
            parents[child] -= 1
            if parents[child] == 0:
                heapq.heappush(heap, position[child])
    return result
""",
        ),
        (
            "",
            """
    pending = {node: sum(1 for e in edges if e[1] == node) for node in nodes}
    output = []
    while len(output) < len(nodes):
        for node in nodes:
            if pending[node] == 0 and node not in output:
                output.append(node)
                for e in edges:
                    if e[0] == node:
                        pending[e[1]] -= 1
                break
    return output
""",
        ),
    ],
    "search_sorted": [
        (
            "",
            """
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo
""",
        ),
        (
            "import bisect",
            """
    return bisect.bisect_left(items, target)
""",
        ),
        (
            "",
            """
    def go(left, right):
        if left >= right:
            return left
        middle = left + (right - left) // 2
        return go(middle + 1, right) if items[middle] < target else go(left, middle)

    return go(0, len(items))
""",
        ),
        (
            "",
            """
    for index, item in enumerate(items):
        if item >= target:
            return index
    return len(items)
""",
        ),
    ],
    "transpose": [
        (
            "",
            """
    return [list(column) for column in zip(*rows)]
""",
        ),
        (
            "",
            """
    if not rows:
        return []
    return [[rows[r][c] for r in range(len(rows))] for c in range(len(rows[0]))]
""",
        ),
        (
            "",
            """
    columns = []
    for c in range(len(rows[0]) if rows else 0):
        column = []
        for row in rows:
            column.append(row[c])
        columns.append(column)
    return columns
""",
        ),
        (
            "",
            """
    table = {}
    for row in rows:
        for k, cell in enumerate(row):
            table.setdefault(k, []).append(cell)
    return [table[k] for k in sorted(table)]
""",
        ),
    ],
    "flatten": [
        (
            "",
            """
    flat = []
    for item in nested:
        if isinstance(item, list):
            flat.extend(flatten(item))
        else:
            flat.append(item)
    return flat
""",
        ),
        (
            "",
            """
    stack = [iter(nested)]
    out = []
    while stack:
        for element in stack[-1]:
            if isinstance(element, list):
                stack.append(iter(element))
                break
            out.append(element)
        else:
            stack.pop()
    return out
""",
        ),
        (
            "",
            """
    def walk(items):
        for item in items:
            if isinstance(item, list):
                yield from walk(item)
            else:
                yield item

    return list(walk(nested))
""",
        ),
        (
            "",
            """
    result = list(nested)
    while any(isinstance(x, list) for x in result):
        expanded = []
        for x in result:
            expanded.extend(x if isinstance(x, list) else [x])
        result = expanded
    return result
""",
        ),
    ],
}

#: Local names an honest student or a copier may name otherwise (never a parameter of the contract).
LOCAL_NAMES = (
    "result",
    "means",
    "total",
    "index",
    "counts",
    "width",
    "step",
    "size",
    "found",
    "hist",
    "left",
    "right",
    "last",
    "word",
    "char",
    "cleaned",
    "token",
    "table",
    "match",
    "runs",
    "group",
    "out",
    "merged",
    "ordered",
    "current",
    "lo",
    "hi",
    "indegree",
    "order",
    "ready",
    "node",
    "remaining",
    "deps",
    "done",
    "pick",
    "position",
    "parents",
    "children",
    "heap",
    "name",
    "child",
    "pending",
    "output",
    "mid",
    "middle",
    "columns",
    "column",
    "flat",
    "stack",
    "element",
    "expanded",
    "prefix",
    "start",
    "end",
    "value",
    "item",
    "source",
    "target_node",
)
RENAMES = (
    "acc",
    "tmp",
    "buf",
    "res",
    "cur",
    "nxt",
    "val",
    "elem",
    "pos",
    "cnt",
    "seen",
    "todo",
    "keep",
    "data",
    "part",
    "piece",
    "entry",
    "slot",
    "bucket",
    "first",
    "second",
    "head",
    "tail",
    "probe",
)


#: Rewrites an honest student may apply to any line (each match, with probability one half): the same
#: algorithm written in their own hand. (pattern, replacement) on one line of code.
REWRITES = (
    (r"^(\s+)(\w+) \+= (.+)$", r"\1\2 = \2 + \3"),
    (r"^(\s+)(\w+)\.append\((.+)\)$", r"\1\2 += [\3]"),
    (r"^(\s+)(\w+) = \[\]$", r"\1\2 = list()"),
    (r"^(\s+)(\w+) = \{\}$", r"\1\2: dict = {}"),
    (r"^(\s+)if not (\w+):$", r"\1if len(\2) == 0:"),
    (r"^(\s+)return (.+)$", r"\1answer = \2\n\1return answer"),
    (r"(\w+)\[-1\]", r"\1[len(\1) - 1]"),
    (r"(?<![<>=] )(?<![\w.\])])(\w+) < (\w+)(?![\w(\[.]| [<>])", r"\2 > \1"),  # not in a chain
    (r"\brange\(0, ", "range("),
    (r"\bwhile (.+):$", r"while (\1):"),
    (r"\bif (.+) == 0:$", r"if not \1:"),
)


def rewrite_lines(source: str, rng: random.Random) -> str:
    """``source`` with each of :data:`REWRITES` applied to each line it matches, with probability one half."""
    lines = []
    for line in source.splitlines():
        for pattern, replacement in REWRITES:
            if "answer" not in line and rng.random() < 0.5:
                line = re.sub(pattern, replacement, line, count=1)
        lines.append(line)
    return "\n".join(lines) + "\n"


def stub(function: str) -> str:
    """``function`` as the starter has it: signature, docstring, ``raise NotImplementedError``."""
    signature, doc = CONTRACTS[function]
    return f'{signature}\n    """{doc}"""\n    raise NotImplementedError("TODO: {function}")\n'


def solved(function: str, variant: int) -> str:
    """``function`` implemented as :data:`VARIANTS` ``[function][variant]`` (its imports left out)."""
    signature, doc = CONTRACTS[function]
    return f'{signature}\n    """{doc}"""' + VARIANTS[function][variant][1].rstrip() + "\n"


def module(functions: list[str], bodies: dict[str, str], imports: set[str]) -> str:
    """The lab's module: :data:`HEADER`, the lines of ``imports`` sorted, then ``bodies`` in ``functions``' order."""
    lines = sorted(line for block in imports for line in block.splitlines() if line)
    head = HEADER + ("\n" + "\n".join(lines) + "\n" if lines else "")
    return head + "".join("\n\n" + bodies[function] for function in functions)


def starter() -> str:
    """The module as students receive it: every function a stub."""
    return module(list(CONTRACTS), {function: stub(function) for function in CONTRACTS}, set())


def reference() -> str:
    """The module with every function in its first (the reference's) variant, as written, in order."""
    return module(
        list(CONTRACTS),
        {function: solved(function, 0) for function in CONTRACTS},
        {VARIANTS[function][0][0] for function in CONTRACTS},
    )


def rename_locals(source: str, rng: random.Random, share: float = 1.0) -> str:
    """``source`` with each of :data:`LOCAL_NAMES` it uses renamed (with probability ``share``) to an unused name."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    used = {tok.string for tok in tokens if tok.type == tokenize.NAME}
    fresh = [name for name in RENAMES if name not in used]
    rng.shuffle(fresh)
    mapping = {}
    for name in LOCAL_NAMES:
        if name in used and fresh and rng.random() < share:
            mapping[name] = fresh.pop()
    renamed = [
        tok._replace(string=mapping.get(tok.string, tok.string))
        if tok.type == tokenize.NAME and not (k and tokens[k - 1].string == ".")
        else tok  # not an attribute
        for k, tok in enumerate(tokens)
    ]
    return tokenize.untokenize(renamed)


def near_copy(source: str, rng: random.Random) -> str:
    """What a copier hands in: ``source`` with every local variable renamed, the functions reordered, comments added."""
    renamed = rename_locals(source, rng)
    header, *functions = re.split(r"\n\n\n(?=def )", renamed)
    rng.shuffle(functions)
    commented = [
        re.sub(r"\n(    \w+ = )", r"\n    # keep track of this\n\1", function, count=1) for function in functions
    ]
    return header + "".join("\n\n\n" + function for function in commented)
