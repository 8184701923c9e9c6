"""The flagship search: a memetic REGAL (BRKGA with Lamarckian local improvement).

`regal.optimize(graph, devices, budget=5000, seed=0)` runs it. Three parts, each of which can be
switched off (everything off is plain BRKGA, bit for bit):

- **Seeding.** The initial population holds every cheap heuristic solution the library has
  (`regal.heuristics.heuristic_solutions`: METIS + DFS, greedy, XLA's list/DFS/post-order and
  Inductor's LPMF/BFS/DFS orders) and, on several devices, the "computes on fewer devices"
  starts (`regal.heuristics.packed_solutions`: every operation on one device, the parameters
  re-homed across all, as a parameter server keeps them; `PACKED_SEEDS`), encoded as
  chromosomes (`regal.decode.encode`); the rest of the population is drawn as mutants. Each
  seed costs one evaluation, as any member does, and a packed one one more (the step trace it
  is packed on).
- **Priors.** Mutants are drawn from per-gene Beta priors (REGAL, Paliwal et al., ICLR 2020):
  a trained policy's (`policy`), or explicit `priors`; with seeding on, the schedule of the
  priors' means (every gene at its Beta's mean) is one more start.
- **Polish.** One peak-focused local-search climb (`regal.local_search`: order and device
  moves near the peak, plateau walks, kicks; with `informed` moves, which aim at the peak
  device, and `directed` ones, which take a tensor held across a peak step off it) runs between
  the generations. It starts from the best heuristic seed (by the local
  search's own score, as the local-search baseline picks its start) and keeps walking across
  generations; whenever it finds a better schedule, the schedule is encoded back into the
  population (Lamarckian memetic algorithm, Moscato 1989), where crossover can spread it. The
  climb never jumps to a member of the population: a random placement can beat every heuristic
  at first and trap a climb far above where a heuristic's basin leads (seen on a GRU training
  graph at d = 2: a climb from METIS + DFS ended 20 % lower than one from a better random
  start). A share of the evaluations (`polish_share`) goes to the climb. The climb anneals
  (Kirkpatrick et al. 1983): early on it sometimes accepts a move that raises the peak a
  little (`ANNEAL_TEMPERATURE`), which lets it leave the basin its start lies in; less on a
  graph of more nodes than the budget has evaluations, the cube of budget / nodes of it
  (`ANNEAL_EVALS_PER_NODE`, `ANNEAL_SCALE_POWER`). It picks
  each move's kind (uniform, peak-focused, informed, directed) by how often that kind has
  improved the score lately (`ADAPTIVE_MOVES`), so it leans on whatever pays on the graph.
  Each new best of the climb has its resident tensors (parameters) re-homed to the devices
  where they cost least (`PACK_RESIDENTS`), and so does the final one, with the last two
  evaluations.

Budget: `budget` evaluations in all, heuristic seeds, decodes and local moves alike (one
evaluation = one simulation); the last step is cut short so exactly `budget` are spent, unless
`time_limit_s` or the callback stops the search first. The answer is never worse than the best
seed (elitism). Thread-count invariant: the population is decoded in parallel, each chromosome
on its own; the local search is sequential and seeded from `seed`.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from typing import Callable, NamedTuple

import numpy as np

from regal import brkga
from regal.brkga import BrkgaConfig, BrkgaState
from regal.decode import chromosome_length, decode, encode, evaluate_population
from regal.graph import Graph, check_devices
from regal.local_search import Climb, LocalSearchConfig, Race
from regal.priors import Priors
from regal.search import Progress, check_search_size, numba_threads, resolve_priors
from regal.solution import Solution, make_solution

__all__ = ["optimize", "packed_seed_devices", "polish_share", "solve_flagship", "solve_regal_paper"]


#: The policy `regal.optimize` and `regal optimize` use when none is named (one place for both).
#: "none": inside the flagship the shipped policy's priors did not pay on held-out graphs (on 12
#: valid graphs, d = 2: -3.1 % against local search with them, -1.5 % without; they help at d = 1,
#: +0.6 % against +0.1 %), and graphs from other sources make them worse (issue 12). Name a
#: policy to use one: `policy="default"`.
DEFAULT_POLICY = "none"

#: Share of the flagship's mutants drawn from the priors when it has any (the rest stay uniform:
#: a wrong prior then slows the search rather than steering all of it); REGAL's paper setting,
#: priors in plain BRKGA, draws every mutant from them. Override with
#: `config=BrkgaConfig(prior_share=...)` (or `regal optimize --prior-share`).
FLAGSHIP_PRIOR_SHARE = 0.5


#: Share of the climb's peak-focused moves that are directed (`regal._kernels._directed`: a
#: tensor held across the peak is delayed past it, freed before it by advancing its last reader,
#: or moved to the least loaded device). Measured on the 56 valid graphs, 5K evaluations, 2
#: seeds, the local search with informed moves and this share against the local-search baseline:
#: 0.5: +1.16 %, 0.8: +1.16 %, 1.0: +1.35 % at d = 2; 1.0: +0.44 % at d = 1, +2.13 % at d = 4
#: (informed moves alone: -0.06 % at d = 2).
DIRECTED_SHARE = 1.0


#: The climb's annealing temperature (`LocalSearchConfig.temperature`): a move that raises the
#: peak by a fraction x of it is accepted with probability exp(-x / T), T falling linearly from
#: this value to 0 over the search's budget (a climb that gets part of the budget ends warm).
#: Chosen on the valid splits of two sources (REGAL's synthetic DAGs, Haiku/XLA graphs; 28
#: graphs, 5K evaluations, seeds 0-1), the flagship against the local-search baseline, d = 1 / 2
#: / 4: T = 0 +1.21 / +1.40 / +0.12 %, 0.01 +1.39 / +1.69 / +0.60, 0.02 +1.44 / +1.81 / +0.89,
#: 0.04 +1.39 / +1.69 / +0.29, 0.08 +1.25 / +1.62 / +0.59; then checked on the valid splits of
#: four sources it was not chosen on (Flax, PyTorch, layer graphs, layered synthetic; 30 graphs):
#: T = 0 +0.46 / +0.27 / +0.56 %, 0.02 +0.50 / +0.76 / +0.68 (experiments/results/flagship-tuning).
#: On the 80K-node graph (d = 2) it did not pay: 77.58 MiB median against 77.48 without, within
#: the seeds' spread there (benchmarks/results/flagship_80k.md).
ANNEAL_TEMPERATURE = 0.02

#: Evaluations per node below which the climb anneals less (`anneal_temperature`): the start
#: temperature is ANNEAL_TEMPERATURE * min(1, budget / (this * nodes)); 0: off. Why: an uphill
#: move pays only if the climb has the evaluations to come back down past it, and with fewer
#: evaluations than nodes it cannot revisit most of the graph (on the 80K-node graph, d = 2,
#: annealing at T = 0.02 ended 0.1 % above local search; without it, below). At 5K evaluations
#: this changes only graphs of more than 5,000 nodes. `python -m experiments.tune_flagship
#: --set ANNEAL_EVALS_PER_NODE 0 1 4` (seeds 0-2, against local search, d = 2 / 4): on the four
#: graphs of 10K+ nodes of the train and valid splits (`--min-nodes 10000`; ResNet-101/152,
#: DenseNet-121, a Transformer decoder, training steps) 0: +0.43 / +1.95 %, 1: +0.81 / +2.49,
#: 4: +0.88 / +3.20; on the valid splits of the two tuning sources 0: +2.49 / +1.39, 1: +2.50 /
#: +1.41, 4: +2.50 / +1.49; on those of four other sources 0 and 1: +1.23 / +2.55, 4: +1.22 /
#: +2.49 (experiments/results/flagship-tuning/scale-*). 1 is the setting that leaves every graph
#: the climb can visit node by node as it was; 4 paid more on the large graphs and was not
#: checked on the test sets.
ANNEAL_EVALS_PER_NODE = 1.0

#: How fast the start temperature falls on graphs of more nodes than that: it is scaled by
#: min(1, budget / (ANNEAL_EVALS_PER_NODE * nodes)) ** this (1: in proportion). At 5K evaluations
#: it changes only graphs of more than 5,000 nodes. Chosen with `python -m
#: experiments.tune_flagship --name scale-power --graphs data/manifest.json:train:0
#: data/manifest.json:valid:0 --min-nodes 10000 --devices 2 4 --seeds 0 1 2 --set
#: ANNEAL_SCALE_POWER 1 2 3` (and `scale-power-high`: 4 6 8) on the four 10K+-node graphs of the
#: train and valid splits, against local search at d = 2 / 4: 1: +0.81 / +2.49 %, 2: +1.05 /
#: +2.63, 3: +1.18 / +2.96, 4: +0.92 / +2.53, 6: +0.95 / +2.52, 8: +1.02 / +2.36. Checked after
#: the choice: the 80K-node graph (d = 2, seeds 0-2) 81,301,581 -> 81,245,636 B median against
#: local search's 81,309,013 (benchmarks/results/flagship_80k.md); the three test graphs of
#: 6-9K nodes (`python -m experiments.large_graphs`), mean over their nine (graph, d) cells
#: against local search +1.70 % before and after.
ANNEAL_SCALE_POWER = 3.0

#: Whether ANNEAL_TEMPERATURE is in units of the uphill moves' mean relative rise so far
#: (`LocalSearchConfig.calibrated`) rather than of the peak: a scale-free temperature, tried
#: because at 80K nodes a move changes the peak by a tiny fraction of it. Not adopted. Against
#: local search, d = 1 / 2 / 4, seeds 0-2, this setting (T = 0.02 of the peak) -> calibrated
#: T = 0.5: on the 28 valid graphs of the two tuning sources +1.21 / +2.13 / +0.57 % -> +1.29 /
#: +2.54 / +0.83 % (T = 0.25: +1.26 / +2.32 / +0.46; T = 1: +1.32 / +1.97 / +0.73), but on the
#: 30 valid graphs of four other sources +0.46 / +0.82 / +1.24 -> +0.52 / +0.95 / +0.81 % (graphs
#: no worse at d = 4: 16 -> 12 of 30); on the 80K-node graph (d = 2, seeds 0-2) median
#: 81,319,533 B against 81,324,032 (local search 81,309,013). Results:
#: experiments/results/flagship-tuning/{calibrated,current}-{valid,heldout}.
ANNEAL_CALIBRATED = False

#: Whether the climb anneals only once it has stalled (`LocalSearchConfig.quench`: no uphill
#: move before its first kick, i.e. before `patience` evaluations without a new best), so that
#: it reaches the local optimum its start leads to before it may leave it. Why: an annealed
#: climb can leave the basin before reaching its floor (a GNN forward graph at d = 2: without
#: annealing 25,165,824 B on seeds 0-2, with it 25.2-26.0 MB). Not adopted: on the valid splits of
#: all six sources (`python -m experiments.tune_flagship --name quench-valid ... --set QUENCH 0 1`,
#: 58 graphs, seeds 0-2), against local search, d = 2 +2.45 -> +2.54 % (graphs no worse 52 -> 49
#: of 58), d = 4 +2.49 -> +2.34 (experiments/results/flagship-tuning/quench-valid.md).
QUENCH = False

#: Whether the climb skips, unevaluated, a move it has already evaluated and rejected from the
#: schedule it is at (`LocalSearchConfig.memo`; a skip costs no evaluation). Why: near the peak the climb draws from few distinct moves (at d = 2 a device
#: move of a node has one outcome), so in a stall it re-evaluates the same rejected moves (on 8
#: synthetic valid graphs of 70-240 nodes, d = 2, it skipped 440-1,330 of the climb's ~4,400).
#: Not adopted: on the valid splits of all six sources (`python -m experiments.tune_flagship
#: --name memo-valid ... --set MEMO 0 1`, 58 graphs, seeds 0-2), against local search, d = 2
#: +2.45 -> +2.57 % (synthetic +0.93 -> +1.44), d = 4 +2.49 -> +2.37; run by run (paired) d = 2
#: +0.12 (95 % CI -0.16 to +0.43), d = 4 -0.11 (-0.57 to +0.29): within the seeds' noise, as
#: QUENCH and PACKED_COMPARE were (experiments/results/flagship-tuning/memo*-valid.md).
MEMO = False


#: Whether the climb picks its move kinds (uniform, focused, informed, directed) by their recent
#: success (`LocalSearchConfig.adaptive`) rather than in fixed shares (half uniform, half
#: directed). Why: which moves pay differs by graph (on a T5 layer graph, d = 2, directed moves
#: and the annealing left the flagship 6 % behind local search). Measured with
#: `python -m experiments.tune_flagship` (5K evaluations, seeds 0-2), the flagship against the
#: local-search baseline, d = 1 / 2 / 4, fixed shares -> adaptive: on the valid splits of two
#: sources (synthetic, Haiku/XLA; 28 graphs) +1.30 / +1.56 / +0.70 % -> +1.26 / +2.30 / +0.79 %
#: (no worse on 27 / 20 / 18 -> 27 / 25 / 16 graphs); on the valid splits of four sources it was
#: not chosen on (Flax, PyTorch, layers, layered synthetic; 30 graphs) +0.49 / +0.55 / +0.57 ->
#: +0.44 / +1.01 / +0.61 % (experiments/results/flagship-tuning/adaptive-*). Without annealing it
#: paid less (+1.19 % at d = 2 on the first 28).
ADAPTIVE_MOVES = True

#: Re-homing the resident tensors (`regal.local_search.Climb.pack`, `regal.heuristics.
#: pack_residents`: each parameter, largest first, to the device where (max device peak, sum of
#: device peaks) falls most, priced on the step trace, not searched): 0 off; 1 the climb's best
#: once, with the last two evaluations; 2 also each time the climb has a new best, the climb
#: going on from the packed schedule when it scores better. Why: a device move of the climb
#: moves one node near the peak, and rarely one parameter that another device could hold for the
#: whole step at less cost (its reader's device then holds a copy only while it is read).
#: Measured with `python -m experiments.tune_flagship --set PACK_RESIDENTS 0 1 2` (5K
#: evaluations, seeds 0-2), the flagship against the local-search baseline, d = 2 / 4, off -> 1
#: -> 2: on the valid splits of the two tuning sources (28 graphs) +2.13 / +0.57 % -> +2.22 /
#: +1.18 -> +2.49 / +1.39 %; on the valid splits of four sources no setting was chosen on (30
#: graphs) +0.82 / +1.24 -> +1.02 / +1.87 -> +1.23 / +2.55 % (graphs no worse 21 / 16 -> 27 / 23
#: -> 28 / 27 of 30). experiments/results/flagship-tuning/pack-{valid,heldout}.
PACK_RESIDENTS = 2

#: How many climbs race (`regal.local_search.Race`: successive halving, a power of two); 1: one
#: climb. Tried because one climb's end varies by up to ~10 % with its random stream; not
#: adopted. `python -m experiments.tune_flagship --set RACE 1 2 4` (seeds 0-2, against local
#: search, d = 1 / 2 / 4): on the valid splits of the two tuning sources 1: +1.21 / +2.49 /
#: +1.39 %, 2: +1.19 / +2.68 / +1.53, 4: +1.25 / +2.17 / +1.55; on the valid splits of four
#: other sources 1: +0.46 / +1.23 / +2.55 %, 2: +0.47 / +1.28 / +1.36, 4: +0.41 / +1.33 / +2.02
#: (experiments/results/flagship-tuning/race-{valid,heldout}): the winner's shorter climb costs
#: what the choice gains, and more at d = 4.
RACE = 1


#: The most devices a "computes on fewer devices" seed computes on (`regal.heuristics.
#: packed_solutions`: the operations on k <= PACKED_SEEDS devices, k < d, one start per compiler
#: order, the resident tensors re-homed across all d devices); 0: no such seeds. Each costs one
#: simulation beyond its own evaluation (the step trace it is packed on), counted in the budget.
#: Why: on a model whose weights outweigh its activations the best schedule keeps the weights
#: apart from the computation (a parameter server), a basin no device move of the climb reaches
#: from a METIS split (ResNet-50 from ONNX, d = 2: CP-SAT found 92.0 MB in 5 s with one device
#: holding only weights, the flagship 95.2-102.8 MB; the one-device start, packed, is 82.5 MB
#: before any search). Chosen with `python -m experiments.tune_flagship --set PACKED_SEEDS ...`
#: (5K evaluations, seeds 0-2), the flagship against local search: on the valid splits of the
#: two tuning sources (28 graphs) d = 2 0: +2.53 %, 1: +2.97; d = 4 0: +1.47, 1: +2.04, 3: +1.85;
#: on the valid splits of four other sources (30 graphs) d = 2 0: +1.23, 1: +1.96; d = 4 0: +2.55,
#: 1: +2.91, 3 (k = 1-3): +2.46 (experiments/results/flagship-tuning/packed*). At d = 4 the starts
#: computing on 2 or 3 devices often win the climb's choice of start and lead it to a worse end.
PACKED_SEEDS = 1
#: The packed seeds only on graphs of at most this many nodes per evaluation of the budget. Why:
#: from a start that computes on one device the climb spreads the work again node by node, and
#: with fewer evaluations than nodes it cannot; on the 80K-node Transformer training step (d = 2,
#: 5K evaluations) a packed start scored 0.9 % below the best plain one and the climb from it
#: ended at 83.26 MB median against 81.25 MB from the plain start (local search 81.31 MB). On
#: the 15 train and valid graphs of more than 5,000 nodes (Haiku/XLA training steps of 5.1K-17K
#: nodes; `python -m experiments.tune_flagship --name packed-large --graphs
#: data/manifest.json:train:0 data/manifest.json:valid:0 --min-nodes 5001 --devices 2 4 --seeds
#: 0 1 2 --set PACKED_SEEDS 0 1`), against local search, the packed seeds gave d = 2 +2.42 ->
#: +2.36 % (graphs no worse 15 -> 13), d = 4 +5.45 -> +5.42 %: they do not pay past the budget.
PACKED_SEEDS_NODES_PER_EVAL = 1.0
#: Whether (1) the packed seeds include the METIS starts packed as they are (compute on all d
#: devices), so that the climb chooses its start between packed schedules of both kinds rather
#: than between packed one-device starts and plain starts it would pack right after choosing
#: (ViT forward, batch 32, d = 2: the best one-device start 57.7 MB, the METIS + DFS start
#: 67.9 MB unpacked and 51.1 MB packed; the climb took the first and ended 7 % behind local
#: search; with this on, 51.1 MB, ahead of local search's 52.2). Not adopted: on the valid
#: splits of all six sources (`python -m experiments.tune_flagship --name split-valid --set
#: PACKED_SPLIT 0 1`, 58 graphs, seeds 0-2) against local search d = 2 +2.45 -> +2.11 %, d = 4
#: +2.49 -> +1.39 (experiments/results/flagship-tuning/split-valid.md): a climb from the
#: unpacked METIS start, packing each new best, ends lower than one from the start packed first.
PACKED_SPLIT = 0
_PACKED_TAG = "/compute-on-"   # in the names of the packed starts (`packed_solutions`)

#: Share of the climb's evaluations each of two trial climbs gets when there are packed starts:
#: one from the best heuristic start, one from the best packed start; the better goes on, the
#: other's evaluations are spent. 0: one climb from the best start of all. Why: the start that
#: scores best is not always the basin that ends best (a packed start computes on one device,
#: and from there the climb may not spread the work again). Not adopted: the trials cost more
#: than the choice gains. `python -m experiments.tune_flagship --name trial-valid --set
#: START_TRIAL 0 0.1 0.25` on the valid splits of all six sources (58 graphs, seeds 0-2), the
#: flagship against local search, d = 2: 0: +2.45 %, 0.1: +2.13, 0.25: +2.13; d = 4: 0: +2.49,
#: 0.1: +1.98, 0.25: +1.88 (experiments/results/flagship-tuning/trial-valid.md).
START_TRIAL = 0.0

#: The most devices on which the climb's start is chosen between the best packed start and the
#: best plain start after packing that one too (`Climb.pack`, one evaluation), rather than
#: between the best packed start and the best plain start as it is; 0: never. Why: the climb
#: re-homes its start's resident tensors at once (PACK_RESIDENTS), so the plain start it would go
#: on from is the packed one; compared unpacked, a plain start loses to a one-device start that
#: its packed self beats (ViT forward, batch 32, d = 2: one-device 57.7 MB, METIS + DFS 67.9 MB
#: unpacked, 51.1 MB packed). Changes nothing where the plain start wins unpacked. Not adopted:
#: on the valid splits of all six sources (58 graphs), against local search, d = 2 +2.45 ->
#: +2.53 % with seeds 0-2 (`python -m experiments.tune_flagship --name compare-valid ... --set
#: PACKED_COMPARE 0 1`, where 1 meant every d), but +2.07 -> +2.06 with seeds 3-4
#: (`compare-valid-s34`); d = 4 +2.49 -> +2.10 (seeds 0-2): a climb from the one-device start
#: ends lower there even when the packed METIS start scores better
#: (experiments/results/flagship-tuning/compare-valid*).
PACKED_COMPARE = 0

#: When the climb went on from a packed start, the share of its evaluations after which it is
#: checked; if its best is then less than STALL_GAIN below its start, it starts again from the
#: best plain start with the evaluations left (the packed schedule stays in the population). 0:
#: never. Why: a start that computes on one device can be a basin the climb does not leave (Flax
#: ViT forward, d = 2: the packed start 10.40 MB, the climb from it 10.40 MB after 4,400
#: evaluations on every seed, local search from METIS + DFS 10.17 MB; with the switch 9.73 MB:
#: a test graph, so not a ground for choosing). Not adopted: on the valid splits of all six
#: sources (58 graphs, seeds 0-2, against local search) it fired on 13 of 174 runs at d = 2 and
#: 3 at d = 4, and more often lost than won: d = 2 +2.45 -> +2.41 % at 0.1 (paired -0.04, CI
#: -0.15..+0.04, 3 runs better, 10 worse), +2.39 at 0.25; d = 4 unchanged to two decimals (3
#: better, 0 worse). A packed climb that has not moved by then often moves later (a 72-node Flax
#: autoencoder: no gain by 840 evaluations, 7 % by 2,441), so the stall test misreads it.
#: `python -m experiments.tune_flagship --name stall-valid ... --set STALL_SWITCH 0 0.1 0.25`
#: (experiments/results/flagship-tuning/stall-valid.md).
STALL_SWITCH = 0.0
STALL_GAIN = 0.001
#: With STALL_SWITCH: the share of the climb's evaluations left after which the climb from the
#: plain start is compared with the one it left, and the better goes on; 0: the plain one goes on.
#: At 0.25 the losses shrink but stay: d = 2 +2.42 % at STALL_SWITCH 0.1 (paired -0.02, CI
#: -0.10..+0.03, 2 better, 8 worse), +2.40 at 0.25 (`stall-trial-valid.md`: `--fix STALL_TRIAL 0.25`).
STALL_TRIAL = 0.0


def anneal_temperature(num_nodes: int, budget: int) -> float:
    """The climb's start temperature: ANNEAL_TEMPERATURE, scaled by min(1, budget /
    (ANNEAL_EVALS_PER_NODE * num_nodes)) ** ANNEAL_SCALE_POWER (no scaling when
    ANNEAL_EVALS_PER_NODE is 0)."""
    if ANNEAL_EVALS_PER_NODE <= 0:
        return float(ANNEAL_TEMPERATURE)
    scale = min(1.0, budget / (ANNEAL_EVALS_PER_NODE * max(num_nodes, 1)))
    return float(ANNEAL_TEMPERATURE) * scale ** ANNEAL_SCALE_POWER


def polish_share(num_nodes: int, devices: int = 1) -> float:
    """Share of the evaluations after the initial population that goes to the local-search climb.

    One device: 0.5 up to 300 nodes, rising by 0.2 per factor of 10 in size to 0.95 from ~50K
    nodes on: the larger the graph, the less a BRKGA generation moves, while one local move costs
    one evaluation at any size. Several devices: at least 0.9, because there a generation of
    random-key crossover rarely beats a climb that moves nodes off the peak device (on the valid
    split, d = 2 and 4: 0.9 and 0.97 gave +0.3 to +0.5 % and -1.0 to -1.1 % against local search,
    the size rule alone -1.1 % and -1.5 %; differences within the run-to-run noise of a climb).
    """
    share = float(np.clip(0.5 + 0.2 * math.log10(max(num_nodes, 1) / 300.0), 0.5, 0.95))
    return share if devices == 1 else max(share, 0.9)


class _Run(NamedTuple):
    """What the loop needs besides the BRKGA state (fixed for one search)."""
    graph: Graph
    devices: int
    budget: int
    config: BrkgaConfig
    priors: Priors | None
    deadline: float | None


def packed_seed_devices(devices: int) -> list[int]:
    """The device counts the flagship's packed seeds compute on (`PACKED_SEEDS`, `PACKED_SPLIT`)."""
    return [k for k in range(1, int(PACKED_SEEDS) + 1) if k < devices] + ([devices] if PACKED_SPLIT else [])


def _seed_solutions(graph: Graph, devices: int, seed: int, budget: int) -> tuple[list, int]:
    """The seeds (name, placement, order) and the simulations they cost beyond their own
    evaluations: the heuristic starts, then (PACKED_SEEDS) the "computes on fewer devices"
    starts, one simulation each, as long as those stay within a tenth of the budget, on graphs
    of at most PACKED_SEEDS_NODES_PER_EVAL nodes per evaluation."""
    from regal.heuristics import heuristic_solutions, packed_solutions
    starts = list(heuristic_solutions(graph, devices, seed))
    packed = list(itertools.islice(packed_solutions(graph, devices, seed, packed_seed_devices(devices)),
                                   budget // 10)) \
        if PACKED_SEEDS and devices > 1 and graph.num_nodes <= PACKED_SEEDS_NODES_PER_EVAL * budget else []
    return starts + packed, len(packed)


def _generation(run: _Run, state: BrkgaState, used: int, initial: list[np.ndarray] = ()) -> BrkgaState:
    """One BRKGA generation (the initial population first, its first members replaced by
    `initial`), cut short so that at most `run.budget - used` chromosomes are evaluated."""
    candidates, state = brkga.ask(state, run.config, run.priors)
    for i, keys in enumerate(initial[:candidates.shape[0]]):
        candidates[i] = keys
    candidates = candidates[:run.budget - used]
    return brkga.tell(state, candidates, evaluate_population(run.graph, candidates, run.devices), run.config)


def _start_race(graph: Graph, devices: int, seed: int, rng, cfg: LocalSearchConfig, groups, budget: int,
                trial: int, deadline: float | None) -> tuple[Climb, int]:
    """Climb from the best start of each group (the heuristic starts; the packed ones) for
    `trial` evaluations each, within `budget` in all; the better climb goes on (ties to the
    first). Returns it and the evaluations the other spent. The first climb uses `rng`, so when
    it wins it goes on exactly as it would have without the race, `trial` evaluations later."""
    climbs = [Climb(graph, devices, rng, cfg), Climb(graph, devices, np.random.default_rng([seed, 0x5EED, 1]), cfg)]
    spent = lambda: sum(c.evaluations for c in climbs if c.state is not None)  # noqa: E731
    for climb, group in zip(climbs, groups):
        climb.start(group, max(budget - spent(), 1))
    for climb in climbs:
        climb.run(max(min(trial, budget - spent()), 0), deadline)
    winner = min(climbs, key=lambda c: c.state.best_score)
    return winner, sum(c.evaluations for c in climbs if c is not winner)


def _start_compared(climber: Climb, starts: list, budget: int) -> bool:
    """Start `climber` from the better of the best packed start and the best plain start packed
    (`PACKED_COMPARE`), within `budget` evaluations; returns whether the plain one won."""
    climber.start([(p, o) for name, p, o in starts if _PACKED_TAG in name], budget)
    one = climber.state
    climber.start([(p, o) for name, p, o in starts if _PACKED_TAG not in name], budget - climber.evaluations)
    climber.pack(budget - climber.evaluations)
    if one.best_score < climber.state.best_score:
        climber.state = one
        return False
    return True


def _write_back(run: _Run, state: BrkgaState, climber: Climb) -> BrkgaState:
    """Put the climb's best into the population (Lamarckian), replacing the worst member, and
    re-sort; nothing changes when the population already holds a schedule as good."""
    peak = climber.best_peak
    if peak >= state.fitness[-1] or np.any(state.fitness == peak):
        return state
    population = state.population.copy()
    fitness = state.fitness.copy()
    population[-1] = encode(*climber.best, run.devices)
    fitness[-1] = peak
    keep = np.argsort(fitness, kind="stable")
    return state._replace(population=population[keep], fitness=fitness[keep])


def _polish(run: _Run, state: BrkgaState, climber: Climb, evaluations: int, packed: list,
            extra: int) -> BrkgaState:
    """Climb on for `evaluations` local-search evaluations, re-home the resident tensors of a
    new best (`PACK_RESIDENTS`; `packed` holds the best score last packed); write a better result
    back. `extra`: the evaluations spent outside the population and the climb (the seeds')."""
    climber.run(evaluations, run.deadline)
    _pack(run, climber, packed, state.evaluations + extra)
    return _write_back(run, state, climber) if climber.best_peak < state.best_fitness else state


def _pack(run: _Run, climber: Climb, packed: list, decoded: int) -> None:
    """Re-home the climb's best schedule's resident tensors if it is new since the last time."""
    best = climber.state.best_score
    if PACK_RESIDENTS >= 2 and best != packed[0]:
        climber.pack(run.budget - decoded - climber.evaluations)
        packed[0] = climber.state.best_score


def _check_arguments(graph, budget, config, time_limit_s) -> None:
    """TypeError / ValueError naming the argument, before any work."""
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a regal.Graph (regal.load reads one), got {type(graph).__name__}")
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise TypeError(f"budget must be an integer number of evaluations, got {budget!r}")
    if budget < 1:
        raise ValueError(f"budget must be at least 1 evaluation, got {budget}")
    if config is not None and not isinstance(config, BrkgaConfig):
        raise TypeError(f"config must be a regal.BrkgaConfig, got {type(config).__name__}")
    if time_limit_s is not None and not (isinstance(time_limit_s, (int, float)) and math.isfinite(time_limit_s)
                                         and time_limit_s >= 0):
        raise ValueError(f"time_limit_s must be a finite number of seconds >= 0, got {time_limit_s!r}")


def optimize(graph: Graph, devices: int = 1, budget: int = 5000, seed: int = 0, *, policy=DEFAULT_POLICY,
             priors: Priors | None = None, seeding: bool = True, polish: bool = True,
             config: BrkgaConfig | None = None, time_limit_s: float | None = None,
             callback: Callable[[Progress], bool | None] | None = None, num_threads: int | None = None,
             initial: list[np.ndarray] | None = None, method: str | None = None, objective: str = "memory",
             memory_limit_bytes=None, device_model=None) -> Solution:
    """Search placements and orders of `graph` on `devices` devices for the lowest peak memory.

    budget: evaluations in all (seeds, decodes and local moves); seed: the only randomness.
    policy: a trained policy for the mutants' priors ("default" for the shipped one, a path or a
        loaded Policy; "teacher" / "teacher-schedule" for the structural teacher's); None or
        "none" for uniform mutants. priors: explicit priors instead. With seeding or polish on,
        FLAGSHIP_PRIOR_SHARE of the mutants are drawn from them (config.prior_share), else all.
    seeding / polish: the flagship's other two parts (module docstring); with both off and no
        policy this is plain BRKGA, bit for bit.
    time_limit_s: stop after the first step that ends past this many seconds.
    callback: called with a `Progress` after every step; returning True stops the search.
    num_threads: Numba threads for decoding the population; the result is the same for any value.
    initial: extra chromosomes (float64[L] each) for the initial population, after the seeds.
    method: the name the Solution carries (default "regal").
    objective: "memory" (SPEC.md section 3, this function) or "runtime": the shortest makespan
        (section 4) with every device's peak <= memory_limit_bytes (None: no limit; an int, or
        one per device) on `device_model` (`regal.timed.DeviceModel`; None: its defaults), run
        by `regal.runtime.optimize_runtime` with the same budget, seeding, polish, config and
        priors (of the timed chromosome: a policy trained for this objective, e.g. "runtime").
    Returns the best Solution found; its peak is re-simulated (SPEC.md section 3).
    """
    if objective == "runtime":
        from regal.runtime import optimize_runtime
        return optimize_runtime(graph, devices, budget, seed, memory_limit_bytes=memory_limit_bytes,
                                device_model=device_model, seeding=seeding, polish=polish, config=config,
                                policy=policy, priors=priors,
                                time_limit_s=time_limit_s, callback=callback, num_threads=num_threads,
                                initial=initial, method=method)
    if objective != "memory":
        raise ValueError(f"objective must be 'memory' or 'runtime', got {objective!r}")
    if memory_limit_bytes is not None or device_model is not None:
        raise ValueError("memory_limit_bytes and device_model belong to objective='runtime'")
    t0 = time.perf_counter()
    _check_arguments(graph, budget, config, time_limit_s)
    devices = check_devices(devices)
    config = config or BrkgaConfig()
    if config.prior_share is None:
        config = config._replace(prior_share=FLAGSHIP_PRIOR_SHARE if seeding or polish else 1.0)
    config = config.validate()
    check_search_size(graph, devices, config.population_size)
    priors = resolve_priors(graph, devices, priors, policy)
    deadline = None if time_limit_s is None else t0 + time_limit_s
    # the last evaluations re-home the resident tensors of the climb's best (PACK_RESIDENTS)
    reserve = 2 if (PACK_RESIDENTS and polish and devices > 1 and budget > config.population_size + 2
               and graph.resident.any()) else 0
    run = _Run(graph, devices, int(budget) - reserve, config, priors, deadline)
    starts, extra = _seed_solutions(graph, devices, seed, int(budget)) if seeding else ([], 0)
    if seeding and priors is not None:  # the priors' most likely schedule is one more start
        starts.append(("priors-mean", *decode(graph, priors.alpha / (priors.alpha + priors.beta), devices)))
    seeds = [encode(placement, order, devices) for _, placement, order in starts]
    share = polish_share(graph.num_nodes, devices) if polish else 0.0
    rng = np.random.default_rng([seed, 0x5EED])  # the local search's own stream
    climber, packed = None, [None]
    stall, switched = None, False   # (start peak, evaluations at which to check) (STALL_SWITCH)
    trial = None   # ((the climb state left, its packed mark), evaluations at which to compare) (STALL_TRIAL)
    state = brkga.init(chromosome_length(graph.num_nodes, devices), config, seed)
    history: list[list[float]] = []
    stopped, polished = "budget", 0
    with numba_threads(num_threads):
        while state.evaluations + polished + extra < run.budget:
            state = _generation(run, state, state.evaluations + polished + extra,
                                seeds + list(initial or []) if state.generation == 0 else ())
            used = state.evaluations + polished + extra
            if share > 0.0 and climber is None and used < run.budget:
                cfg = LocalSearchConfig.resolve(
                    graph.num_nodes, int(budget), informed=True, directed=DIRECTED_SHARE,
                    temperature=anneal_temperature(graph.num_nodes, int(budget)),
                    calibrated=bool(ANNEAL_CALIBRATED),
                    adaptive=bool(ADAPTIVE_MOVES), quench=bool(QUENCH), memo=bool(MEMO))
                if START_TRIAL > 0 and RACE == 1 and extra and len(starts) > extra:
                    groups = ([(p, o) for name, p, o in starts if _PACKED_TAG not in name],
                              [(p, o) for name, p, o in starts if _PACKED_TAG in name])
                    climber, lost = _start_race(graph, devices, seed, rng, cfg, groups, run.budget - used,
                                                int(START_TRIAL * share * (run.budget - used)), deadline)
                    extra += lost
                else:
                    if RACE > 1:
                        rngs = [rng] + [np.random.default_rng([seed, 0x5EED, i]) for i in range(1, RACE)]
                        climber = Race(graph, devices, rngs, cfg, int(share * (run.budget - used)))
                    else:
                        climber = Climb(graph, devices, rng, cfg)
                    if devices <= PACKED_COMPARE and RACE == 1 and extra and len(starts) > extra:
                        if _start_compared(climber, starts, run.budget - used):
                            packed[0] = climber.state.best_score   # the start is packed already
                    else:
                        climber.start([(p, o) for _, p, o in starts] or [decode(graph, state.best_keys, devices)],
                                      run.budget - used)
                        if (STALL_SWITCH > 0 and RACE == 1 and starts and len(starts) > extra
                                and _PACKED_TAG in starts[climber.start_index][0]):
                            stall = (climber.best_peak, climber.evaluations
                                     + STALL_SWITCH * share * (run.budget - used))
                _pack(run, climber, packed, state.evaluations + extra)
                polished = climber.evaluations
                used = state.evaluations + polished + extra
            if share > 0.0 and used < run.budget:
                chunk = int(round((config.population_size - config.num_elites) * share / (1.0 - share)))
                state = _polish(run, state, climber, min(max(chunk, 2), run.budget - used), packed, extra)
                polished = climber.evaluations
                if stall is not None and climber.evaluations >= stall[1]:
                    plain = [(p, o) for name, p, o in starts if _PACKED_TAG not in name]
                    used = state.evaluations + polished + extra
                    if climber.best_peak > (1.0 - STALL_GAIN) * stall[0] and run.budget - used > len(plain):
                        left = climber.state, packed[0]
                        climber.start(plain, run.budget - used)
                        packed[0] = None
                        _pack(run, climber, packed, state.evaluations + extra)
                        polished = climber.evaluations
                        switched = True
                        if STALL_TRIAL > 0:
                            trial = (left, climber.evaluations + STALL_TRIAL * share * (run.budget - used))
                    stall = None
                elif trial is not None and climber.evaluations >= trial[1]:
                    (old, old_packed), trial = trial[0], None
                    if old.best_score <= climber.state.best_score:   # back to the climb it left
                        climber.state, packed[0], switched = old, old_packed, "back"
            used = state.evaluations + polished + extra
            seconds = time.perf_counter() - t0
            if not history or state.best_fitness < history[-1][1]:
                history.append([used, state.best_fitness, round(seconds, 6)])
            if callback is not None and callback(Progress(used, int(budget), state.generation,
                                                          state.best_fitness, seconds)):
                stopped = "callback"
                break
            if deadline is not None and time.perf_counter() >= deadline:
                stopped = "time_limit"
                break
    if reserve and stopped == "budget" and climber is not None:
        climber.pack(int(budget) - state.evaluations - polished - extra)
        climber.run(int(budget) - state.evaluations - climber.evaluations - extra, deadline)  # what pack left
        polished = climber.evaluations
        state = _write_back(run, state, climber) if climber.best_peak < state.best_fitness else state
    used = state.evaluations + polished + extra
    placement, order = decode(graph, state.best_keys, devices)
    info = {"seed": seed, "budget": int(budget), "generations": state.generation, "stopped": stopped,
            "seeding": [name for name, _, _ in starts], "priors": priors is not None,
            "policy": os.fspath(policy) if isinstance(policy, (str, os.PathLike)) else type(policy).__name__,
            "polish_share": share,
            "polish_evaluations": polished, "config": config._asdict(), "history": history}
    if STALL_SWITCH:
        info["stall_switched"] = switched
    sol = make_solution(graph, placement, order, devices, method=method or "regal", evaluations=used,
                        seconds=time.perf_counter() - t0, info=info)
    assert sol.peak_bytes == state.best_fitness, "decoder and simulator disagree"
    return sol


# ---------------------------------------------------------------- registry entries (regal.methods)
def solve_flagship(graph: Graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
                   budget: int = 5000, policy=DEFAULT_POLICY, **options) -> Solution:
    """The flagship: seeded, prior-biased BRKGA with Lamarckian local improvement."""
    return optimize(graph, devices, budget=budget, seed=seed, policy=policy, time_limit_s=time_limit_s,
                    method="regal", **options)


def solve_regal_paper(graph: Graph, devices: int, *, seed: int = 0, time_limit_s: float | None = None,
                      budget: int = 5000, policy="default", heads=None, **options) -> Solution:
    """REGAL as in the paper: a policy's priors in plain BRKGA (no seeding, no polish).

    heads: the policy heads to use (a subset of placement, scheduling, elite), None for all."""
    if heads is not None:
        from regal.policy import load_policy
        pol = load_policy(policy) if isinstance(policy, str) else policy
        cfg = pol.config._replace(placement="placement" in heads, scheduling="scheduling" in heads,
                                  elite="elite" in heads)
        policy = type(pol)(cfg, pol.params, pol.meta)
    return optimize(graph, devices, budget=budget, seed=seed, policy=policy, time_limit_s=time_limit_s,
                    seeding=False, polish=False, method="regal-paper", **options)
