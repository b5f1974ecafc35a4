"""Pictures of FX graphs: PyTorch's ``FxGraphDrawer``, nodes marked by what happened to them.

The labs' central lessons are visual: the same model gives different graphs in different dialects,
a pass changes some nodes and leaves the rest, a backend's partition decides where each node runs.
Both labs draw them with the same three steps:

1. :func:`draw_graph`: ``torch.fx.passes.graph_drawer.FxGraphDrawer`` (through ``pydot``) lays out
   the nodes and edges and labels each node as PyTorch does (name, op, target, arguments, shape);
   a :class:`NodeStyle` per node then gives it a fill colour and a note (``added by fuse_conv_bn``,
   ``CPU: not in the NPU's ISA``); :class:`Cluster` boxes group nodes (an NPU partition), and a
   legend says what each colour means. Nodes without a style are white, so colour always means
   something;
2. :func:`write_drawing`: the DOT source always (it is text: a test or a person can read it), then
   SVG and PNG through Graphviz's ``dot`` program when it is installed. Without Graphviz the
   command says how to install it (:data:`GRAPHVIZ_MISSING`) and the text is still written;
3. :func:`drawn_node_names` / :func:`svg_node_names`: which nodes a drawing names (tests read the
   DOT or the SVG text back).

Pictures stay readable at screen size by construction:

- **parameters and buffers are collapsed** (:func:`weight_nodes`): most of a Dynamo or aten graph's
  width is one placeholder or ``get_attr`` per weight, each with an edge into its convolution. They
  are left out and the node that reads them says ``+ 4 parameters/buffers`` (with what the passes did
  to them); ``collapse_weights=False`` draws them all;
- **large graphs are split** (:func:`split_parts`): past :data:`MAX_PART_NODES` nodes, the graph is cut
  into parts in graph order, at the boundary of a top-level module (a block, a stage) where the
  nodes' ``nn_module_stack`` says one, each part its own picture (``STEM-part2.png``) whose inputs
  from earlier parts are small grey stubs; ``STEM.md`` is the index. The whole graph is still
  written as ``STEM.dot`` and ``STEM.svg`` (zoomable);
- **PNGs are capped** at :data:`PNG_MAX_WIDTH` pixels (Graphviz scales a wider drawing down);
- **the legend shows only colours that are drawn**: an entry whose fill no node has is drawn white,
  saying so, so the legend never promises a colour the picture does not show (:func:`legend_fills`,
  :func:`drawn_fills` read them back).
"""

from __future__ import annotations

import re
import shutil
import textwrap
import warnings
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pydot
from torch import fx
from torch.fx.passes.graph_drawer import FxGraphDrawer

#: What :func:`write_drawing` renders when Graphviz is installed.
FORMATS = ("svg", "png")
#: Fill colours that stay readable under black text, in the order drawings hand them out.
PALETTE = ("#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc", "#f4a6c6", "#fdd49e", "#c7e9c0", "#d9d9d9", "#9edae5", "#e7cb94")
#: What the commands print (and still write the DOT text) when Graphviz's ``dot`` is not on PATH.
GRAPHVIZ_MISSING = (
    "Graphviz (its `dot` program) is not installed, so only the DOT text of each drawing was written. "
    "Install it (Debian/Ubuntu: `sudo apt-get install -y graphviz`; Fedora: `sudo dnf install graphviz`; "
    "macOS: `brew install graphviz`; conda: `conda install graphviz`; Windows: the installer from "
    "https://graphviz.org/download/) and run the command again for SVG and PNG, or render a DOT file "
    "yourself: `dot -Tsvg FILE.dot -o FILE.svg`."
)
#: Label fields of ``FxGraphDrawer`` that a compact drawing keeps (``key=value`` fields).
COMPACT_FIELDS = ("name", "op_code", "target", "args", "kwargs", "shape")
#: How wide a note's lines may get, in characters, before they wrap.
NOTE_WIDTH = 44
#: Widest PNG written, in pixels (a laptop screen's width: text stays readable at 100%).
PNG_MAX_WIDTH = 1600
#: Graphviz's resolution for PNGs (its default): :data:`PNG_MAX_WIDTH` becomes ``size`` in inches.
PNG_DPI = 96
#: Most nodes in one picture before the graph is split into parts.
MAX_PART_NODES = 45
_WEIGHT_NAME = re.compile(r"(^|_)(parameters|buffers)(_|$)")
_LEGEND_PREFIX = "__legend_"
_STUB_PREFIX = "__from_"
_FIELD_SEPARATOR = re.compile(r"(?<!\\)\|")
_FIELD_KEY = re.compile(r"^(\w+)=")


@dataclass(frozen=True)
class NodeStyle:
    """How to draw one node.

    Attributes:
        fill: the fill colour (a Graphviz colour name or ``#rrggbb``).
        note: a line (wrapped if long) added at the bottom of the node's label; empty for none.
        border: the outline's colour.
        dashed: a dashed outline (e.g. a node that is gone in the next picture).
        bold: a thick outline.
    """

    fill: str = "white"
    note: str = ""
    border: str = "black"
    dashed: bool = False
    bold: bool = False


@dataclass(frozen=True)
class Cluster:
    """A labelled box around some nodes (by name), e.g. one NPU partition."""

    label: str
    nodes: tuple[str, ...]
    color: str = "black"


@dataclass(frozen=True)
class Drawing:
    """What :func:`write_drawing` wrote: the DOT text, the images, and why any are missing.

    ``parts``: a large graph's pictures part by part (:func:`write_graph`), each a drawing of its own;
    ``index``: the Markdown page that lists them.
    """

    source: Path
    images: tuple[Path, ...]
    missing: str | None = None
    parts: tuple["Drawing", ...] = ()
    index: Path | None = None

    @property
    def files(self) -> tuple[Path, ...]:
        """Every file written, the parts' included."""
        own = (self.source, *self.images, *((self.index,) if self.index else ()))
        return own + tuple(path for part in self.parts for path in part.files)

    def describe(self) -> str:
        """One line naming the files (and what is missing), for a command's output."""
        written = ", ".join(str(path) for path in (self.source, *self.images, *((self.index,) if self.index else ())))
        parts = f" and {len(self.parts)} parts ({self.parts[0].source.stem} ...)" if self.parts else ""
        return f"wrote {written}{parts}" + (f" ({self.missing})" if self.missing else "")


def record_text(text: str) -> str:
    """``text`` made safe inside a Graphviz record label (braces, bars and angle brackets escaped)."""
    text = text.replace("\\", "/").replace('"', "'")
    return re.sub(r"([{}|<>])", r"\\\1", text)


def _note_field(note: str) -> str:
    lines = [line for paragraph in note.splitlines() for line in textwrap.wrap(paragraph, NOTE_WIDTH) or [""]]
    return r"\n".join(record_text(line) for line in lines) + r"\n"


def compact_label(label: str) -> str:
    """An ``FxGraphDrawer`` record label with only the :data:`COMPACT_FIELDS` (and a module's class name).

    A ``call_module`` node's constants (stride, padding, ...), ``num_users``, strides and dtypes
    make a node several times taller and the graph hard to take in at a glance.
    """
    if not (label.startswith("{") and label.endswith("}")):
        return label
    fields = _FIELD_SEPARATOR.split(label[1:-1])
    kept = [field for field in fields if (key := _FIELD_KEY.match(field)) and key.group(1) in COMPACT_FIELDS]
    return "{" + "|".join(kept or fields) + "}"


def _style_attributes(style: NodeStyle) -> dict[str, str]:
    outline = ["filled", "rounded"] + (["dashed"] if style.dashed else []) + (["bold"] if style.bold else [])
    return {
        "fillcolor": f'"{style.fill}"',
        "color": f'"{style.border}"',
        "style": f'"{",".join(outline)}"',
        "penwidth": "2.5" if style.bold else "1",
    }


def _legend(entries: Sequence[tuple[str, NodeStyle]]) -> pydot.Cluster:
    legend = pydot.Cluster("legend", label="legend", color="grey", fontsize="12")
    for index, (text, style) in enumerate(entries):
        legend.add_node(
            pydot.Node(
                f"{_LEGEND_PREFIX}{index}",
                label=f'"{record_text(text)}"',
                shape="box",
                fontsize="11",
                **_style_attributes(style),
            )
        )
        if index:  # invisible edges stack the entries in a column instead of one wide row
            legend.add_edge(pydot.Edge(f"{_LEGEND_PREFIX}{index - 1}", f"{_LEGEND_PREFIX}{index}", style="invis"))
    return legend


def weight_nodes(graph_module: fx.GraphModule, weights: Iterable[str] = ()) -> set[str]:
    """The nodes that only bring a parameter, a buffer or a constant into the graph (collapsed in pictures).

    ``get_attr`` nodes (``symbolic_trace``, ``make_fx``, ``torch.export``, frozen Dynamo graphs);
    placeholders Dynamo names after a module attribute (``l_self_modules_fc_parameters_weight_``);
    placeholders nothing reads (a weight that freezing replaced by a constant); and the placeholders
    named in ``weights``: an aten graph's ``arg3_1`` does not say what it is, but the caller, who
    holds the example inputs, knows which are parameters and buffers.
    """
    named = set(weights)
    return {
        node.name
        for node in graph_module.graph.nodes
        if node.op == "get_attr"
        or (node.op == "placeholder" and (node.name in named or _WEIGHT_NAME.search(node.name) or not node.users))
    }


def _collapse_weights(
    dot: pydot.Dot, graph_module: fx.GraphModule, hidden: set[str], styles: Mapping[str, NodeStyle]
) -> dict[str, str]:
    """Remove ``hidden`` nodes and their edges; return, per reader, the note that counts what it reads."""
    counts: dict[str, list[str]] = {}
    for node in graph_module.graph.nodes:
        if node.name in hidden:
            for user in node.users:
                if user.name not in hidden:
                    counts.setdefault(user.name, []).append(styles[node.name].note if node.name in styles else "")
    for edge in list(dot.get_edges()):
        source, destination = _unquote(edge.get_source()), _unquote(edge.get_destination())
        if source in hidden or destination in hidden:
            dot.del_edge(edge.get_source(), edge.get_destination())
    for name in hidden:
        dot.del_node(name) or dot.del_node(f'"{name}"')
    notes = {}
    for reader, marks in counts.items():
        what = [f"{mark} x{marks.count(mark)}" for mark in dict.fromkeys(m for m in marks if m)]
        notes[reader] = f"+ {len(marks)} parameters/buffers" + (f" ({'; '.join(what)})" if what else "")
    return notes


def legend_fills(dot_source: str) -> set[str]:
    """The fill colours of a drawing's legend entries (white ones left out)."""
    return {
        _fill(node)
        for graph in _all_graphs(dot_source)
        for node in graph.get_nodes()
        if node.get_name().strip('"').startswith(_LEGEND_PREFIX)
    } - {"white", "#ffffff"}


def drawn_fills(dot_source: str) -> set[str]:
    """The fill colours of a drawing's graph nodes (legend and white left out)."""
    return {
        _fill(node)
        for graph in _all_graphs(dot_source)
        for node in graph.get_nodes()
        if not node.get_name().strip('"').startswith(_LEGEND_PREFIX) and node.get("fillcolor")
    } - {"white", "#ffffff"}


def _fill(node: pydot.Node) -> str:
    return _unquote(node.get("fillcolor") or "white").lower()


def _all_graphs(dot_source: str) -> list[pydot.Dot]:
    graphs, stack = [], parse_dot(dot_source)
    while stack:
        graph = stack.pop()
        graphs.append(graph)
        stack.extend(graph.get_subgraphs())
    return graphs


def draw_graph(
    graph_module: fx.GraphModule,
    title: str,
    *,
    styles: Mapping[str, NodeStyle] | None = None,
    clusters: Iterable[Cluster] = (),
    legend: Sequence[tuple[str, NodeStyle]] = (),
    unmarked: NodeStyle = NodeStyle(),
    compact: bool = True,
    collapse_weights: bool = True,
    weights: Iterable[str] = (),
) -> pydot.Dot:
    """Draw ``graph_module``'s graph (not its submodules) with ``FxGraphDrawer`` and mark its nodes.

    Args:
        title: printed above the graph.
        styles: node name -> how to draw it; nodes without one get ``unmarked`` (white).
        clusters: boxes around groups of nodes (a node in none stays at the top level).
        legend: ``(text, style)`` entries, drawn as a box of sample nodes.
        compact: keep only the name, op, target, arguments and shape in each label
            (:func:`compact_label`); False keeps everything ``FxGraphDrawer`` writes.
        collapse_weights: leave out the parameter and buffer nodes (:func:`weight_nodes`), counted
            in the node that reads them.
        weights: placeholders known to be parameters or buffers (see :func:`weight_nodes`).

    Raises:
        KeyError: a style or a cluster names a node the graph does not have.
    """
    styles = dict(styles or {})
    clusters = list(clusters)
    names = {node.name for node in graph_module.graph.nodes}
    unknown = sorted((set(styles) | {name for cluster in clusters for name in cluster.nodes}) - names)
    if unknown:
        raise KeyError(f"no such node in the graph: {', '.join(unknown)}")
    drawer = FxGraphDrawer(graph_module, "graph", ignore_parameters_and_buffers=True)
    dot = drawer.get_main_dot_graph()
    dot.set("label", f'"{record_text(title)}"')
    dot.set("labelloc", "t")
    dot.set("fontsize", "18")
    hidden = weight_nodes(graph_module, weights) if collapse_weights else set()
    counted = _collapse_weights(dot, graph_module, hidden, styles) if hidden else {}
    if hidden:
        dot.set("label", f'"{record_text(title)} ({len(hidden)} parameter/buffer nodes collapsed)"')
    drawn: set[str] = set()
    for name in names - hidden:
        (node,) = dot.get_node(name) or dot.get_node(f'"{name}"')
        style = styles.get(name, unmarked)
        label = node.get("label")
        if compact:
            label = compact_label(label)
        note = "\n".join(part for part in (style.note, counted.get(name, "")) if part)
        if note:
            label = label[:-1] + "|" + _note_field(note) + "}"
        node.set("label", label)
        for key, value in _style_attributes(style).items():
            node.set(key, value)
        drawn.add(style.fill.lower())
    for index, cluster in enumerate(clusters):
        box = pydot.Cluster(
            f"group_{index}",
            label=f'"{record_text(cluster.label)}"',
            color=f'"{cluster.color}"',
            penwidth="2",
            fontsize="13",
        )
        for name in cluster.nodes:
            if name in hidden:
                continue
            (node,) = dot.get_node(name) or dot.get_node(f'"{name}"')
            dot.del_node(node.get_name())
            box.add_node(node)
        dot.add_subgraph(box)
    if legend:
        shown = [
            (text, style)
            if style.fill.lower() in drawn | {"white"}
            else (f"{text} (no such node in this graph)", NodeStyle(border="grey", dashed=style.dashed))
            for text, style in legend
        ]
        dot.add_subgraph(_legend(shown))
    return dot


def graphviz_available() -> bool:
    """Whether Graphviz's ``dot`` program is on PATH (it renders SVG and PNG)."""
    return shutil.which("dot") is not None


def write_drawing(dot: pydot.Dot, stem: Path, formats: Sequence[str] = FORMATS) -> Drawing:
    """Write ``stem.dot`` (always), then ``stem.svg``, ``stem.png`` ... when Graphviz is installed.

    A format Graphviz fails to render is left out and named in :attr:`Drawing.missing`; the
    command goes on (the DOT text says everything the images show).
    """
    stem.parent.mkdir(parents=True, exist_ok=True)
    source = stem.parent / f"{stem.name}.dot"
    source.write_text(dot.to_string(), encoding="utf-8")
    if not graphviz_available():
        return Drawing(source, (), "Graphviz is not installed: no SVG or PNG")
    images, failed = [], []
    for fmt in formats:
        path = stem.parent / f"{stem.name}.{fmt}"
        # A PNG is for the screen: Graphviz scales a drawing wider than PNG_MAX_WIDTH down to it.
        # The SVG keeps its natural size (it zooms without losing the text).
        dot.set("size", f'"{PNG_MAX_WIDTH / PNG_DPI:.2f},10000"' if fmt == "png" else '"10000,10000"')
        dot.set("dpi", str(PNG_DPI))
        try:
            path.write_bytes(dot.create(prog="dot", format=fmt))
        except Exception as error:  # noqa: BLE001 - one format failing must not lose the others
            failed.append(f"{fmt}: {' '.join(str(error).split())[:200]}")
            continue
        images.append(path)
    return Drawing(source, tuple(images), "; ".join(f"Graphviz failed on {f}" for f in failed) or None)


def _block(node: fx.Node) -> str | None:
    """The block a node belongs to (``layer1.0``, ``blocks.1``): its module path's first two parts."""
    stack = node.meta.get("nn_module_stack")
    path = list(stack.values())[-1][0] if stack else node.target if node.op == "call_module" else None
    if not isinstance(path, str):
        return None
    path = re.sub(r"\[['\"]?(\w+)['\"]?\]", r".\1", path).removeprefix("L.self.").removeprefix("self.")
    return ".".join(path.split(".")[:2]) or None


def split_parts(
    graph_module: fx.GraphModule, hidden: set[str] = frozenset(), max_nodes: int = MAX_PART_NODES
) -> list[list[str]]:
    """The graph's drawn nodes in graph order, cut into parts of at most ``max_nodes``.

    Consecutive nodes of one block (:func:`_block`: a ResNet's ``layer1.0``) stay together where the
    block fits in a part; a part takes whole blocks while they fit. A graph that fits is one part.
    """
    order = [node for node in graph_module.graph.nodes if node.name not in hidden]
    if len(order) <= max_nodes:
        return [[node.name for node in order]]
    groups: list[list[str]] = []
    previous = object()
    for node in order:
        block = _block(node)
        if block is None or block != previous or len(groups[-1]) >= max_nodes:
            groups.append([])
        groups[-1].append(node.name)
        previous = block if block is not None else previous
    parts: list[list[str]] = [[]]
    for group in groups:
        if parts[-1] and len(parts[-1]) + len(group) > max_nodes:
            parts.append([])
        parts[-1].extend(group)
    return parts


def _keep_only(dot: pydot.Dot, keep: set[str], part_of: Mapping[str, int]) -> None:
    """Prune a whole-graph drawing to the nodes ``keep``; an input from another part becomes a grey stub."""
    graphs, stack = [], [dot]
    while stack:
        graph = stack.pop()
        graphs.append(graph)
        stack.extend(graph.get_subgraphs())
    for edge in list(dot.get_edges()):
        source, destination = _unquote(edge.get_source()), _unquote(edge.get_destination())
        if destination in keep and source not in keep:
            stub = f"{_STUB_PREFIX}{source}"
            if not dot.get_node(f'"{stub}"'):
                dot.add_node(
                    pydot.Node(
                        f'"{stub}"',
                        label=f'"{record_text(source)} (part {part_of[source] + 1})"',
                        shape="box",
                        style='"dashed,rounded"',
                        color="grey",
                        fontcolor="grey30",
                        fontsize="10",
                    )
                )
            dot.add_edge(pydot.Edge(f'"{stub}"', edge.get_destination(), color="grey", style="dashed"))
        if source not in keep or destination not in keep:
            dot.del_edge(edge.get_source(), edge.get_destination())
    for graph in graphs:
        for node in list(graph.get_nodes()):
            name = _unquote(node.get_name())
            if name in ("node", "edge", "graph") or name.startswith((_LEGEND_PREFIX, _STUB_PREFIX)):
                continue
            if name not in keep:
                graph.del_node(node.get_name())
    for graph in graphs:  # a partition box with none of its nodes here is left out
        subgraphs = graph.obj_dict.get("subgraphs", {})
        for name in [
            n
            for n, boxes in subgraphs.items()
            if n != "cluster_legend" and not any(_box_has_nodes(box) for box in boxes)
        ]:
            subgraphs.pop(name)
    fills = drawn_fills(dot.to_string())
    for graph in graphs:
        for node in graph.get_nodes():
            if node.get_name().strip('"').startswith(_LEGEND_PREFIX) and _fill(node) not in fills | {"white"}:
                node.set("fillcolor", '"white"')
                node.set("color", "grey")
                node.set("label", node.get("label")[:-1] + ' (not in this part)"')


def _box_has_nodes(box: dict) -> bool:
    return bool([n for n in box.get("nodes", {}) if n not in ("node", "edge", "graph")]) or any(
        _box_has_nodes(inner) for boxes in box.get("subgraphs", {}).values() for inner in boxes
    )


def write_graph(
    graph_module: fx.GraphModule, title: str, stem: Path, *, max_part_nodes: int = MAX_PART_NODES, **options
) -> Drawing:
    """Draw ``graph_module`` (:func:`draw_graph`'s ``options``) to ``stem.*``, in parts when it is large.

    A graph of more than ``max_part_nodes`` drawn nodes gets ``stem.dot`` and ``stem.svg`` of the whole
    graph, one picture per part (``stem-part1.*`` ...: :func:`split_parts`) and ``stem.md``, the
    index: each part's nodes and picture. A smaller graph is :func:`write_drawing`'s ``stem.*``.
    """
    whole = draw_graph(graph_module, title, **options)
    hidden = weight_nodes(graph_module, options.get("weights", ())) if options.get("collapse_weights", True) else set()
    parts = split_parts(graph_module, hidden, max_part_nodes)
    if len(parts) == 1:
        return write_drawing(whole, stem)
    drawing = write_drawing(whole, stem, formats=("svg",))
    part_of = {name: index for index, names in enumerate(parts) for name in names}
    drawn = []
    for index, names in enumerate(parts):
        dot = draw_graph(graph_module, f"{title}: part {index + 1} of {len(parts)}", **options)
        _keep_only(dot, set(names), part_of)
        drawn.append(write_drawing(dot, stem.parent / f"{stem.name}-part{index + 1}"))
    index_page = stem.parent / f"{stem.name}.md"
    lines = [
        f"# {title}",
        "",
        f"{len(part_of)} nodes drawn in {len(parts)} parts of at most {max_part_nodes} "
        f"(the whole graph: `{stem.name}.svg`, `{stem.name}.dot`). An input from another part is a grey "
        "dashed box naming that part.",
        "",
    ]
    for index, (names, part) in enumerate(zip(parts, drawn)):
        picture = next((p.name for p in part.images if p.suffix == ".png"), part.source.name)
        lines += [
            f"## Part {index + 1}: `{names[0]}` to `{names[-1]}` ({len(names)} nodes)",
            "",
            f"![part {index + 1}]({picture})" if picture.endswith(".png") else f"`{picture}`",
            "",
        ]
    index_page.write_text("\n".join(lines), encoding="utf-8")
    missing = "; ".join(dict.fromkeys(d.missing for d in (drawing, *drawn) if d.missing)) or None
    return Drawing(drawing.source, drawing.images, missing, tuple(drawn), index_page)


def _unquote(name: str) -> str:
    return name[1:-1] if len(name) >= 2 and name[0] == name[-1] == '"' else name


def parse_dot(dot_source: str) -> list[pydot.Dot]:
    """The graphs of a DOT text, read by pydot's parser (quietly: it uses pyparsing's deprecated names)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return list(pydot.graph_from_dot_data(dot_source) or [])


def drawn_node_names(dot_source: str) -> set[str]:
    """The names of the nodes a DOT text draws, its clusters included (legend entries left out)."""
    names: set[str] = set()
    stack = parse_dot(dot_source)
    while stack:
        graph = stack.pop()
        names.update(_unquote(node.get_name()) for node in graph.get_nodes())
        stack.extend(graph.get_subgraphs())
    return {
        name
        for name in names
        if name not in ("node", "edge", "graph") and not name.startswith((_LEGEND_PREFIX, _STUB_PREFIX))
    }


def svg_node_names(svg_text: str) -> set[str]:
    """The names of the nodes a Graphviz SVG draws (each node is a ``<g class="node">`` with a ``<title>``)."""
    namespace = {"svg": "http://www.w3.org/2000/svg"}
    root = ElementTree.fromstring(svg_text)
    titles = (
        group.find("svg:title", namespace)
        for group in root.iter("{http://www.w3.org/2000/svg}g")
        if group.get("class") == "node"
    )
    names = {title.text or "" for title in titles if title is not None}
    return {name for name in names if not name.startswith((_LEGEND_PREFIX, _STUB_PREFIX))}
