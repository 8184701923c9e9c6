"""`regal evaluate` and `regal plot`: a solution file re-simulated on its graph, or drawn."""

from __future__ import annotations

import json
import os

import click

from regal.commands._common import DIM_OPTION, OutputPath, friendly_errors, human_bytes, load_graph
from regal.commands._report import report_allocation


def _is_solution_file(path: str) -> bool:
    """Whether `path` says it is a regal-solution/1 file (its "format" field, near the start)."""
    from regal._io import open_text
    try:
        with open_text(path) as f:
            return '"regal-solution/' in f.read(256)
    except (OSError, UnicodeDecodeError, EOFError):
        return False


def _graph_then_solution(first: str, second: str) -> tuple[str, str]:
    """The (graph, solution) paths of a command that takes both, whichever order they came in."""
    return (second, first) if _is_solution_file(first) and not _is_solution_file(second) else (first, second)


@click.command("evaluate", short_help="re-simulate a solution file on its graph; reject an invalid one")
@click.argument("graph_path", metavar="GRAPH")
@click.argument("solution_path", metavar="SOLUTION")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.option("--check", "cross_check", is_flag=True,
              help="also run the independent checker (regal.check: SPEC section 3 in plain Python, no code shared "
                   "with the fast simulator) and fail, naming the difference, if the two disagree")
@DIM_OPTION
@friendly_errors
def evaluate_cmd(graph_path, solution_path, as_json, cross_check, dims):
    """Re-simulate a regal-solution/1 file (from regal or elsewhere) on GRAPH; reject an invalid
    one. The two files may come in either order. With --check, a second, independent simulator
    re-derives the peaks (about 1.2 s per 100,000 nodes and edges)."""
    from regal.solution import load_solution
    graph_path, solution_path = _graph_then_solution(graph_path, solution_path)
    g = load_graph(graph_path, dims)
    sol = load_solution(solution_path, g)
    checked = None
    if cross_check:
        from regal.check import check_solution
        checked = check_solution(g, sol)   # CheckError (a ValueError): one line, exit 1
    alloc = report_allocation(g, sol)
    timed = _timed(g, sol)
    if as_json:
        doc = {"graph": g.name, "devices": sol.num_devices, "peak_bytes": sol.peak_bytes,
               "device_peak_bytes": [int(x) for x in sol.device_peak_bytes],
               "allocation_bytes": alloc.allocation_bytes,
               "device_allocation_bytes": alloc.device_allocation_bytes.tolist(),
               "lower_bound_bytes": g.lower_bound(sol.num_devices), "valid": True}
        if timed is not None:
            doc["timed"] = timed
        if checked is not None:
            doc["checked"] = True
        click.echo(json.dumps(doc, indent=1))
        return
    click.echo(f"{os.path.basename(solution_path)}: valid {sol.num_devices}-device schedule of {g.name}")
    if checked is not None:
        click.echo(f"checked     the independent simulator (regal.check) gives the same peaks, over "
                   f"{checked.instances:,} steps")
    click.echo(f"peak        {human_bytes(sol.peak_bytes)} ({sol.peak_bytes:,} B; SPEC section 3)")
    click.echo(f"allocation  {human_bytes(alloc.allocation_bytes)} ({alloc.allocation_bytes:,} B; SPEC section 3a, "
               "what XLA's buffer assignment reserves: arguments + outputs + heap)")
    for k in range(sol.num_devices):
        click.echo(f"  device {k}  peak {human_bytes(sol.device_peak_bytes[k])}, allocation "
                   f"{human_bytes(alloc.device_allocation_bytes[k])} = {human_bytes(alloc.argument_bytes[k])} + "
                   f"{human_bytes(alloc.output_bytes[k])} + {human_bytes(alloc.heap_bytes[k])}")
    if timed is not None:
        fit = "" if timed["feasible"] is None else ", fits the limit" if timed["feasible"] else ", OVER the limit"
        click.echo(f"makespan    {timed['makespan_s'] * 1e3:,.4f} ms, peak over time "
                   f"{', '.join(human_bytes(x) for x in timed['device_peak_bytes'])}{fit} (SPEC section 4)")


def _timed(g, sol) -> dict | None:
    """A runtime solution's timed figures (SPEC section 4) re-simulated: makespan, every device's
    peak over time, whether it fits its limit (None: no limit); None without info.timed."""
    info = sol.info.get("timed")
    if not isinstance(info, dict):
        return None
    from regal.timed import excess_bytes, memory_limits, resimulate
    sim = resimulate(g, sol)
    limit = info.get("memory_limit_bytes")
    return {"makespan_s": float(sim.makespan_s), "device_peak_bytes": [int(x) for x in sim.device_peak_bytes],
            "feasible": None if limit is None else
            excess_bytes(sim.device_peak_bytes, memory_limits(limit, sol.num_devices)) == 0}


@click.command("plot", short_help="draw memory over the schedule of a solution (PNG)")
@click.argument("graph_path", metavar="GRAPH")
@click.argument("solution_path", metavar="SOLUTION")
@click.option("-o", "--output", required=True, type=OutputPath(), help="FIG.png")
@DIM_OPTION
@friendly_errors
def plot_cmd(graph_path, solution_path, output, dims):
    """Plot memory over the schedule of SOLUTION on GRAPH: one line per device, the peak marked,
    and which device ran each node. The two files may come in either order."""
    from regal.plot import plot_solution
    from regal.solution import load_solution
    graph_path, solution_path = _graph_then_solution(graph_path, solution_path)
    g = load_graph(graph_path, dims)
    sol = load_solution(solution_path, g)
    plot_solution(g, sol, output)
    click.echo(f"wrote {output} (peak {human_bytes(sol.peak_bytes)})")
