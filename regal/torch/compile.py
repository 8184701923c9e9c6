"""regal inside torch.compile: what the backward keeps and the order of Inductor's kernels.

    compiled = regal.torch.compile(model, recompute_budget=0.1)   # any torch.compile keyword too
    for x, y in batches:
        loss_fn(compiled(x), y).backward(); optimizer.step(); optimizer.zero_grad()

`compile(model, *, recompute_budget=None, **kwargs)` returns what `torch.compile(model, **kwargs)`
returns, with two of Inductor's hooks set for the compilations it makes (through torch.compile's
`options`, Inductor's per-compilation settings: nothing global is written):

- the partitioner (`torch._inductor.config.custom_partitioner_fn`, a `CustomPartitionerFn`): on
  each compiled region's joint forward-backward graph, regal's search with recomputation picks
  the forward ops the backward runs again and the values those recomputations read, within
  `recompute_budget` (a fraction of the region's compute, SPEC.md section 3b), and tags them for
  Inductor's own min-cut partitioner (`regal.torch._compile_joint`); of min-cut's partition with
  the tags and without them (torch.compile's own), the one with the lower peak in regal's model
  is returned. `recompute_budget=None`: the partitioner as torch.compile has it (no tags);
- the kernel order (`torch._inductor.config._post_fusion_custom_pass`, a `CustomSchedulerPass`):
  on each compiled graph's fused kernels, regal's order for the lowest peak with Inductor's own
  buffer sizes (`regal.torch._compile_order`); Inductor's `reorder_for_peak_memory` then runs as
  it always does, with regal's order as its baseline.

Graph breaks give several compiled regions: each is planned on its own. A backend other than
Inductor, or a torch without one of the hooks, gets torch.compile's own choice and one warning.
Both hooks have a `uuid` (this package's source files and the settings), so Inductor's caches
keep regal's compilations apart from others. Tested with torch 2.13 (TESTED_TORCH).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import NamedTuple

import torch

__all__ = ["CompileConfig", "TESTED_TORCH", "compile", "hooks_available", "regal_options"]

#: The torch releases these hooks were tested with (setup.cfg allows torch>=2.9,<2.15).
TESTED_TORCH = ("2.13",)

_WARNED: set = set()


class CompileConfig(NamedTuple):
    """The settings of the searches the hooks run (one per compiled graph)."""
    evaluations: int = 2000            # regal.optimize's budget of evaluations
    seed: int = 0
    time_limit_s: float | None = 60.0  # per search
    flops_per_s: float = 1e11          # the cost roofline of a joint-graph op (regal.torch._compile_joint)
    bytes_per_s: float = 1e10
    order: bool = True                 # set the scheduler hook (the kernel order)


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def hooks_available() -> dict:
    """{hook name: whether the installed torch has it}: "partitioner" (custom_partitioner_fn,
    CustomPartitionerFn) and "order" (_post_fusion_custom_pass, CustomSchedulerPass)."""
    import torch._inductor.config as inductor_config
    import torch._inductor.custom_graph_pass as passes
    return {"partitioner": hasattr(inductor_config, "custom_partitioner_fn") and hasattr(passes, "CustomPartitionerFn"),
            "order": hasattr(inductor_config, "_post_fusion_custom_pass") and hasattr(passes, "CustomSchedulerPass")}


def _uuid(*settings) -> str:
    from torch._inductor.custom_graph_pass import get_hash_for_files
    here = Path(__file__).parent
    files = tuple(str(here / f) for f in ("compile.py", "_compile_joint.py", "_compile_order.py"))
    return get_hash_for_files(files).hex() + repr(settings)


def _hook_bases():
    from torch._inductor.custom_graph_pass import CustomPartitionerFn, CustomSchedulerPass
    return CustomPartitionerFn, CustomSchedulerPass


class _Hook:
    """What both hooks share: their settings, the list they append their records to, and a
    pickled form without that list (Inductor pickles its settings into its cache key)."""

    def __init__(self, recompute_budget, config: CompileConfig, records: list):
        self.recompute_budget, self.config, self.records = recompute_budget, config, records

    def __getstate__(self):
        return {"recompute_budget": self.recompute_budget, "config": tuple(self.config)}

    def __setstate__(self, state):
        self.recompute_budget, self.config, self.records = state["recompute_budget"], CompileConfig(*state["config"]), []

    def uuid(self):
        return _uuid(type(self).__name__, self.recompute_budget, tuple(self.config))

    def _kept(self, what: str, run, fallback):
        """run() with PyTorch's thread count kept (Numba's OpenMP layer may move it: Dynamo
        refuses that; the searches draw from their own generators, no global one); fallback()
        and one warning where it fails."""
        from regal.torch.plan import torch_threads_kept
        try:
            with torch_threads_kept():
                return run()
        except Exception as e:  # noqa: BLE001 - torch.compile's own choice, said once
            _warn_once(f"{what}:{type(e).__name__}", f"regal.torch.compile: regal's {what} failed on a graph "
                       f"({type(e).__name__}: {e}); torch.compile's own choice is used there")
            return fallback()


def _make_hooks():
    partitioner_base, scheduler_base = _hook_bases()

    class RegalPartitioner(_Hook, partitioner_base):
        """Inductor's min-cut partition of the joint graph (torch.compile's own), and of the graph
        tagged with regal's recomputations: the one with the lower peak in regal's model
        (`regal.torch._compile_joint.choose_partition`)."""

        def __call__(self, gm, joint_inputs, **kwargs):
            from torch._functorch.partitioners import min_cut_rematerialization_partition

            from regal.torch._compile_joint import choose_partition
            own = min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)

            def run():
                parts, result = choose_partition(gm, joint_inputs, kwargs, own, self.recompute_budget, self.config)
                self.records.append(("partition", result))
                return parts
            return self._kept("recompute search", run, lambda: own)

    class RegalOrder(_Hook, scheduler_base):
        """Returns the fused kernels in regal's order (`regal.torch._compile_order`)."""

        def __call__(self, nodes):
            from regal.torch._compile_order import order_kernels

            def run():
                c = self.config
                order, result = order_kernels(nodes, c.evaluations, c.seed, c.time_limit_s)
                self.records.append(("order", result))
                return order
            return self._kept("kernel order", run, lambda: nodes)

    return RegalPartitioner, RegalOrder


#: The hook classes, made on first use (they subclass Inductor's, imported only then); module
#: attributes so that pickle finds them by name.
RegalPartitioner = RegalOrder = None


def _hook_classes():
    global RegalPartitioner, RegalOrder
    if RegalPartitioner is None:
        RegalPartitioner, RegalOrder = _make_hooks()
        RegalPartitioner.__qualname__, RegalOrder.__qualname__ = "RegalPartitioner", "RegalOrder"
    return RegalPartitioner, RegalOrder


def regal_options(recompute_budget: float | None, config: CompileConfig, records: list) -> dict:
    """The Inductor options that set regal's hooks (a hook the installed torch lacks is left
    out, with one warning)."""
    have = hooks_available()
    options = {}
    if recompute_budget is not None:
        if have["partitioner"]:
            options["custom_partitioner_fn"] = _hook_classes()[0](recompute_budget, config, records)
        else:
            _warn_once("no partitioner", f"regal.torch.compile: torch {torch.__version__} has no custom_partitioner_fn; "
                       "the backward keeps what torch.compile chooses (tested: torch " + ", ".join(TESTED_TORCH) + ")")
    if config.order:
        if have["order"]:
            options["_post_fusion_custom_pass"] = _hook_classes()[1](recompute_budget, config, records)
        else:
            _warn_once("no order", f"regal.torch.compile: torch {torch.__version__} has no _post_fusion_custom_pass; "
                       "Inductor orders the kernels (tested: torch " + ", ".join(TESTED_TORCH) + ")")
    return options


def compile(model=None, *, recompute_budget: float | None = None, regal_config: CompileConfig | None = None,
            **kwargs):
    """`torch.compile(model, **kwargs)` with regal's recompute choice and kernel order (module
    docstring). recompute_budget: None (torch.compile's partitioner decides what the backward
    keeps) or a number >= 0, the extra compute regal may spend on recomputation as a fraction of
    each region's own. regal_config: the searches' settings (`CompileConfig`). The result has
    `regal_records`: a list of ("partition", JointResult) and ("order", OrderResult), one per
    compiled graph, appended as torch.compile compiles."""
    from regal.recompute_search import check_recompute_budget
    if recompute_budget is not None:
        recompute_budget = check_recompute_budget(recompute_budget)
    config = regal_config or CompileConfig()
    if not isinstance(config, CompileConfig):
        raise ValueError(f"regal_config must be a regal.torch.compile.CompileConfig, got {type(config).__name__}")
    if model is None:   # used as a decorator with arguments, as torch.compile may be
        return lambda m: compile(m, recompute_budget=recompute_budget, regal_config=config, **kwargs)
    backend = kwargs.get("backend", "inductor")
    if not (isinstance(backend, str) and backend == "inductor"):
        _warn_once("backend", f"regal.torch.compile: backend {backend!r} is not Inductor; torch.compile's own choices "
                   "are used")
        return torch.compile(model, **kwargs)
    records: list = []
    hooks = regal_options(recompute_budget, config, records)
    options = dict(kwargs.pop("options", None) or {})
    clash = sorted(set(options) & set(hooks))
    if clash:
        raise ValueError(f"regal.torch.compile sets Inductor's {', '.join(clash)}; leave it out of options "
                         "(or call torch.compile)")
    mode = kwargs.pop("mode", None)
    if mode not in (None, "default"):
        from torch._inductor import list_mode_options
        options = {**list_mode_options(mode, kwargs.get("dynamic")), **options}
    compiled = torch.compile(model, options={**options, **hooks}, **kwargs)
    try:
        compiled.regal_records = records
    except (AttributeError, TypeError):  # pragma: no cover - an object that takes no attribute
        pass
    return compiled
