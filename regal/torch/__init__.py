"""regal for PyTorch: import a module's forward pass or training step as a `Graph`, run a regal
plan as a PyTorch program, and train with a planned step. Needs `pip install regal[torch]`.

    graph = regal.torch.from_module(model, (x,), training=True)     # tracing.py, importer.py
    step = regal.torch.planned_step(model, optimizer, (x, y), loss_fn=loss_fn)   # step.py
    for x, y in batches:
        loss = step(x, y)          # forward, backward and optimizer update, in regal's order

The wing's modules: `tracing` (from_module, trace: a forward pass or one training step),
`importer` (FX / torch.export -> Graph), `plan` (a solution as an FX program,
run and measured by PyTorch's allocator), `dist` (one process per device), `compare` (both orders
of one program side by side), `step` (the planned training step), `eager` (what a user runs
today, measured the same way: eager steps, optimizer-in-backward, torch.compile).
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only where torch is absent
    raise ImportError("regal.torch needs PyTorch: pip install regal[torch]") from e

from regal.torch.importer import ELEMENTWISE_ATEN, UNDECLARED_WRITES, Traced, from_exported, from_fx  # noqa: F401
from regal.torch.tracing import from_module, trace
from regal.torch.compile import compile  # noqa: A001 - regal.torch.compile, the function (its module's name too)

__all__ = ["Traced", "compile", "from_exported", "from_fx", "from_module", "planned_step", "trace"]


def __getattr__(name: str):
    # The planned step loads the optimizer tracing and the flagship only when asked for.
    if name == "planned_step":
        from regal.torch.step import planned_step
        return planned_step
    if name in ("PlannedStep", "UnsupportedError"):
        from regal.torch import step
        return getattr(step, name)
    raise AttributeError(f"module 'regal.torch' has no attribute {name!r}")
