"""Policy names: which strings `policy=` accepts besides a file path (NumPy only, no JAX).

The library (`regal.policy.resolve`), the CLI and the experiments' runner all read these
names here, so that a name means the same everywhere.
"""

from __future__ import annotations

__all__ = ["DEFAULT_POLICY_NAME", "TEACHER_POLICIES", "SHIPPED_POLICIES", "START_POLICIES", "POLICY_NAMES",
           "needs_network", "check_objective"]

#: The policy `regal.optimize` and `regal optimize` use when none is named: none (inside the
#: flagship the shipped priors did not pay on held-out graphs; experiments/results/INDEX.md).
DEFAULT_POLICY_NAME = "none"
#: Policy names that need no trained network (NumPy only): the structural teacher's priors
#: (`regal.policy.teacher`: DFS-position scheduling priors and, for d > 1, METIS placement
#: priors), or its scheduling half alone.
TEACHER_POLICIES = ("teacher", "teacher-schedule")
#: The shipped policies, by name (`regal.policy.load_policy`: regal/policy/NAME.npz).
SHIPPED_POLICIES = ("default", "gas", "transfer", "runtime", "learned")
#: Shipped policies that steer the flagship's search itself rather than give priors: "learned"
#: picks the start the climb goes on from (issue 34) and proposes the climb's moves (issue 47,
#: `regal.moves`); they run inside the search, in NumPy, their time in the search's.
START_POLICIES = ("learned",)
#: Every policy name that is not a file: the shipped policies, the teacher's priors and none.
POLICY_NAMES = SHIPPED_POLICIES + ("none",) + TEACHER_POLICIES


def needs_network(policy) -> bool:
    """Whether `policy` (a name, a path or a loaded Policy) runs a trained network for priors
    before the search (the start policies run inside it)."""
    return policy is not None and not (isinstance(policy, str) and (policy == "none" or policy in TEACHER_POLICIES
                                                                     or policy in START_POLICIES))


def check_objective(policy, objective: str) -> None:
    """ValueError when a teacher's name is asked for the runtime objective (its priors are of the
    memory objective's chromosome)."""
    if objective == "runtime" and isinstance(policy, str) and policy in TEACHER_POLICIES:
        raise ValueError(f"policy {policy!r} predicts the memory objective's chromosome; the runtime "
                         "objective takes a policy trained for it (e.g. 'runtime') or 'none'")
