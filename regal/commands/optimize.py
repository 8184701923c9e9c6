"""`regal optimize`: the flagship search, with a trained policy's priors computed beside the
loading of the search's kernels."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from typing import TYPE_CHECKING

import click

from regal import _args
from regal.commands._common import (BUDGET, DEVICES, DIM_OPTION, EXIT_INTERRUPTED, GRAPH_HELP, POPULATION, RUNTIME_OPTIONS,
                              SEED, SEED_HELP, OutputPath, TIME_LIMIT, Count, Fraction, friendly_errors, load_or_exit,
                              command_deadline, human_bytes, skip_flax_interop, use_jax_cache)
from regal.commands._report import runtime_options, write_and_report
from regal.policy.names import DEFAULT_POLICY_NAME as DEFAULT_POLICY

if TYPE_CHECKING:
    from regal.graph import Graph


@click.command("optimize", short_help="place and schedule a graph for the lowest peak memory (the flagship)", help=(
    "Search placements and orders of GRAPH for the lowest peak memory with regal's flagship: a "
    "memetic REGAL (heuristic seeds, local-search polish, and a trained policy's priors for the "
    "mutants when --policy names one). "
    f"GRAPH is {GRAPH_HELP}. Ctrl-C, SIGTERM or SIGHUP stops the search, still writes the best "
    "solution so far and exits with status 3."))
@click.argument("graph_path", metavar="GRAPH")
@click.option("--devices", "-d", default=1, show_default=True, type=DEVICES, help="number of devices")
@click.option("--budget", "-n", default=5000, show_default=True, type=BUDGET,
              help="evaluations (one decode or local move + one simulation each), seeds included")
@click.option("--seed", "-s", default=0, show_default=True, type=SEED, help=SEED_HELP)
@click.option("--policy", default=DEFAULT_POLICY, show_default=True,
              help="none, learned, default, runtime, gas, teacher, teacher-schedule, transfer or a policy file: what each "
                   "is and what it measured, docs/learned-priors.md")
@click.option("--seeding/--no-seeding", default=True, show_default=True,
              help="seed the population with the heuristic solutions (on several devices also the one-device starts whose parameters are spread over the others)")
@click.option("--polish/--no-polish", default=True, show_default=True,
              help="improve the best solution with the local search between generations")
@click.option("--population", type=POPULATION, default=None,
              help="BRKGA population size, exactly [default: 100, fewer for a short budget: one member per "
                   "40 evaluations, at least 10: regal.FlagshipConfig]")
@click.option("--elites", "elite_fraction", type=Fraction(0, 1, low_open=True, high_open=True),
              default=0.2, show_default=True, help="BRKGA elite fraction")
@click.option("--mutants", "mutant_fraction", type=Fraction(0, 1, high_open=True), default=0.1,
              show_default=True, help="BRKGA mutant fraction")
@click.option("--inheritance", "elite_inheritance", type=Fraction(0, 1), default=0.7, show_default=True,
              help="BRKGA probability that a child's gene comes from its elite parent")
@click.option("--prior-share", "prior_share", type=Fraction(0, 1), default=None,
              help="share of the mutants drawn from the priors, the rest uniform [default: 0.5 with "
                   "seeding or polish, else 1]")
@click.option("--time-limit", "time_limit_s", type=TIME_LIMIT, default=None,
              help="seconds from the start to the end of the report: the search stops 5 % before it, "
                   "the report ends within 5 % after it (what it leaves out, it says)")
@click.option("--threads", type=Count(1, _args.MAX_COUNT), default=None,
              help="Numba threads, at most NUMBA_NUM_THREADS (default: all)")
@click.option("-o", "--output", type=OutputPath(), default=None,
              help="write the regal-solution/1 file here")
@click.option("--json", "as_json", is_flag=True, help="print the solution summary as JSON")
@click.option("--objective", type=click.Choice(["memory", "runtime", "arena"]), default="memory", show_default=True,
              help="memory: the lowest peak (SPEC section 3); runtime: the shortest makespan under "
                   "--memory-limit (section 4, docs/timed-model.md); arena: the smallest packed arena "
                   "(docs/packing.md)")
@click.option("--recompute-budget", "recompute_budget", type=Fraction(0), default=0.0, show_default=True,
              help="extra compute the search may spend recomputing values instead of keeping them, as a "
                   "fraction of one run's cost (0.1: at most 10 % more; SPEC section 3b); with --objective "
                   "runtime and --memory-limit, the recomputation allowed while the step time (the timed "
                   "model's makespan, SPEC section 4) is minimized. 0: none")
@RUNTIME_OPTIONS
@DIM_OPTION
@friendly_errors
def optimize_cmd(graph_path, devices, budget, seed, policy, seeding, polish, population, elite_fraction,
                 mutant_fraction, elite_inheritance, prior_share, time_limit_s, threads, output, as_json, objective,
                 recompute_budget, memory_limit, bandwidth, latency, speed, dims):
    from regal._io import check_writable
    from regal.brkga import BrkgaConfig
    from regal.config import FlagshipConfig
    brkga = BrkgaConfig(population or BrkgaConfig().population_size, elite_fraction, mutant_fraction,
                        elite_inheritance, prior_share).validate()
    # a population asked for is run as asked; by default the flagship scales it to the budget
    config = FlagshipConfig(brkga=brkga, **({} if population is None else {"evaluations_per_member": 0.0}))
    runtime = runtime_options(objective, devices, memory_limit, bandwidth, latency, speed)
    if objective == "arena":
        runtime = {"objective": "arena"}
    if recompute_budget:
        if objective == "runtime" and memory_limit is None:
            raise click.UsageError("--recompute-budget with --objective runtime needs --memory-limit: without a "
                                   "limit the fastest step recomputes nothing")
        runtime = {**runtime, "recompute_budget": recompute_budget}
    if threads is not None:
        from numba import config as numba_config
        if threads > numba_config.NUMBA_NUM_THREADS:
            raise click.BadParameter(f"{threads:,} is not in 1..{numba_config.NUMBA_NUM_THREADS} (Numba's threads "
                                     "here: NUMBA_NUM_THREADS)", param_hint="--threads")
    if output:
        check_writable(output, inputs=[graph_path])  # before the search, not after it
    from regal._stop import stop_on_signals
    deadline = command_deadline(time_limit_s)  # from the program's start: imports, loading and seeds included
    with stop_on_signals(deadline):  # a signal stops whatever runs within a second (exit 3)
        _optimize(graph_path, dims, policy, devices, seeding, polish, objective, as_json, budget, seed, config,
                  threads, runtime, output, deadline, time_limit_s)
    if deadline.stop_requested:
        sys.exit(EXIT_INTERRUPTED)


def _optimize(graph_path, dims, policy, devices, seeding, polish, objective, as_json, budget, seed, config,
              threads, runtime, output, deadline, time_limit_s=None):
    import regal.methods
    g = load_or_exit(graph_path, dims, deadline)
    priors, policy_seconds = _prepare_search(policy, g, devices, seeding, polish, objective, deadline)
    bar = None
    if sys.stderr.isatty() and not as_json:
        from tqdm import tqdm
        bar = tqdm(total=budget, unit="eval", file=sys.stderr, leave=False)

    def callback(p):
        if bar is not None:
            bar.update(p.evaluations - bar.n)
            bar.set_postfix_str(f"fitness {p.best_peak_bytes:.4g}" if runtime.get("objective") == "runtime"
                                else f"peak {human_bytes(p.best_peak_bytes)}")

    try:
        sol = regal.methods.solve("regal", g, devices, seed=seed, budget=budget, deadline=deadline,
                                  policy=_search_policy(policy), priors=priors, seeding=seeding,
                                  polish=polish, config=config, callback=callback, num_threads=threads,
                                  **runtime)
    finally:
        if bar is not None:
            bar.close()
    if priors is not None:  # the solution names the policy that gave the priors, and its time
        sol = dataclasses.replace(sol, info={**sol.info, "policy": policy, "policy_seconds": round(policy_seconds, 6)})
    write_and_report(g, sol, output, as_json, deadline, time_limit_s)


def _policy_priors(policy: str, g: Graph, devices: int, objective: str = "memory"):
    """(priors, seconds): a trained policy's priors for `g` and the seconds spent loading the
    policy and running it (JAX's import, the network's compilation or its cache, inference)."""
    t = time.perf_counter()
    use_jax_cache()
    skip_flax_interop()
    from regal.policy.resolve import resolve_priors
    priors = resolve_priors(g, devices, None, policy, objective=objective)
    return priors, time.perf_counter() - t


class _PolicyJob:
    """A trained policy's priors for the graph, computed while this process loads the search's
    kernels: in a forked child where that is safe (Linux; no JAX, no Numba worker threads and no
    other thread here yet), so that JAX's start runs on another core; else right here. `result()`
    gives (priors, seconds) or raises the error the policy raised (a one-line ValueError for a bad
    policy file)."""

    def __init__(self, policy: str, g: Graph, devices: int, objective: str = "memory"):
        self.pid = None
        if not self._can_fork():
            self.value = _policy_priors(policy, g, devices, objective)
            return
        import pickle
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: compute, send, leave without running the parent's exit handlers
            os.close(read)
            try:
                out = ("ok", _policy_priors(policy, g, devices, objective))
            except BaseException as e:  # noqa: BLE001  (sent to the parent, which raises it)
                import traceback
                kind = ("value" if isinstance(e, (ValueError, TypeError)) else "os" if isinstance(e, OSError)
                        else "interrupt" if isinstance(e, KeyboardInterrupt) else "other")
                out = (kind, str(e) if kind != "other" else traceback.format_exc())
            try:
                with os.fdopen(write, "wb") as f:
                    pickle.dump(out, f)
            finally:
                os._exit(0)
        os.close(write)
        self.pid, self.read = pid, read

    @staticmethod
    def _can_fork() -> bool:
        import threading
        if not sys.platform.startswith("linux") or "jax" in sys.modules or threading.active_count() > 1:
            return False
        try:
            from numba.np.ufunc import parallel
        except ImportError:
            return False
        return getattr(parallel, "_is_initialized", True) is False

    def cancel(self) -> None:
        """End the child, if any, without waiting for its answer."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
            os.close(self.read)
            self.pid = None
            self.value = (None, None)

    def result(self, deadline=None):
        """(priors, seconds); (None, None) once `deadline` expires before the answer (the child
        is ended: a stop or the time limit does not wait for JAX)."""
        if self.pid is None:
            return self.value
        import pickle
        import select
        while deadline is not None and not select.select([self.read], [], [], 0.02)[0]:
            if deadline.expired():
                self.cancel()
                return self.value
        try:
            with os.fdopen(self.read, "rb") as f:
                data = f.read()
        finally:
            os.waitpid(self.pid, 0)
        if not data:
            raise OSError("the policy's process ended without an answer")
        kind, value = pickle.loads(data)
        if kind == "ok":
            return value
        if kind == "value":
            raise ValueError(value)
        if kind == "os":
            raise OSError(value)
        if kind == "interrupt":
            raise KeyboardInterrupt
        raise RuntimeError(f"the policy's process failed:\n{value}")


def _prepare_search(policy: str, g: Graph, devices: int, seeding: bool, polish: bool, objective: str = "memory",
                    deadline=None):
    """(priors, seconds) of a trained `policy` for `g` (None, None for 'none' or a teacher's name),
    with everything the search loads (kernels, the priors' quantile tables) loaded, so that the
    search's `seconds` count the search; the policy runs beside the loading (`_PolicyJob`).
    A stop request (`deadline`) while the kernels load ends the command with status 3 (there is
    no solution yet); the deadline expiring while the policy runs drops it: (None, None), and
    the search, without priors, stops after its first slice."""
    from regal.policy.names import check_objective
    from regal.policy.resolve import policy_heads
    check_objective(policy, objective)
    job = _PolicyJob(policy, g, devices, objective) if policy_heads(policy).priors else None
    try:
        _warm_up(deadline, devices, seeding, polish)
        if job is None:
            return None, None
        from regal.priors import prepare_tables
        if job.pid is not None:  # while the policy runs beside: the tables its actions may ask for
            from regal.policy.actions import BETA_ACTIONS
            prepare_tables(BETA_ACTIONS)
    except BaseException:
        if job is not None:
            job.cancel()
        raise
    priors, seconds = job.result(deadline)
    if priors is not None:
        prepare_tables((a, b) for a, b, _ in priors.groups)
    return priors, seconds


def _search_policy(policy: str) -> str:
    """The policy the search itself is given, by the heads the policy has (`policy_heads`, one
    reading for a name and a file alike): the teacher's names (the search computes their priors);
    a policy with a start or a move head (they run inside the search: "learned", or its file);
    else "none" (a network's priors, if any, were computed beside the kernels: `_PolicyJob`)."""
    from regal.policy.names import TEACHER_POLICIES
    from regal.policy.resolve import policy_heads
    if policy in TEACHER_POLICIES:
        return policy
    heads = policy_heads(policy)
    return policy if heads.start or heads.moves else "none"


def _warm_up(deadline, devices: int, seeding: bool, polish: bool) -> None:
    """The search's and the report's kernels (compiled or loaded from Numba's cache: minutes
    when the cache is cold) while this thread watches `deadline` (`regal.commands._common.warm_up`):
    a stop request ends the command with status 3 within a poll interval; a compilation is not
    counted in --time-limit, and said so."""
    from regal._warmup import warmup_report
    from regal.commands._common import warm_up
    from regal.flagship import warmup

    def kernels():
        warmup(devices, seeding=seeding, polish=polish)
        warmup_report()

    warm_up(deadline, kernels, what="the search's kernels", nothing="no solution to write")
