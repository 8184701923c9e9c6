"""The solution reports `regal optimize` and `regal solve` share: the runtime options, writing
the solution and reporting it (peak, allocation, packed arena, bound; or a runtime solution's
makespan). Loading the graph under the command's deadline is `regal.commands._common.load_or_exit`
(`regal fit` uses it too)."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import TYPE_CHECKING

import click

from regal.commands._common import REPORT_SHARE, exit_for_limit, human_bytes, packed_line, packed_summary

if TYPE_CHECKING:
    from regal.graph import Graph


def _report(g: Graph, sol, output: str | None, as_json: bool, deadline=None) -> None:
    """The solution's summary on stdout: JSON (no placement and order) or the text block. A stop
    request (`deadline`) before or during the allocation or the packed arena leaves them out
    (null in JSON); so does REPORT_PACK_WALL_S for the packed arena."""
    if as_json:
        doc = sol.to_json()
        doc.pop("placement")
        doc.pop("order")
        doc["lower_bound_bytes"] = g.lower_bound(sol.num_devices)
        doc["recompute"] = _recompute_summary(sol)
        alloc = report_allocation(g, sol, deadline)
        doc["allocation_bytes"] = None if alloc is None else alloc.allocation_bytes
        doc["device_allocation_bytes"] = None if alloc is None else alloc.device_allocation_bytes.tolist()
        packed = _packed(g, sol, deadline)
        doc.update(packed or {"arena_bytes": None, "device_arena_bytes": None, "arena_optimal": None})
        click.echo(json.dumps(doc, indent=1))
    else:
        _print_solution(g, sol, output, deadline)


def _recompute_summary(sol) -> dict:
    """The `--json` report's "recompute" (SPEC.md section 3b): count, extra_cost, extra_fraction
    (zeros for a solution that runs every node once)."""
    rc = sol.info.get("recompute") or {}
    return {"count": int(rc.get("count", 0)), "extra_cost": float(rc.get("extra_cost", 0.0)),
            "extra_fraction": float(rc.get("extra_fraction", 0.0))}


def _print_recompute(sol) -> None:
    """The report's recompute line (SPEC.md section 3b), for a search that could recompute."""
    rc = sol.info.get("recompute")
    if rc is None:
        return
    cost = "" if rc.get("cost_model", "cost") == "cost" else f"; {rc['cost_model']}"
    budget = sol.info.get("recompute_budget")
    within = f" (budget {budget * 100:g} %{cost})" if budget else (f" ({cost[2:]})" if cost else "")
    click.echo(f"recompute {rc['count']:,} run{'' if rc['count'] == 1 else 's'} again, "
               f"+{rc['extra_fraction'] * 100:.2f} % compute{within}")


def _instances(g: Graph, sol):
    """A solution with recomputations as a schedule of its instance graph (the allocation and the
    packed arena read schedules that run each node once); any other as it is."""
    from regal.solution import instance_solution
    return instance_solution(g, sol)


def _effort(sol) -> str:
    """", 5,000 evaluations" for a method with an evaluation budget, else "" (CP-SAT's and the
    exact DP's counts are not evaluations)."""
    import regal.methods
    try:
        counted = regal.methods.get(sol.method).takes_budget
    except ValueError:  # a solution file from elsewhere
        counted = sol.evaluations > 0
    if not counted:
        return ""
    return f", {sol.evaluations:,} evaluation{'' if sol.evaluations == 1 else 's'}"


def report_allocation(g: Graph, sol, deadline=None):
    """SPEC section 3a's allocation of the solution's schedule (what XLA's buffer assignment
    reserves): reported beside the peak, never searched. None when `deadline` (a stop request)
    expires first: it can take seconds on a large graph, and the command is asked to end."""
    from regal._stop import Stopped, interruptible
    from regal.allocation import allocation
    g, sol = _instances(g, sol)
    try:
        return interruptible(allocation, deadline, g, sol.placement, sol.order, sol.num_devices)
    except Stopped:
        return None


#: Seconds the reports wait for the packed arena: its exact search stops after a second per
#: device, but the greedy placements before it grow quadratically with the buffers (75 s for
#: 77,000 buffers), and the report must not outlast the search.
REPORT_PACK_WALL_S = 5.0


def _packed(g: Graph, sol, deadline=None) -> dict | None:
    """`packed_summary` (the packed arena beside the peak), or None when a stop request
    (`deadline`) or its time limit comes first, or it takes more than REPORT_PACK_WALL_S (then
    left behind)."""
    from regal._stop import Stopped, interruptible
    g, sol = _instances(g, sol)
    if deadline is None:
        return packed_summary(g, sol)
    limit = deadline.at
    deadline.at = time.perf_counter() + REPORT_PACK_WALL_S  # the same object: a signal still reaches it
    if limit is not None:
        deadline.at = min(deadline.at, limit)
    try:
        return interruptible(packed_summary, deadline, g, sol)
    except Stopped:
        return None
    finally:
        deadline.at = limit
        if deadline.reason == "time_limit" and (limit is None or time.perf_counter() < limit):
            deadline.reason = None


#: A gap to the lower bound at least this large (%) is said to be the bound's, not the answer's
#: (issue 55: "gap to bound 394 %" on a training step read as a failure).
LOOSE_GAP_PCT = 100.0


def loose_bound_note(g: Graph, devices: int) -> str:
    """The report's words when the gap to the bound is large: which bound it is (SPEC section
    7), and that it is loose where a schedule must hold many values at once."""
    from regal.fit import largest_bound
    name, _ = largest_bound(g, devices)
    return (f"the {name if 'bound' in name else name + ' bound'}: loose where many values must live at once, as in a training step; a gap to it is "
            "no shortfall of the answer, docs/terminal.md")


def _not_computed(deadline) -> str:
    """Why a part of the report is missing: a stop request, or the command's time limit."""
    if deadline is not None and deadline.stop_requested:
        return "not computed: stopped"
    if deadline is not None and deadline.at is not None and deadline.expired():
        return "not computed within --time-limit"
    return f"not computed within {REPORT_PACK_WALL_S:g} s"


def _not_packed(deadline) -> str:
    why = _not_computed(deadline)
    return f"packed    ({why}{'' if why.endswith('stopped') else '; regal fit -o computes it'})"


def _print_solution(g: Graph, sol, output: str | None, deadline=None):
    d = sol.num_devices
    click.echo(f"graph     {g.name} ({g.num_nodes:,} nodes)")
    click.echo(f"method    {sol.method}{_effort(sol)} in {sol.seconds:.2f} s"
               + (f" (seed {sol.info['seed']})" if "seed" in sol.info else ""))
    click.echo(f"peak      {human_bytes(sol.peak_bytes)} ({sol.peak_bytes:,} B)")
    if d > 1:
        for k in range(d):
            on = sol.placement == k
            only_weights = on.any() and bool(g.resident[on].all())
            click.echo(f"  device {k}  {human_bytes(sol.device_peak_bytes[k])} ({int(on.sum()):,} nodes"
                       + ("; weights only, it runs no op: a parameter-server layout, docs/library.md)"
                          if only_weights else ")"))
    _print_recompute(sol)
    lb = g.lower_bound(d)
    alloc = report_allocation(g, sol, deadline)
    if alloc is None:
        click.echo(f"allocated ({_not_computed(deadline)})")
    else:
        click.echo(f"allocated {human_bytes(alloc.allocation_bytes)} ({alloc.allocation_bytes:,} B) by XLA-style "
                   "buffer assignment (SPEC section 3a)")
    packed = _packed(g, sol, deadline)
    click.echo(_not_packed(deadline) if packed is None else packed_line(g, sol, packed))
    if lb and sol.peak_bytes <= lb:
        gap = ": proven optimal"
    else:
        gap = f", gap to bound {(sol.peak_bytes - lb) / lb * 100:.1f} %" if lb else ""
        if lb and (sol.peak_bytes - lb) / lb * 100 >= LOOSE_GAP_PCT:
            gap += f" ({loose_bound_note(g, d)})"
    click.echo(f"bound     {human_bytes(lb)} ({lb:,} B){gap}")
    if sol.info.get("stopped") not in (None, "budget"):
        click.echo(f"stopped   {sol.info['stopped']}")
    if output:
        click.echo(f"wrote     {output}")


def write_and_report(g: Graph, sol, output, as_json: bool, deadline, time_limit_s: float | None = None) -> None:
    """Write the solution (a further signal is only counted: the file is always complete), then
    report it; a stop request during the report, or the end of the command's time limit (the
    limit plus REPORT_SHARE of it, from the program's start), cuts its slow parts (the
    allocation, the packed arena), each then said to be not computed."""
    if deadline.stop_requested:
        sol = dataclasses.replace(sol, info={**sol.info, "stopped": deadline.reason})
    if output:
        sol.save(output)
    deadline.at = None  # the time limit was the search's; the report has its own
    if time_limit_s is not None:
        from regal.commands._common import command_start
        deadline.at = command_start() + time_limit_s * (1 + REPORT_SHARE)
    if deadline.reason == "time_limit":
        deadline.reason = None
    if "timed" in sol.info:
        _report_timed(g, sol, output, as_json)
        exit_for_limit(g, sol)
    else:
        _report(g, sol, output, as_json, deadline)


def runtime_options(objective, devices, memory_limit, bandwidth, latency, speed, method=None) -> dict:
    """The runtime options as `regal.optimize` keywords ({} for memory); a malformed size, rate,
    time or speed list is a one-line error naming the option. method: `regal solve`'s METHOD."""
    given = [name for name, v in (("--memory-limit", memory_limit), ("--bandwidth", bandwidth),
                                  ("--latency", latency), ("--speed", speed)) if v is not None]
    if objective != "runtime":
        if given and method is not None:
            import regal.methods
            timed = [m for m in regal.methods.names() if regal.methods.get(m).objective == "runtime"]
            raise click.UsageError(f"{given[0]} belongs to the runtime methods ({', '.join(timed)}); "
                                   f"{method!r} minimizes peak memory (regal optimize --objective runtime "
                                   "runs the flagship on makespan)")
        if given:
            raise click.UsageError(f"{given[0]} needs --objective runtime")
        return {}
    from regal.timed import DeviceModel, parse_bytes, parse_rate, parse_seconds

    def parse(fn, value, hint):
        try:
            return fn(value)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint=hint) from None

    def speeds(text):
        try:
            return tuple(float(x) for x in text.split(","))
        except ValueError:
            raise ValueError(f"{text!r} is not a comma-separated list of numbers") from None

    default = DeviceModel()
    model = DeviceModel(
        bandwidth_bytes_per_s=default.bandwidth_bytes_per_s if bandwidth is None else
        parse(parse_rate, bandwidth, "--bandwidth"),
        latency_s=default.latency_s if latency is None else parse(parse_seconds, latency, "--latency"),
        speed=None if speed is None else parse(speeds, speed, "--speed"))
    model = parse(model.validate, devices, "--speed")  # the only field left unchecked
    limit = None if memory_limit is None else parse(parse_bytes, memory_limit, "--memory-limit")
    return {"objective": "runtime", "memory_limit_bytes": limit, "device_model": model}


def _report_timed(g: Graph, sol, output: str | None, as_json: bool) -> None:
    """A runtime solution's summary: makespan, timed peaks against the limit, the device model."""
    timed = sol.info["timed"]
    if as_json:
        doc = sol.to_json()
        doc.pop("placement")
        doc.pop("order")
        doc["info"]["timed"]["transfers"] = len(timed["transfers"])
        doc["recompute"] = _recompute_summary(sol)
        click.echo(json.dumps(doc, indent=1))
        return
    from regal.timed import DeviceModel
    limit = timed["memory_limit_bytes"]
    click.echo(f"graph     {g.name} ({g.num_nodes:,} nodes)")
    click.echo(f"method    {sol.method}{_effort(sol)} in {sol.seconds:.2f} s"
               + (f" (seed {sol.info['seed']})" if "seed" in sol.info else ""))
    click.echo(f"makespan  {timed['makespan_s'] * 1e3:,.4f} ms ({len(timed['transfers']):,} transfers)")
    fit = "fits" if timed["feasible"] else "OVER the limit"
    click.echo(f"peak      {human_bytes(timed['peak_bytes'])} over time"
               + ("" if limit is None else f", limit {human_bytes(limit[0])} per device: {fit}"))
    for k in range(sol.num_devices):
        click.echo(f"  device {k}  {human_bytes(timed['device_peak_bytes'][k])} "
                   f"({int((sol.placement == k).sum()):,} nodes)")
    _print_recompute(sol)
    click.echo(f"devices   {DeviceModel(**timed['device_model']).describe()}")
    if sol.info.get("stopped") not in (None, "budget"):
        click.echo(f"stopped   {sol.info['stopped']}")
    if output:
        click.echo(f"wrote     {output}")
