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
PALETTE = ("#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc", "#f4a6c6", "#fdd49e", "#c7e9c0", "#d9d9d9",
           "#9edae5", "#e7cb94")
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
_LEGEND_PREFIX = "__legend_"
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
    """What :func:`write_drawing` wrote: the DOT text, the images, and why any are missing."""

    source: Path
    images: tuple[Path, ...]
    missing: str | None = None

    def describe(self) -> str:
        """One line naming the files (and what is missing), for a command's output."""
        written = ", ".join(str(path) for path in (self.source, *self.images))
        return f"wrote {written}" + (f" ({self.missing})" if self.missing else "")


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
    return {"fillcolor": f'"{style.fill}"', "color": f'"{style.border}"', "style": f'"{",".join(outline)}"',
            "penwidth": "2.5" if style.bold else "1"}


def _legend(entries: Sequence[tuple[str, NodeStyle]]) -> pydot.Cluster:
    legend = pydot.Cluster("legend", label="legend", color="grey", fontsize="12")
    for index, (text, style) in enumerate(entries):
        legend.add_node(pydot.Node(f"{_LEGEND_PREFIX}{index}", label=f'"{record_text(text)}"', shape="box",
                                   fontsize="11", **_style_attributes(style)))
        if index:  # invisible edges stack the entries in a column instead of one wide row
            legend.add_edge(pydot.Edge(f"{_LEGEND_PREFIX}{index - 1}", f"{_LEGEND_PREFIX}{index}", style="invis"))
    return legend


def draw_graph(
    graph_module: fx.GraphModule,
    title: str,
    *,
    styles: Mapping[str, NodeStyle] | None = None,
    clusters: Iterable[Cluster] = (),
    legend: Sequence[tuple[str, NodeStyle]] = (),
    unmarked: NodeStyle = NodeStyle(),
    compact: bool = True,
) -> pydot.Dot:
    """Draw ``graph_module``'s graph (not its submodules) with ``FxGraphDrawer`` and mark its nodes.

    Args:
        title: printed above the graph.
        styles: node name -> how to draw it; nodes without one get ``unmarked`` (white).
        clusters: boxes around groups of nodes (a node in none stays at the top level).
        legend: ``(text, style)`` entries, drawn as a box of sample nodes.
        compact: keep only the name, op, target, arguments and shape in each label
            (:func:`compact_label`); False keeps everything ``FxGraphDrawer`` writes.

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
    for name in names:
        (node,) = dot.get_node(name) or dot.get_node(f'"{name}"')
        style = styles.get(name, unmarked)
        label = node.get("label")
        if compact:
            label = compact_label(label)
        if style.note:
            label = label[:-1] + "|" + _note_field(style.note) + "}"
        node.set("label", label)
        for key, value in _style_attributes(style).items():
            node.set(key, value)
    for index, cluster in enumerate(clusters):
        box = pydot.Cluster(f"group_{index}", label=f'"{record_text(cluster.label)}"', color=f'"{cluster.color}"',
                            penwidth="2", fontsize="13")
        for name in cluster.nodes:
            (node,) = dot.get_node(name) or dot.get_node(f'"{name}"')
            dot.del_node(node.get_name())
            box.add_node(node)
        dot.add_subgraph(box)
    if legend:
        dot.add_subgraph(_legend(legend))
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
    source = stem.with_suffix(".dot")
    source.write_text(dot.to_string(), encoding="utf-8")
    if not graphviz_available():
        return Drawing(source, (), "Graphviz is not installed: no SVG or PNG")
    images, failed = [], []
    for fmt in formats:
        path = stem.with_suffix(f".{fmt}")
        try:
            path.write_bytes(dot.create(prog="dot", format=fmt))
        except Exception as error:  # noqa: BLE001 - one format failing must not lose the others
            failed.append(f"{fmt}: {' '.join(str(error).split())[:200]}")
            continue
        images.append(path)
    return Drawing(source, tuple(images), "; ".join(f"Graphviz failed on {f}" for f in failed) or None)


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
    return {name for name in names if name not in ("node", "edge", "graph") and not name.startswith(_LEGEND_PREFIX)}


def svg_node_names(svg_text: str) -> set[str]:
    """The names of the nodes a Graphviz SVG draws (each node is a ``<g class="node">`` with a ``<title>``)."""
    namespace = {"svg": "http://www.w3.org/2000/svg"}
    root = ElementTree.fromstring(svg_text)
    titles = (group.find("svg:title", namespace) for group in root.iter("{http://www.w3.org/2000/svg}g")
              if group.get("class") == "node")
    names = {title.text or "" for title in titles if title is not None}
    return {name for name in names if not name.startswith(_LEGEND_PREFIX)}
