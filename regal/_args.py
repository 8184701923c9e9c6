"""The ranges of the numbers regal takes (counts, sizes, budgets, seeds, seconds), and their
checks at the door: one place for the library's functions (`check_int`, `check_seconds` and
the named checks below, each a one-line TypeError or ValueError naming the argument and its
range) and for the command line (`regal.commands._common`'s option types read the same ranges, so
`regal optimize -n 2**63` and `regal.optimize(budget=2**63)` are refused in the same words).

Each upper bound is what the code can take, with room: evaluations are counted in int64 by the
kernels and in float64 by the anytime history (exact below 2**53); a seed reaches OR-Tools'
int32 `random_seed` (CP-SAT, the baselines), so seeds are 0..2**31-1 for every method;
placements are int32, so devices are at most 2**31-1 (and, for a search, at most the graph's
nodes: checked where the graph is known).
"""

from __future__ import annotations

import math
import numbers

__all__ = ["MAX_EVALUATIONS", "MAX_SEED", "MAX_DEVICES", "MAX_POPULATION", "MAX_SECONDS", "MAX_COUNT", "MAX_DIMENSION",
           "MAX_WORKERS", "MAX_MEMORY_BYTES", "check_int", "check_seconds", "check_budget", "check_seed",
           "check_devices", "range_text", "check_search_args"]

#: The most evaluations a search may be given: 10**12 (at a microsecond each, eleven days).
MAX_EVALUATIONS = 10**12
#: Seeds: 0..2**31-1, what every method's random generator takes (OR-Tools' int32 included).
MAX_SEED = 2**31 - 1
#: Devices: placements are int32.
MAX_DEVICES = 2**31 - 1
#: A BRKGA population (chromosomes): a million (memory is checked again against the graph).
MAX_POPULATION = 10**6
#: Any other count a command takes (steps, samples, workers, graphs): 10**9.
MAX_COUNT = 10**9
#: A memory limit in bytes: below 4 EiB, what `regal.timed.parse_bytes` reads (the CLI's sizes).
MAX_MEMORY_BYTES = 2**62 - 1
#: Local Dask workers (`regal train --workers`).
MAX_WORKERS = 1024
#: A symbolic ONNX dimension's value (`--dim NAME=VALUE`, `dims=`): below 2**53, the most bytes a
#: graph may hold (`regal.graph.records.MAX_TOTAL_BYTES`).
MAX_DIMENSION = 2**53 - 1
#: Seconds: a finite number, at most 10**9 (31 years; larger ones overflow some waits).
MAX_SECONDS = 1e9


def range_text(low, high) -> str:
    """"1..1,000,000,000,000": a range as the messages write it."""
    return f"{low:,}..{high:,}"


def check_int(value, name: str, low: int, high: int, what: str = "") -> int:
    """`value` as an int: TypeError unless it is an integer (a bool is not; a NumPy integer is),
    ValueError naming `name` and the range low..high unless it lies in it. what: the unit,
    said after the range ("evaluations")."""
    unit = f" ({what})" if what else ""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer in {range_text(low, high)}{unit}, got {value!r}")
    v = int(value)
    if not low <= v <= high:
        raise ValueError(f"{name} must be in {range_text(low, high)}{unit}, got {v:,}")
    return v


def check_seconds(value, name: str = "time_limit_s", none: bool = True) -> float | None:
    """`value` as a float number of seconds in 0..MAX_SECONDS (None passes when `none`); a
    TypeError or ValueError naming `name` otherwise (NaN and infinity included)."""
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds in 0..{MAX_SECONDS:.0e}"
                        f"{' or None' if none else ''}, got {value!r}")
    x = float(value)
    if not (math.isfinite(x) and 0 <= x <= MAX_SECONDS):
        raise ValueError(f"{name} must be a finite number of seconds in 0..{MAX_SECONDS:.0e}, got {value!r}")
    return x


def check_budget(budget, name: str = "budget", none: bool = False) -> int | None:
    """An evaluation budget: 1..MAX_EVALUATIONS (None passes when `none`)."""
    if budget is None and none:
        return None
    return check_int(budget, name, 1, MAX_EVALUATIONS, "evaluations")


def check_seed(seed, name: str = "seed") -> int:
    """A seed: 0..MAX_SEED."""
    return check_int(seed, name, 0, MAX_SEED)


def check_devices(devices, name: str = "devices") -> int:
    """A device count: 1..MAX_DEVICES."""
    return check_int(devices, name, 1, MAX_DEVICES)


def check_search_args(*, devices=1, budget=None, seed=0, time_limit_s=None) -> None:
    """The door of a search (`regal.optimize`, `regal.methods.solve`, `regal.fit`, the planned
    step): devices, budget (None: the method's default), seed and time limit in range."""
    check_devices(devices)
    check_budget(budget, none=True)
    check_seed(seed)
    check_seconds(time_limit_s)
