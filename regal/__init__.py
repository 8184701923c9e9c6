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
"""

from regal.brkga import BrkgaConfig
from regal.config import FlagshipConfig
from regal.load import load_graph as load
from regal.graph import GRAPH_FORMAT as FORMAT, Graph, GraphError, from_networkx, save, to_networkx
from regal.priors import Priors
from regal.flagship import optimize, warmup
from regal.loop import Progress
from regal.simulate import ScheduleError, Simulation, simulate
from regal.solution import Solution, SolutionError, load_solution, make_solution

__all__ = [
    "FORMAT",
    "BrkgaConfig",
    "FlagshipConfig",
    "Graph",
    "GraphError",
    "Priors",
    "Progress",
    "ScheduleError",
    "Simulation",
    "Solution",
    "SolutionError",
    "from_networkx",
    "load",
    "load_solution",
    "make_solution",
    "optimize",
    "save",
    "simulate",
    "to_networkx",
    "warmup",
]

__version__ = "0.1.0"
