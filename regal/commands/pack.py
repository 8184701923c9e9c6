"""`regal pack` and `regal fit` (issue 35). The packed arena the other commands report beside the
peak, and the fit statuses a runtime search over its memory limit ends with, are
`regal.commands._common`'s (`packed_summary`, `exit_for_limit`).

Exit statuses of `regal fit` (and of a runtime search over its --memory-limit): 0 fits (a
checked plan), 4 does not fit (a lower bound of SPEC section 7 above the limit, named), 5
undecided; 1 is a bad input, 2 a usage error, 3 stopped by a signal, as everywhere in `regal`.
Both commands stop as `regal optimize` does: a signal in any phase ends them within a second,
status 3, the best result so far written.
"""

from __future__ import annotations

import json
import os
import sys

import click

# PackingError is a ValueError: `friendly_errors` makes it one line, exit 1
from regal.commands._common import (BUDGET, DEVICES, EXIT_DOES_NOT_FIT, EXIT_FITS, EXIT_UNDECIDED, SEED, SEED_HELP,
                                    TIME_LIMIT, OutputPath, friendly_errors, human_bytes)

__all__ = ["pack_cmd", "fit_cmd"]




class _Size(click.ParamType):
    """A size in bytes as --memory-limit takes it (16GiB, 1.5GB, 512MiB, a number of bytes)."""
    name = "size"

    def convert(self, value, param, ctx):
        from regal.timed import parse_bytes
        try:
            return parse_bytes(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


@click.command("pack", short_help="pack buffers into one arena (MiniMalloc's CSV in, offsets out)")
@click.argument("csv_path", metavar="FILE.csv", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=OutputPath(), default=None,
              help="OUT.csv: the same rows with an `offset` column")
@click.option("--time-limit", "time_limit_s", type=TIME_LIMIT, default=10.0, show_default=True,
              help="seconds from the start until the offsets are written: reading, the greedy placements, "
                   "MiniMalloc's exact search, the check (0: the greedy placements alone, however long)")
@click.option("--json", "as_json", is_flag=True, help='print {"packed_bytes", "bound_bytes", "optimal"}')
@friendly_errors
def pack_cmd(csv_path, output, time_limit_s, as_json):
    """Give every buffer of FILE.csv (MiniMalloc's `id,lower,upper,size`, lives half-open; sizes
    and times up to 2**62) an offset so that no two live buffers overlap, in the smallest arena
    found: the greedy heuristic, then MiniMalloc's exact search within the time limit. Every
    packing is checked; one at the live-bytes bound (the most bytes live at once) is optimal.
    Ctrl-C, SIGTERM or SIGHUP stops it: the best packing so far is written, exit status 3."""
    from regal._stop import Stopped, interruptible, stop_on_signals
    from regal._warmup import warmup_packing
    from regal.commands._common import EXIT_INTERRUPTED, exit_stopped, command_deadline, warm_up
    from regal.packing import PackingError, pack, read_csv, write_csv
    if output:
        from regal._io import check_writable
        check_writable(output, inputs=(csv_path,))
    deadline = command_deadline(time_limit_s or None)  # from the program's start
    with stop_on_signals(deadline):
        warm_up(deadline, warmup_packing, what="the packer's kernels")
        try:  # a second per 100,000 rows: a stop request leaves it behind
            inst = interruptible(read_csv, deadline, csv_path, requests_only=True)
        except Stopped:
            inst = None
        if inst is None or deadline.stop_requested:
            click.echo(f"stopped ({deadline.reason}) while reading {csv_path}: nothing to write", err=True)
            exit_stopped(nothing=deadline)
        try:
            res = pack(inst, time_limit_s=0.0 if time_limit_s == 0 else None, deadline=deadline)
        except PackingError as e:
            raise PackingError(f"{csv_path}: {e}") from None
        if output:
            write_csv(output, inst, res.offsets)
    if as_json:
        click.echo(json.dumps({"packed_bytes": res.packed_bytes, "bound_bytes": res.bound_bytes,
                               "optimal": res.optimal}))
    else:
        gap = "optimal" if res.optimal else f"+{(res.packed_bytes - res.bound_bytes) / max(res.bound_bytes, 1) * 100:.2f} % over it"
        click.echo(f"{os.path.basename(csv_path)}: {len(inst.ids):,} buffers packed in {res.packed_bytes:,} B; "
                   f"live-bytes bound {res.bound_bytes:,} B ({gap}); {res.method}, {res.seconds:.2f} s")
        if output:
            click.echo(f"wrote {output}")
    if deadline.stop_requested:
        click.echo(f"stopped ({deadline.reason}): the best packing found so far", err=True)
        sys.exit(EXIT_INTERRUPTED)


@click.command("fit", short_help="will GRAPH fit in LIMIT per device? a checked plan, or a proof")
@click.argument("graph_path", metavar="GRAPH")
@click.option("--memory", "memory", required=True, type=_Size(), metavar="LIMIT",
              help="bytes per device, e.g. 16GiB, 1.5GB, 512MiB")
@click.option("--devices", "-d", default=1, show_default=True, type=DEVICES)
@click.option("-o", "--output", type=OutputPath(), default=None,
              help="PLAN.json: the regal-solution/1 file with its memory_plan, when it fits")
@click.option("--time-limit", "time_limit_s", type=TIME_LIMIT, default=120.0, show_default=True,
              help="seconds from the start until the answer: the searches go on until a plan fits, a bound "
                   "proves that none does, or this ends")
@click.option("--budget", "-n", default=5000, show_default=True, type=BUDGET,
              help="the flagship's evaluations per round (each round a new seed)")
@click.option("--seed", "-s", default=0, show_default=True, type=SEED, help=SEED_HELP)
@click.option("--json", "as_json", is_flag=True, help='print {"fits", "arena_bytes", "bound_bytes", "proof"}')
@friendly_errors
def fit_cmd(graph_path, memory, devices, output, time_limit_s, budget, seed, as_json):
    """Whether GRAPH runs on --devices devices of LIMIT bytes each. Exit status 0: it fits, with
    a checked memory plan (an offset for every buffer; written with -o); 4: it does not fit (a
    lower bound of SPEC section 7 above the limit, named); 5: undecided within the time limit;
    3: stopped by Ctrl-C, SIGTERM or SIGHUP (what was decided so far is printed)."""
    from regal._stop import stop_on_signals
    from regal._warmup import warmup_packing
    from regal.commands._common import EXIT_INTERRUPTED, load_or_exit, command_deadline, warm_up
    from regal.fit import fit
    from regal.flagship import warmup
    if output:
        from regal._io import check_writable
        check_writable(output, inputs=(graph_path,))
    deadline = command_deadline(time_limit_s)  # from the program's start
    with stop_on_signals(deadline):
        g = load_or_exit(graph_path, (), deadline)
        if devices > g.num_nodes:
            raise click.BadParameter(f"{devices} devices for {g.num_nodes} nodes", param_hint="--devices")

        def kernels():
            warmup(devices)
            warmup_packing()

        warm_up(deadline, kernels, what="the search's and the packer's kernels")
        res = fit(g, memory, devices, time_limit_s=None, budget=budget, seed=seed, deadline=deadline,
                  progress=_round_line(memory) if sys.stderr.isatty() else None)
        if res.fits and output:
            save_with_plan(g, res.solution, res.plan, output)
    if as_json:
        click.echo(json.dumps({"fits": res.fits, "arena_bytes": res.arena_bytes, "bound_bytes": res.bound_bytes,
                               "proof": res.proof}))
    else:
        from regal.fit import size_text
        click.echo(res.proof)
        if res.arena_bytes:
            click.echo(f"arena     {size_text(max(res.arena_bytes))} on the fullest device"
                       + ("" if devices == 1 else "; per device " + ", ".join(human_bytes(a) for a in res.arena_bytes)))
        if res.solution is not None:
            click.echo(f"peak      {size_text(res.solution.peak_bytes)}")
        from regal.fit import largest_bound
        click.echo(f"bound     {size_text(res.bound_bytes)} (SPEC section 7: {largest_bound(g, devices)[0]})")
        if res.fits and output:
            click.echo(f"wrote     {output}")
        if not res.fits and not deadline.stop_requested:
            click.echo(f"next      {_next_step(g, res, memory, devices, time_limit_s)}")
    if deadline.stop_requested:
        click.echo(f"stopped ({deadline.reason})", err=True)
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(EXIT_FITS if res.fits else EXIT_DOES_NOT_FIT if res.fits is False else EXIT_UNDECIDED)


def _round_line(limit: int):
    """`regal fit`'s progress on a terminal: a line on stderr per round of its search."""
    import time
    start = time.perf_counter()

    def show(r: int, sol, mp) -> None:
        got = f"arena {human_bytes(int(mp.arena_bytes.max()))}" if mp is not None else "no plan (the peak is over)"
        click.echo(f"round {r + 1}: peak {human_bytes(sol.peak_bytes)}, {got}; limit {human_bytes(limit)} "
                   f"({time.perf_counter() - start:.0f} s)", err=True)
    return show


def _next_step(g, res, limit: int, devices: int, time_limit_s: float) -> str:
    """What to try after "does not fit" (more devices, a larger limit) or "undecided" (more
    time as well): the numbers that would change the answer, where they are known."""
    more = next((d for d in (devices + 1, devices * 2, devices * 4) if d <= g.num_nodes and g.lower_bound(d) <= limit),
                None)
    devices_hint = f"--devices {more} (its lower bound, {human_bytes(g.lower_bound(more))}, is within the limit)" \
        if more is not None else None
    if res.fits is False:
        hints = [f"a limit of at least the bound, --memory {res.bound_bytes}"] + ([devices_hint] if devices_hint else [])
        return "; ".join(hints) + ": no schedule on these devices fits this limit"
    hints = [f"more time (--time-limit {max(2 * time_limit_s, 10):g}: rounds with new seeds go on)"]
    if res.arena_bytes:
        hints.append(f"a larger limit (--memory {max(res.arena_bytes)}: the best plan found)")
    elif res.solution is not None:
        hints.append(f"a larger limit (--memory {res.solution.peak_bytes}: the best schedule's peak)")
    if devices_hint:
        hints.append(devices_hint)
    return "try " + ", ".join(hints[:-1]) + (" or " if len(hints) > 1 else "") + hints[-1]


def save_with_plan(g, sol, mp, path) -> None:
    """Write the solution with its `memory_plan` field (SPEC section 2)."""
    from regal._io import atomic_text
    from regal.memory_plan import plan_json
    doc = sol.to_json()
    doc["memory_plan"] = plan_json(g, mp)
    with atomic_text(path) as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
