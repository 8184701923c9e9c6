"""`TrainConfig`, the settings of a training run, and the state a step passes on; see
`regal.training.reinforce`."""

from __future__ import annotations

from typing import NamedTuple


#: TrainConfig fields a resumed run may change: they end or log the run, but do not alter its steps.
RESUMABLE_FIELDS = ("steps", "checkpoint_every", "validate_every")


class TrainConfig(NamedTuple):
    devices: tuple = (2,)        # device counts, cycled over steps
    steps: int = 400
    samples: int = 4             # action samples (BRKGA runs) per step
    budget: int = 5000           # BRKGA evaluations per run
    learning_rate: float = 1e-4
    entropy_coef: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    seed_pool: int = 4           # BRKGA seeds per (graph, devices); plain references are cached
    checkpoint_every: int = 20
    validate_every: int = 50
    valid_seeds: int = 2
    imitation_steps: int = 0     # warm start: cross-entropy steps toward the structural teacher
    imitation_smoothing: float = 0.3
    imitation_lr: float = 1e-3
    objective: str = "memory"    # "memory" (peak, SPEC.md section 3) or "runtime" (makespan, section 4)


class _TrainState(NamedTuple):
    params: dict
    opt_state: object
    step: int
    key: object
    best_valid: float
    order: list
