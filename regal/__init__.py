"""regal: device placement and scheduling of computation graphs for minimum peak memory.

REGAL (Paliwal et al., ICLR 2020): a biased random-key genetic algorithm (BRKGA) searches
placements and schedules through a fast decoder and memory simulator; a graph neural network
policy (`regal.policy`, imported only on demand, the one place that needs JAX) biases the
BRKGA's mutants per node.
"""

from regal.graph import FORMAT, Graph, GraphError, from_networkx, load, save, to_networkx

__all__ = [
    "FORMAT",
    "Graph",
    "GraphError",
    "from_networkx",
    "load",
    "save",
    "to_networkx",
]

__version__ = "0.1.0"
