"""`resolve_priors`: the priors a search runs with, from explicit priors or a policy's name.

The one place a policy name (`regal.policy.names`) becomes priors: the library's searches and
the CLI call it. JAX is imported only when a trained network is asked for (`load_policy`).
`policy_heads` says what a policy gives a search by the heads it has (read from the policy, a
name or a file alike), so that the CLI and the library resolve `learned` and the file behind it
the same way (issue 55).
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import NamedTuple

from regal.decode import chromosome_length
from regal.graph import Graph
from regal.policy import load_policy, policy_file  # JAX is imported only to train or run GAS
from regal.policy.actions import to_priors
from regal.policy.names import SHIPPED_POLICIES, TEACHER_POLICIES, check_objective
from regal.policy.teacher import teacher_actions
from regal.priors import Priors
from regal.timed import timed_chromosome_length

__all__ = ["resolve_priors", "resolve_policy", "resolve_moves", "teacher_priors", "check_priors", "PolicyHeads",
           "policy_heads"]


class PolicyHeads(NamedTuple):
    """What a policy gives the flagship, by its heads. priors: a trained network's per-node
    priors (a placement, scheduling, elite or transfer-priority head), computed before the
    search; start: a start-choice head (issue 34); moves: a move head (issue 47): both run
    inside the search."""
    priors: bool
    start: bool
    moves: bool


def _config_only(path: str):
    """The `PolicyConfig` of a policy file (or shipped name), its parameters not read (no JAX
    for a GAS policy); a bad file raises `load_policy`'s one-line ValueError."""
    import json

    import numpy as np

    from regal.policy.loader import _config_fields
    from regal.policy.policy_config import PolicyConfig
    p = policy_file(path)
    try:
        with np.load(p, allow_pickle=False) as z:
            saved = json.loads(str(z["__config__"]))
        saved.setdefault("features", "v1")
        return PolicyConfig(**_config_fields(saved, p))
    except Exception:  # noqa: BLE001  (load_policy names what is wrong, in one line)
        load_policy(path)
        raise


def policy_heads(policy) -> PolicyHeads:
    """The heads of `policy` (a name, a file, a loaded Policy or an object with `priors`,
    `choose_start` or `move_proposals`), read from the policy itself, never from its name:
    "learned" and regal/policy/learned.npz are the same. None, "none" and the teacher's names
    (priors without a network, computed by the search) have none."""
    if policy is None or (isinstance(policy, str) and (policy == "none" or policy in TEACHER_POLICIES)):
        return PolicyHeads(False, False, False)
    if isinstance(policy, (str, os.PathLike)):
        cfg = _config_only(os.fspath(policy))
    else:
        cfg = getattr(policy, "config", None)
        if cfg is None:
            return PolicyHeads(hasattr(policy, "priors"), hasattr(policy, "choose_start"),
                               hasattr(policy, "move_proposals"))
    return PolicyHeads(bool(cfg.placement or cfg.scheduling or cfg.elite or cfg.transfer_priority),
                       bool(getattr(cfg, "start", False)), bool(getattr(cfg, "moves", False)))


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
    None without a start head). A policy whose Beta heads are all off gives no priors. Explicit
    priors with a policy: the priors as given (the CLI computes a policy's priors beside the
    kernels), the policy's start choice beside them; a teacher's name, which gives priors only,
    is refused with priors."""
    if priors is not None and isinstance(policy, str) and policy in TEACHER_POLICIES:
        raise ValueError("give either priors or a policy, not both")
    if priors is not None and not isinstance(priors, Priors):
        raise TypeError(f"priors must be a regal.Priors, got {type(priors).__name__}")
    if priors is not None:
        length = (timed_chromosome_length if objective == "runtime" else chromosome_length)(graph.num_nodes, devices)
        check_priors(priors, length, devices)
        chooser = None
        if policy is not None and policy != "none" and policy_heads(policy).start:
            pol = _loaded(os.fspath(policy)) if isinstance(policy, (str, os.PathLike)) else policy
            chooser = lambda names, scores: pol.choose_start(graph, devices, names, scores)  # noqa: E731
        return priors, chooser
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
