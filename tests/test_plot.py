"""`regal plot`'s memory figure (issue 37, item 7): the legends never cover the peak's label, and
the device strip shows every node, resident ones included."""

import os

import numpy as np
import pytest

from randgraph import random_dag


def _drawn(monkeypatch, graph, solution, tmp_path):
    """(figure, renderer): the figure plot_solution draws, drawn (the file is written as usual)."""
    import regal._io
    from regal.plot import plot_solution
    box = []
    real = regal._io.atomic_savefig

    def keep(fig, path, **kwargs):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        real(fig, path, **kwargs)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        box.append((fig, canvas.get_renderer()))

    monkeypatch.setattr(regal._io, "atomic_savefig", keep)
    plot_solution(graph, solution, str(tmp_path / "m.png"))
    return box[0]


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def shipped():
    """README's ResNet-50 (ONNX, batch 8) and a shipped DenseNet: their peaks sit at the top left,
    where the legend was."""
    import regal
    return {"resnet50": regal.load(os.path.join(ROOT, "data", "onnx", "resnet50.onnx.gz"), dims={"batch": 8}),
            "densenet40": regal.load(os.path.join(ROOT, "data", "graphs", "real", "densenet40_b1_fwd_pre.json.gz"))}


@pytest.mark.parametrize("name,devices", [("resnet50", 1), ("resnet50", 2), ("resnet50", 4), ("densenet40", 2)])
def test_the_legend_never_covers_the_peak_label(monkeypatch, tmp_path, shipped, name, devices):
    """On four memory plots (the legend covered the label on three of them), no legend overlaps
    the peak's label, and the label stays inside the figure."""
    import regal
    g = shipped[name]
    sol = regal.optimize(g, devices=devices, budget=300, seed=0)
    fig, renderer = _drawn(monkeypatch, g, sol, tmp_path)
    memory = fig.axes[0]
    labels = [t for t in memory.texts if t.get_text().startswith("peak ")]
    assert len(labels) == 1
    label = labels[0].get_window_extent(renderer)
    assert fig.bbox.contains(label.x0, label.y0) and fig.bbox.contains(label.x1, label.y1)
    for ax in fig.axes:
        legend = ax.get_legend()
        assert legend is not None
        assert not legend.get_window_extent(renderer).overlaps(label), (ax.get_ylabel(), name, devices)


def test_the_device_strip_shows_every_node(monkeypatch, tmp_path):
    """Each node of the order has a mark on its device's row, resident nodes included."""
    import regal
    g = random_dag(5, num_nodes=80, resident_fraction=0.3)
    assert g.resident.any()
    sol = regal.optimize(g, devices=2, budget=150, seed=0)
    strip = _drawn(monkeypatch, g, sol, tmp_path)[0].axes[1]
    marks = np.concatenate([c.get_offsets() for c in strip.collections])
    assert len(marks) == g.num_nodes
    step_device = {(int(x), int(y)) for x, y in marks}
    assert step_device == {(t, int(sol.placement[v])) for t, v in enumerate(sol.order)}
