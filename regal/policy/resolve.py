"""`resolve_priors`: the priors a search runs with, from explicit priors or a policy's name.

The one place a policy name (`regal.policy.names`) becomes priors: the library's searches and
the CLI call it. JAX is imported only when a trained network is asked for (`load_policy`).
"""

from __future__ import annotations

import os
from functools import lru_cache

from regal.decode import chromosome_length
from regal.graph import Graph
from regal.policy import load_policy, policy_file  # JAX is imported only to train or run GAS
from regal.policy.actions import to_priors
from regal.policy.names import SHIPPED_POLICIES, TEACHER_POLICIES, check_objective
from regal.policy.teacher import teacher_actions
from regal.priors import Priors
from regal.timed import timed_chromosome_length

__all__ = ["resolve_priors", "resolve_policy", "resolve_moves", "teacher_priors", "check_priors"]


def check_priors(priors: Priors | None, num_keys: int, devices: int) -> None:
    """ValueError when `priors` do not have one gene per key of the chromosome."""
    if priors is not None and priors.num_keys != num_keys:
        raise ValueError(f"priors have {priors.num_keys} genes; the graph needs {num_keys} for {devices} devices")


def teacher_priors(graph: Graph, devices: int, placement: bool = True) -> Priors:
    """The structural teacher's priors; placement=False keeps the scheduling half only."""
    acts = teacher_actions(graph, devices)
    return to_priors(acts if placement else acts._replace(placement=None), graph.num_nodes, devices)


def _loaded(name: str):
    """`load_policy(name)`, kept while the file is unchanged: a scheduler that names a policy on
    every call pays for reading it once (the search only reads the policy)."""
    try:
        stamp = os.stat(policy_file(name)).st_mtime_ns
    except OSError:
        stamp = None   # load_policy names the missing file
    return _load_cached(name, stamp)


@lru_cache(maxsize=8)
def _load_cached(name: str, stamp):
    return load_policy(name)


def resolve_priors(graph: Graph, devices: int, priors: Priors | None, policy,
                   objective: str = "memory") -> Priors | None:
    """Priors to search with: explicit priors, a policy's ("default", a path or a Policy), the
    teacher's ("teacher", "teacher-schedule"), or none; for the chromosome of `objective`
    ("memory", or "runtime": the timed one of SPEC.md section 5, which only a policy trained for
    it, with a transfer-priority head such as "runtime", predicts)."""
    return resolve_policy(graph, devices, priors, policy, objective)[0]


def resolve_policy(graph: Graph, devices: int, priors: Priors | None, policy,
                   objective: str = "memory") -> tuple[Priors | None, object]:
    """(priors, chooser): the priors of `resolve_priors`, and the policy's start choice: a
    function (names, scores) -> index of the start the flagship's climb goes on from (issue 34;
    None without a start head). A policy whose Beta heads are all off gives no priors."""
    if priors is not None and policy not in (None, "none"):
        raise ValueError("give either priors or a policy, not both")
    if priors is not None and not isinstance(priors, Priors):
        raise TypeError(f"priors must be a regal.Priors, got {type(priors).__name__}")
    if priors is not None:
        length = (timed_chromosome_length if objective == "runtime" else chromosome_length)(graph.num_nodes, devices)
        check_priors(priors, length, devices)
        return priors, None
    if policy is None or policy == "none":
        return None, None
    check_objective(policy, objective)
    if isinstance(policy, str) and policy in TEACHER_POLICIES:
        return teacher_priors(graph, devices, placement=policy == "teacher"), None
    if not isinstance(policy, (str, os.PathLike)) and not hasattr(policy, "priors"):
        if hasattr(policy, "choose_start"):   # a start chooser (no priors)
            return None, lambda names, scores: policy.choose_start(graph, devices, names, scores)
        if hasattr(policy, "move_proposals"):   # move proposals alone (`resolve_moves`)
            return None, None
        raise TypeError(f"policy must be 'default', 'learned', 'transfer', 'runtime', 'teacher', 'none', a policy "
                        f"file or a loaded Policy, got {policy!r}")
    pol = _loaded(os.fspath(policy)) if isinstance(policy, (str, os.PathLike)) else policy
    if pol.objective != objective:
        name = getattr(pol, "source", None) or "this policy"
        raise ValueError(f"{name} was trained for the {pol.objective} objective, not {objective!r}; give a policy "
                         f"of the {objective} objective or 'none'")
    cfg = pol.config
    heads = cfg.placement or cfg.scheduling or cfg.elite or cfg.transfer_priority
    chooser = (lambda names, scores: pol.choose_start(graph, devices, names, scores)) \
        if getattr(pol, "has_start", False) else None
    return (pol.priors(graph, devices, objective=objective) if heads else None), chooser


def resolve_moves(graph: Graph, devices: int, policy):
    """The move proposals (`regal.moves.MoveProposals`) a policy gives the flagship's climb
    (issue 47): a loaded or named policy with a moves head (`PolicyConfig.moves`), or any object
    with a `move_proposals(graph, devices)` method; None for every other policy."""
    if policy is None or (isinstance(policy, str) and policy == "none"):
        return None
    if isinstance(policy, (str, os.PathLike)):
        from regal.policy.names import POLICY_NAMES
        if isinstance(policy, str) and policy in POLICY_NAMES and policy not in SHIPPED_POLICIES:
            return None   # the teacher's names
        policy = _loaded(os.fspath(policy))
    make = getattr(policy, "move_proposals", None)
    if make is None or (hasattr(policy, "has_moves") and not policy.has_moves):
        return None
    return make(graph, devices)
