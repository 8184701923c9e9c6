"""regal: device placement and scheduling of computation graphs for minimum peak memory.

REGAL (Paliwal et al., ICLR 2020): a biased random-key genetic algorithm (BRKGA) searches
placements and schedules through a fast decoder and memory simulator; a graph neural network
policy (`regal.policy`, imported only on demand, the one place that needs JAX) biases the
BRKGA's mutants per node.

    import regal
    graph = regal.load("model.json.gz")               # or regal.hlo.load_hlo("module.hlo")
    solution = regal.optimize(graph, devices=2, budget=5000, policy="default")
    solution.peak_bytes, solution.placement, solution.order
    solution.save("solution.json")

The names below are imported on first use (PEP 562), so that `import regal.cli` can start
NumPy and Numba its own way before any of them loads (issue 36).
"""

import importlib
import sys
import types

#: Each public name: (the module that defines it, its name there).
_NAMES = {
    "BrkgaConfig": ("regal.brkga", "BrkgaConfig"),
    "FlagshipConfig": ("regal.config", "FlagshipConfig"),
    "load": ("regal.load", "load_graph"),
    "FORMAT": ("regal.graph", "GRAPH_FORMAT"),
    "Graph": ("regal.graph", "Graph"),
    "GraphError": ("regal.graph", "GraphError"),
    "from_networkx": ("regal.graph", "from_networkx"),
    "save": ("regal.graph", "save"),
    "to_networkx": ("regal.graph", "to_networkx"),
    "Priors": ("regal.priors", "Priors"),
    "optimize": ("regal.flagship", "optimize"),
    "warmup": ("regal._warmup", "warmup"),
    "Progress": ("regal.loop", "Progress"),
    "ScheduleError": ("regal.simulate", "ScheduleError"),
    "Simulation": ("regal.simulate", "Simulation"),
    "simulate": ("regal.simulate", "simulate"),
    "Solution": ("regal.solution", "Solution"),
    "SolutionError": ("regal.solution", "SolutionError"),
    "load_solution": ("regal.solution", "load_solution"),
    "make_solution": ("regal.solution", "make_solution"),
    "use_fast_threads": ("regal.threads", "use_fast_threads"),
}

__all__ = sorted(_NAMES, key=lambda name: (not name.isupper(), not name[0].isupper(), name))

__version__ = "0.1.0"


def _resolve(name: str):
    module, attr = _NAMES[name]
    return getattr(importlib.import_module(module), attr)


def __getattr__(name: str):
    if name not in _NAMES:
        raise AttributeError(f"module 'regal' has no attribute {name!r}")
    value = globals()[name] = _resolve(name)
    return value


def __dir__():
    return sorted(set(globals()) | set(_NAMES))


class _Shadowed:
    """`regal.load` and `regal.simulate` are functions that share their names with submodules:
    importing the submodule sets the package's attribute to it, which here leaves the function
    (a value set that is not a module, e.g. a test's monkeypatch, is kept)."""

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, package, owner=None):
        if package is None:
            return self
        value = package.__dict__.get(self.name)
        return _resolve(self.name) if value is None or isinstance(value, types.ModuleType) else value

    def __set__(self, package, value):
        package.__dict__[self.name] = value

    def __delete__(self, package):
        package.__dict__.pop(self.name, None)


class _Package(types.ModuleType):
    load = _Shadowed()
    simulate = _Shadowed()


sys.modules[__name__].__class__ = _Package
