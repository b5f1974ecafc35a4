"""Pictures of the graphs: every node drawn and named, marks that say what happened, text without Graphviz.

The drawings are read back as text: the DOT source through pydot's parser, the SVG as XML (each
Graphviz node is a ``<g class="node">`` with a ``<title>``). The SVG checks need Graphviz's ``dot``
(``apt-get install -y graphviz``) and skip without it; the DOT checks run everywhere.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

import pytest
import torch
import torch.nn.functional as F
from torch import fx, nn

from labkit import graph_drawing
from labkit.graph_drawing import (
    Cluster,
    NodeStyle,
    draw_graph,
    drawn_node_names,
    parse_dot,
    svg_node_names,
    write_drawing,
)
from labkit.impl import load_lab

needs_graphviz = pytest.mark.skipif(
    not graph_drawing.graphviz_available(), reason="Graphviz's dot is not installed (apt-get install -y graphviz)"
)


class Small(nn.Module):
    """Linear -> GELU, a residual add and a method call: every op kind a drawing must name."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return (F.gelu(h) + h).sum(dim=-1)


def small_graph() -> fx.GraphModule:
    return fx.symbolic_trace(Small())


def labels(dot_source: str) -> dict[str, str]:
    """Node name -> its label, every node of the DOT text (clusters included)."""
    found, stack = {}, parse_dot(dot_source)
    while stack:
        graph = stack.pop()
        found.update({node.get_name().strip('"'): node.get("label") or "" for node in graph.get_nodes()})
        stack.extend(graph.get_subgraphs())
    return found


def test_the_drawing_names_every_node_of_a_small_graph():
    gm = small_graph()
    names = {node.name for node in gm.graph.nodes}
    dot = draw_graph(
        gm,
        "small",
        styles={"gelu": NodeStyle(fill="#fdae6b", note="added by a pass")},
        clusters=[Cluster("NPU partition fused_0", ("fc", "gelu"))],
        legend=[("a pass", NodeStyle(fill="#fdae6b"))],
    )
    text = dot.to_string()
    assert drawn_node_names(text) == names
    assert {"x", "fc", "gelu", "add", "sum_1", "output"} == names
    found = labels(text)
    assert "added by a pass" in found["gelu"] and "added by a pass" not in found["add"]
    for name in names:
        assert f"name=%{name}" in found[name], "each node's label is FxGraphDrawer's, starting with its name"
    (box,) = [g for g in parse_dot(text)[0].get_subgraphs() if "fused_0" in (g.get("label") or "")]
    assert {node.get_name() for node in box.get_nodes()} == {"fc", "gelu"}


@needs_graphviz
def test_the_svg_names_every_node_and_the_png_is_an_image(tmp_path):
    gm = small_graph()
    drawing = write_drawing(draw_graph(gm, "small", styles={"fc": NodeStyle(note="changed")}), tmp_path / "small")
    assert drawing.missing is None and [p.suffix for p in drawing.images] == [".svg", ".png"]
    assert svg_node_names(drawing.images[0].read_text()) == {node.name for node in gm.graph.nodes}
    assert drawing.images[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_graphviz_the_dot_text_is_still_written(tmp_path, monkeypatch):
    monkeypatch.setattr(graph_drawing.shutil, "which", lambda name: None)
    drawing = write_drawing(draw_graph(small_graph(), "small"), tmp_path / "small")
    assert drawing.images == () and "Graphviz is not installed" in drawing.missing
    assert drawn_node_names(drawing.source.read_text()) == {node.name for node in small_graph().graph.nodes}
    assert "apt-get install -y graphviz" in graph_drawing.GRAPHVIZ_MISSING


def test_notes_with_record_syntax_stay_text(tmp_path):
    """Braces, bars, angle brackets and quotes in a note (a fallback reason) must not break the record label."""
    note = 'CPU: dtype int64 {not} <supported> | by "add" \\ here'
    gm = small_graph()
    dot = draw_graph(gm, "title with {braces} | bars", styles={"add": NodeStyle(note=note)})
    assert drawn_node_names(dot.to_string()) == {node.name for node in gm.graph.nodes}
    if graph_drawing.graphviz_available():  # Graphviz draws the characters themselves (quotes become ')
        svg = ElementTree.fromstring(dot.create(prog="dot", format="svg").decode())
        drawn = " ".join(t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text"))
        assert "CPU: dtype int64 {not} <supported> | by 'add' / here" in drawn


def test_a_style_for_a_node_the_graph_lacks_is_an_error():
    with pytest.raises(KeyError, match="no_such_node"):
        draw_graph(small_graph(), "small", styles={"no_such_node": NodeStyle()})


# -- lab 1: what each pass did ---------------------------------------------------------------------
from lab01_fx_passes.given import draw_graphs  # noqa: E402
from lab01_fx_passes.given.capture import capture  # noqa: E402
from lab01_fx_passes.given.pass_changes import diff_graphs, node_histories, snapshot  # noqa: E402


class ReluNeg(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return -torch.relu(self.fc(x))


def test_pass_changes_says_what_was_added_removed_changed_and_rewired():
    gm = fx.symbolic_trace(ReluNeg())
    before = snapshot(gm)
    (relu,) = [n for n in gm.graph.nodes if n.target is torch.relu]
    with gm.graph.inserting_after(relu):
        sigmoid = gm.graph.call_function(torch.sigmoid, (relu.args[0],))
    relu.replace_all_uses_with(sigmoid)
    gm.graph.erase_node(relu)
    with torch.no_grad():
        gm.fc.weight.mul_(2)  # the module's weights changed in place: the call_module node is changed
    gm.recompile()
    changes = diff_graphs("swap", before, snapshot(gm))
    assert changes.added == ("sigmoid",) and changes.removed == ("relu",)
    assert changes.changed == ("fc",) and changes.rewired == ("neg",)
    histories = node_histories([r.name for r in before], [changes])
    assert histories.original == {"relu": [("swap", "removed")], "fc": [("swap", "changed")]}
    assert histories.final == {"sigmoid": [("swap", "added")], "fc": [("swap", "changed")]}


def test_pass_changes_sees_through_renaming():
    """``fx.Transformer`` copies an aten graph under new names (``relu`` -> ``relu_default``): nothing changed."""
    captured = capture(ReluNeg().eval(), [torch.randn(2, 4)], "make_fx")
    copied = fx.Transformer(captured.graph_module).transform()
    renamed = {n.name for n in captured.graph_module.graph.nodes} ^ {n.name for n in copied.graph.nodes}
    assert renamed, "the Transformer renames nodes in aten graphs (else this test proves nothing)"
    changes = diff_graphs("copy", snapshot(captured.graph_module), snapshot(copied))
    assert not changes.touched and not changes.rewired, changes


def test_lab01_draws_before_and_after_with_each_pass_marked(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_IMPL", "solution")
    lab = load_lab("lab01_fx_passes")
    model, inputs = draw_graphs.MODELS["conv_bn_stack"]()
    result = draw_graphs.draw_dialect(lab, "conv_bn_stack", model, inputs, "symbolic_trace", tmp_path)
    assert result.problem is None and result.final is not None
    before, after = (d.source.read_text() for d in result.drawings)
    assert drawn_node_names(before) == {n.name for n in result.captured.graph.nodes}
    assert drawn_node_names(after) == {n.name for n in result.final.graph.nodes}
    found = labels(before)
    assert "removed by fuse_conv_bn" in found["bn1"] and "removed by fuse_conv_bn" in found["bn2"]
    assert "changed by fuse_conv_bn" in found["conv1"] and "by" not in found["relu"].split("|")[-1]
    fuse = next(c for c in result.changes if c.name == "fuse_conv_bn")
    assert set(fuse.removed) == {"bn1", "bn2"} and len(fuse.changed) == 2
    assert any("changed by fuse_conv_bn" in label for label in labels(after).values())
    table = "\n".join(draw_graphs.changes_table(result))
    assert "| fuse_conv_bn | 7 -> 5 |" in table


def test_lab01_on_the_starter_draws_the_captured_graph_and_names_the_step(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LABKIT_IMPL", "student")
    status = draw_graphs.main(["--model", "conv_bn_stack", "--dialect", "symbolic_trace", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert status == 3 and "finish step" in captured.out  # labkit.unfinished.UNFINISHED_EXIT
    assert (
        captured.err.strip().splitlines()[-1].startswith("the pictures' default_pipeline: lab01: finish step 0 first")
    )
    assert (tmp_path / "conv_bn_stack" / "symbolic_trace-before.dot").exists()
    assert not (tmp_path / "conv_bn_stack" / "symbolic_trace-after.dot").exists()
    assert "did not finish" in (tmp_path / "conv_bn_stack" / "changes.md").read_text()


def test_lab01_without_graphviz_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LABKIT_IMPL", "solution")
    monkeypatch.setattr(graph_drawing.shutil, "which", lambda name: None)
    status = draw_graphs.main(["--model", "linear_gelu_mlp", "--dialect", "symbolic_trace", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert status == 0 and "apt-get install -y graphviz" in captured.err
    written = sorted(path.name for path in (tmp_path / "linear_gelu_mlp").iterdir())
    assert written == ["changes.md", "symbolic_trace-after.dot", "symbolic_trace-before.dot"]


# -- lab 2: where each node runs -------------------------------------------------------------------
from lab02_npu_backend.given import report as lab02_report  # noqa: E402
from lab02_npu_backend.given.partition_drawing import draw_model, draw_partitioned, partition_graphs  # noqa: E402


class CumsumBetweenLinears(nn.Module):
    """Two NPU partitions around a CPU fallback (the NPU has no cumsum)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.cumsum(torch.relu(self.a(x)), dim=-1)) + 1


@pytest.mark.parametrize("dialect", ["torch", "aten"])
def test_lab02_draws_partitions_boxed_and_fallbacks_with_their_reasons(tmp_path, dialect):
    lab = load_lab("lab02_npu_backend", "solution")
    (graph,) = partition_graphs(lab, CumsumBetweenLinears().eval(), (torch.randn(4, 8),), dialect)
    assert len(graph.partitions) == 2
    drawing = draw_partitioned(graph, "cumsum", tmp_path / "cumsum")
    text = drawing.source.read_text()
    weights = graph_drawing.weight_nodes(graph.graph_module, graph.weights)
    assert len(weights) == 4, "the linears' weights and biases are graph inputs in both dialects"
    assert drawn_node_names(text) == {n.name for n in graph.graph_module.graph.nodes} - weights
    found = labels(text)
    (fallback,) = [d for d in graph.coverage.decisions if not d.on_npu]
    assert "cumsum" in fallback.reason and f"CPU: {fallback.reason}" in found[fallback.name].replace("\\n", " ")
    boxes = {
        g.get("label").strip('"'): {n.get_name() for n in g.get_nodes()}
        for g in parse_dot(text)[0].get_subgraphs()
        if "partition" in (g.get("label") or "")
    }
    assert sorted(map(frozenset, boxes.values())) == sorted(frozenset(nodes) for nodes in graph.partitions.values())
    on_npu = {d.name for d in graph.coverage.decisions if d.on_npu}
    assert on_npu == set().union(*boxes.values()) - {
        n.name for n in graph.graph_module.graph.nodes if n.op not in ("call_function", "call_method")
    }


def test_lab02_report_draws_with_draw(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LABKIT_IMPL", "solution")
    assert lab02_report.main(["--model", "mlp", "--draw", "--out", str(tmp_path)]) == 0
    assert "partitions-mlp-torch.dot" in capsys.readouterr().out
    assert (tmp_path / "partitions-mlp-torch.dot").exists() and (tmp_path / "coverage-mlp-torch.json").exists()
    with pytest.raises(SystemExit):
        lab02_report.main(["--zoo", "--draw"])


def test_lab01_says_so_when_the_manager_runs_passes_from_elsewhere(tmp_path, monkeypatch):
    """A manager that ignores its ``passes`` list would give pictures with nothing marked: the command says why."""
    lab = load_lab("lab01_fx_passes", "solution")

    class PrivateListManager(lab.PassManager):
        def __init__(self, passes, **options):
            super().__init__(passes, **options)
            self.hidden = list(self.passes)

        def __call__(self, graph_module):
            self.passes, shown = self.hidden, self.passes
            try:
                return super().__call__(graph_module)
            finally:
                self.passes = shown

    monkeypatch.setattr(
        lab, "default_pipeline", lambda inputs: PrivateListManager([lab.fuse_conv_bn], example_inputs=inputs)
    )
    model, inputs = draw_graphs.MODELS["conv_bn_stack"]()
    result = draw_graphs.draw_dialect(lab, "conv_bn_stack", model, inputs, "symbolic_trace", tmp_path)
    assert "ran none of the passes" in result.problem


def test_lab01_draws_dynamo_graphs_as_the_backend_sees_them(tmp_path, monkeypatch):
    """The backend runs the pipeline under ``torch.no_grad()``: freezing lets Conv+BN fold and the layout pass fire.

    With gradients on, frozen weights still require grad and both passes refuse: the picture would
    contradict the lab.
    """
    monkeypatch.setenv("LABKIT_IMPL", "solution")
    lab = load_lab("lab01_fx_passes")
    model, inputs = draw_graphs.MODELS["conv_bn_stack"]()
    assert torch.is_grad_enabled()
    result = draw_graphs.draw_dialect(lab, "conv_bn_stack", model, inputs, "dynamo", tmp_path)
    assert result.problem is None
    fired = {c.name for c in result.changes if c.touched}
    assert {"freeze_parameters", "fuse_conv_bn", "convert_to_channels_last"} <= fired, fired


# -- readable at screen size: weights collapsed, large graphs in parts, PNGs capped, legends true --------
def _check_readable(drawing: graph_drawing.Drawing) -> list[tuple[int, int]]:
    """Every picture of ``drawing`` (its parts included): PNG width capped, legend colours = drawn colours."""
    from PIL import Image

    sizes = []
    for picture in (drawing, *drawing.parts):
        if picture.parts:  # the whole graph of a split drawing: text and SVG only
            continue
        text = picture.source.read_text()
        drawn, legend = graph_drawing.drawn_fills(text), graph_drawing.legend_fills(text)
        assert legend <= drawn, f"{picture.source.name}: the legend shows colours no node has: {legend - drawn}"
        if legend:
            assert drawn <= legend, f"{picture.source.name}: colours the legend does not explain: {drawn - legend}"
        for image in picture.images:
            if image.suffix == ".png":
                width, height = Image.open(image).size
                assert width <= graph_drawing.PNG_MAX_WIDTH, f"{image.name} is {width} px wide"
                sizes.append((width, height))
    return sizes


@needs_graphviz
@pytest.mark.parametrize("model", ["tiny_resnet", "conv_bn_stack", "linear_gelu_mlp"])
def test_lab01_pictures_of_the_course_models_are_readable_at_screen_size(tmp_path, monkeypatch, model):
    monkeypatch.setenv("LABKIT_IMPL", "solution")
    lab = load_lab("lab01_fx_passes")
    built, inputs = draw_graphs.MODELS[model]()
    for dialect in ("dynamo", "make_fx"):
        result = draw_graphs.draw_dialect(lab, model, built, inputs, dialect, tmp_path / dialect)
        assert result.problem is None
        for drawing in result.drawings:
            assert _check_readable(drawing)
            text = drawing.source.read_text()
            assert not graph_drawing.weight_nodes(result.captured) & drawn_node_names(text), "weights collapsed"


@needs_graphviz
def test_a_large_graph_is_drawn_in_parts_with_an_index(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_IMPL", "solution")
    model, inputs = draw_graphs.MODELS["tiny_resnet"]()
    captured = capture(model, inputs, "dynamo").graph_module
    hidden = graph_drawing.weight_nodes(captured)
    parts = graph_drawing.split_parts(captured, hidden, max_nodes=12)
    assert len(parts) > 1 and all(len(part) <= 12 for part in parts)
    assert [name for part in parts for name in part] == [n.name for n in captured.graph.nodes if n.name not in hidden]
    styles = {"relu_1": NodeStyle(fill="#fdae6b")}
    drawing = graph_drawing.write_graph(
        captured,
        "tiny",
        tmp_path / "tiny",
        max_part_nodes=12,
        styles=styles,
        legend=[("relu_1", NodeStyle(fill="#fdae6b")), ("never drawn", NodeStyle(fill="#9ecae1"))],
    )
    assert len(drawing.parts) == len(parts) and drawing.index.read_text().count("![part") == len(parts)
    for part, names in zip(drawing.parts, parts):
        assert drawn_node_names(part.source.read_text()) == set(names)
    assert _check_readable(drawing)
    assert drawn_node_names(drawing.source.read_text()) == {n.name for n in captured.graph.nodes} - hidden


@needs_graphviz
@pytest.mark.parametrize("name", ["mlp", "transformer-encoder"])
def test_lab02_pictures_of_the_course_models_are_readable_and_their_legend_true(tmp_path, name):
    from lab02_npu_backend.given.models import build_model

    lab = load_lab("lab02_npu_backend", "solution")
    case = build_model(name)
    for dialect in ("torch", "aten"):
        for drawing in draw_model(lab, name, case.model, case.example_inputs, dialect, tmp_path):
            assert _check_readable(drawing)
