"""`regal info`, `regal import-hlo` and `regal import-onnx`: a graph's summary, and importing one;
`regal export-onnx`: an ONNX model written again with its nodes in a solution's order."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from regal.commands._common import (DEVICES, DIM_OPTION, GRAPH_HELP, OutputPath, friendly_errors, human_bytes, load_graph,
                              parse_dims)
from regal.commands._common import dim_option_advice as _dim_option_advice

if TYPE_CHECKING:
    from regal.graph import Graph


@click.command("info", short_help="size, depth and lower bound on peak memory of a graph", help=f"Size, depth and memory lower bound of GRAPH ({GRAPH_HELP}).")
@click.argument("graph_path", metavar="GRAPH")
@click.option("--devices", "-d", default=1, show_default=True, type=DEVICES,
              help="devices for the lower bound")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@DIM_OPTION
@friendly_errors
def info_cmd(graph_path, devices, as_json, dims):
    g = load_graph(graph_path, dims)
    s = g.summary()
    s["lower_bound_bytes"] = g.lower_bound(devices)
    s["devices"] = devices
    xla = _xla_schedule(g)
    if xla is not None:
        s["xla_schedule"] = xla
    if as_json:
        click.echo(json.dumps(s, indent=1))
        return
    click.echo(f"graph          {s['name']}")
    click.echo(f"nodes          {s['nodes']:,} ({s['resident_nodes']:,} resident)")
    click.echo(f"edges          {s['data_edges']:,} data, {s['control_edges']:,} control")
    click.echo(f"depth          {s['depth']:,} nodes on the longest path")
    click.echo(f"total bytes    {human_bytes(s['total_bytes'])} ({s['total_bytes']:,} B)")
    click.echo(f"resident bytes {human_bytes(s['resident_bytes'])} ({s['resident_bytes']:,} B)")
    click.echo(f"outputs        {human_bytes(s['kept_bytes'])} ({s['kept_bytes']:,} B) never freed: "
               f"{s['output_nodes']:,} marked 'output', and the nodes nobody reads")
    lt = s["largest_tensor"]
    click.echo(f"largest tensor {human_bytes(lt['bytes'])} ({lt['id']})")
    click.echo(f"lower bound    {human_bytes(s['lower_bound_bytes'])} ({s['lower_bound_bytes']:,} B) "
               f"on peak memory with {devices} device{'s' if devices > 1 else ''}")
    if xla is not None:
        click.echo(f"XLA's schedule peak {human_bytes(xla['peak_bytes'])} ({xla['peak_bytes']:,} B), allocated "
                   f"{human_bytes(xla['allocation_bytes'])} ({xla['allocation_bytes']:,} B; SPEC section 3a), "
                   "one device")


def _xla_schedule(g: Graph) -> dict | None:
    """Peak and allocation of the schedule XLA compiled the module with (`meta.xla_order`, which
    the HLO importer records for a scheduled module), on one device; None without one."""
    names = g.meta.get("xla_order") if isinstance(g.meta, dict) else None
    if not isinstance(names, list) or len(names) != g.num_nodes or set(names) != set(g.index):
        return None
    import numpy as np

    from regal.allocation import allocation
    from regal.simulate import ScheduleError, simulate
    order = np.asarray([g.index[i] for i in names])
    placement = np.zeros(g.num_nodes, dtype=np.int64)
    try:
        peak = simulate(g, placement, order, 1).peak_bytes
    except ScheduleError:
        return None
    return {"peak_bytes": int(peak), "allocation_bytes": allocation(g, placement, order, 1).allocation_bytes}


@click.command("import-hlo", short_help="XLA HLO text -> regal-graph/1 file")
@click.argument("module", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=OutputPath(),
              help="GRAPH.json or GRAPH.json.gz to write")
@click.option("--name", default=None, help="graph name (default: the HLO module's name)")
@friendly_errors
def import_hlo_cmd(module, output, name):
    """Import an XLA HLO text MODULE (pre-optimization or compiled) as a regal-graph/1 file."""
    from regal.graph import save
    from regal.hlo import load_hlo
    g = load_hlo(module, name=name)
    save(g, output)
    click.echo(f"{output}: {g.num_nodes:,} nodes, {g.num_data_edges:,} data edges, "
               f"{g.num_control_edges:,} control edges, {g.meta.get('folded', 0):,} aliases folded")


@click.command("import-onnx", short_help="ONNX model -> regal-graph/1 file (weights not read)")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=OutputPath(),
              help="GRAPH.json or GRAPH.json.gz to write")
@click.option("--name", default=None, help="graph name (default: the file name)")
@DIM_OPTION
@friendly_errors
def import_onnx_cmd(model, output, name, dims):
    """Import an ONNX MODEL (.onnx or .onnx.gz; weights are not read) as a regal-graph/1 file."""
    from regal.graph import save
    from regal.onnx import load_onnx
    with _dim_option_advice():
        g = load_onnx(model, dims=parse_dims(dims) or None, name=name)
    save(g, output)
    click.echo(f"{output}: {g.num_nodes:,} nodes, {g.num_data_edges:,} data edges, "
               f"{g.num_control_edges:,} control edges")


@click.command("export-onnx", short_help="write an ONNX model with its nodes in a solution's order")
@click.argument("model", type=click.Path(dir_okay=False))
@click.argument("solution_path", metavar="SOLUTION")
@click.option("-o", "--output", required=True, type=OutputPath(), help="ORDERED.onnx to write (plain, not .gz)")
@DIM_OPTION
@friendly_errors
def export_onnx_cmd(model, solution_path, output, dims):
    """Write MODEL (.onnx or .onnx.gz) again with its nodes in the order of SOLUTION, a
    regal-solution/1 file of the graph `regal import-onnx MODEL` makes (the same --dim values).
    ONNX Runtime runs that order with ExecutionOrder.PRIORITY_BASED and graph optimizations off
    (docs/terminal.md, "Using a solution in a runtime")."""
    from regal.onnx import import_with_ids
    from regal.onnx.order import ORT_HINT, export_ordered, reorder
    from regal.solution import load_solution
    with _dim_option_advice():
        g, onnx_model, node_ids = import_with_ids(model, dims=parse_dims(dims) or None)
    sol = load_solution(solution_path, g)
    export_ordered(reorder(onnx_model, g, node_ids, sol), output)
    click.echo(f"wrote {output}: {len(onnx_model.graph.node):,} nodes in the order of {solution_path} "
               f"(peak {human_bytes(sol.peak_bytes)})")
    if sol.num_devices > 1:
        click.echo(f"note: a {sol.num_devices}-device solution: the file holds its global order; which device runs "
                   "each node is its placement (ONNX has none)")
    click.echo(f"run it in that order with {ORT_HINT}")
