"""`regal.load`: any graph file regal reads, by its kind (the importers' one front door).

regal-graph/1 JSON (`regal.graph.load`), XLA HLO text (`regal.hlo`) or ONNX (`regal.onnx`); an
importer is imported only for a file of its kind (the onnx package, the HLO parser's modules are
not paid for by a command that reads a JSON graph; issue 36). A new importer
adds its kind to `regal._io.graph_kind` and a branch here.
"""

from __future__ import annotations

import os

from regal._io import graph_kind
from regal.graph import Graph, load

__all__ = ["load_graph"]


def load_graph(path: str | os.PathLike, dims=None, name: str | None = None) -> Graph:
    """Any graph file regal reads: regal-graph/1 JSON, XLA HLO text, or ONNX (`dims` gives
    symbolic ONNX dimensions their values; `name` renames an imported module, a JSON graph keeps
    its own). `regal.load` is this function."""
    if not os.path.exists(path):  # GraphError and FileNotFoundError, whatever the file's kind
        from regal.graph.io import GraphFileNotFound
        raise GraphFileNotFound(os.fspath(path))
    kind = graph_kind(path)
    if kind == "onnx":
        from regal.onnx import load_onnx  # the onnx package only for an ONNX file
        return load_onnx(path, dims=dims, name=name)
    if dims:
        raise ValueError(f"{os.fspath(path)}: --dim applies to ONNX models only")
    if kind == "hlo":
        from regal.hlo import load_hlo
        return load_hlo(path, name=name)
    return load(path)
