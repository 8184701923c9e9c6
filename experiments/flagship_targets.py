"""Issue 10's targets, read off a finished `flagship` experiment: one table per (dataset, d).

    python -m experiments.flagship_targets [--results experiments/results/flagship-no60]
                                           [--cache experiments/cache/flagship]

From the experiment's cells (peaks re-simulated by the report) and its solution files:
- flagship (`regal`) against plain BRKGA 5K: mean % improvement over seed pairs, and the share
  of graphs where the flagship's mean peak over seeds is lower;
- against local search 5K: the same, and the share of graphs where it is no worse;
- gap to the best lower bound: per graph the largest of `graph.lower_bound(d)` (per-op, resident
  share, one-device bound over d), exact's proven one-device optimum divided by d, and CP-SAT's
  proven bound (SPEC.md section 7); mean gap of the flagship's peaks and how many of its runs
  are proven optimal (peak equal to the bound);
- d = 1: where exact proved the optimum, how many graphs the flagship is within 0.5 % of it;
- headroom: the mean % improvement over BRKGA 5K, over local search and over the flagship
  itself (the most any change to it, a learned prior included, could add) that a peak at the bound
  would have (no method can do better, so a target above it cannot be met), and that the best
  mean peak of any method in the experiment has (what is known to be reachable); `--also DIR`
  adds another experiment's cells to that best (the `headroom` config: the flagship at 50,000
  evaluations), and where it runs a method of the same name on other seeds, those seeds to the
  method's (the `flagship_all_s34` config: seeds 3-4 at d = 2).
Writes `targets.md` beside the results (or `--out`).
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import sys
from collections import defaultdict

import numpy as np

from regal._io import atomic_text

FLAGSHIP, BRKGA, LOCAL = "regal", "brkga", "local-search"


def _cells(results: str, also: list[str] = ()) -> dict:
    """(dataset, graph, d) -> method -> {seed: peak}; `also`'s cells only where `results` has the
    (dataset, graph, d)."""
    peaks: dict = defaultdict(lambda: defaultdict(dict))
    for i, folder in enumerate([results, *also]):
        with open(os.path.join(folder, "cells.csv")) as f:
            for row in csv.DictReader(f):
                key = (row["dataset"], row["graph"], int(row["devices"]))
                if row["peak_bytes"] and (i == 0 or key in peaks):
                    peaks[key][row["method"]][int(row["seed"])] = int(row["peak_bytes"])
    return peaks


def _solver_bounds(cache: str) -> dict:
    """(graph, d) -> the largest proven bound of exact (its optimum over d) and CP-SAT."""
    bounds: dict = defaultdict(int)
    for path in glob.glob(os.path.join(cache, "exact-*", "*", "d1_s*.json")):
        doc = json.load(open(path))
        if doc.get("info", {}).get("optimal"):
            graph = os.path.basename(os.path.dirname(path))
            for d in (1, 2, 4):
                bounds[(graph, d)] = max(bounds[(graph, d)], -(-int(doc["peak_bytes"]) // d))
            bounds[("exact", graph)] = int(doc["peak_bytes"])
    for path in glob.glob(os.path.join(cache, "cpsat-*", "*", "d*_s*.json")):
        doc = json.load(open(path))
        bound = doc.get("info", {}).get("bound_bytes")
        if bound:
            graph = os.path.basename(os.path.dirname(path))
            bounds[(graph, int(doc["devices"]))] = max(bounds[(graph, int(doc["devices"]))], int(bound))
    return bounds


def _graph_bound(graph: str, d: int, cache_bounds: dict, manifest_paths: dict) -> int:
    from regal.parallel import cached_graph
    return max(cached_graph(manifest_paths[graph]).lower_bound(d), cache_bounds[(graph, d)])


def _paths() -> dict:
    from regal.dataset import split_paths
    out = {}
    for synthetic in (False, True):
        for split in ("train", "valid", "test"):
            for p in split_paths(split, synthetic=synthetic):
                out[os.path.basename(p)[:-len(".json.gz")]] = p
    for p in split_paths("test", manifest=os.path.join("data", "manifest_importers.json")):
        out[os.path.basename(p)[:-len(".json.gz")]] = p
    for split in ("train", "valid", "test"):  # the corpus sources (flagship_all's datasets)
        for p in split_paths(split, manifest=os.path.join("data", "manifest_corpus.json")):
            out.setdefault(os.path.basename(p)[:-len(".json.gz")], p)
    return out


def _pct(a: float, b: float) -> float:
    return (a - b) / a * 100


def table(results: str, cache: str, also: list[str] = ()) -> list[str]:
    peaks, bounds, paths = _cells(results, also), _solver_bounds(cache), _paths()
    groups: dict = defaultdict(list)
    for key in peaks:
        groups[(key[0], key[2])].append(key)
    lines = ["| dataset | d | graphs | vs BRKGA 5K: mean % | graphs better | vs local search: mean % | "
             "graphs no worse | mean % gap to bound | runs proven optimal | within 0.5 % of exact (d=1) | "
             "headroom vs BRKGA: at the bound / best known | vs local search: at the bound / best known | "
             "vs the flagship itself: at the bound / best known |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (dataset, d), keys in sorted(groups.items()):
        vs_b, vs_l, better, no_worse, gaps, proven, runs, exact_ok, exact_n = [], [], 0, 0, [], 0, 0, 0, 0
        room = defaultdict(list)   # (baseline, "bound" | "best") -> per graph
        for key in keys:
            m = peaks[key]
            if FLAGSHIP not in m or BRKGA not in m or LOCAL not in m:
                continue
            seeds = sorted(set(m[FLAGSHIP]) & set(m[BRKGA]) & set(m[LOCAL]))
            vs_b.append(np.mean([_pct(m[BRKGA][s], m[FLAGSHIP][s]) for s in seeds]))
            vs_l.append(np.mean([_pct(m[LOCAL][s], m[FLAGSHIP][s]) for s in seeds]))
            mean_f = np.mean([m[FLAGSHIP][s] for s in seeds])
            better += mean_f < np.mean([m[BRKGA][s] for s in seeds])
            no_worse += mean_f <= np.mean([m[LOCAL][s] for s in seeds])
            lb = _graph_bound(key[1], d, bounds, paths)
            best = min(np.mean(list(v.values())) for v in m.values())
            for base in (BRKGA, LOCAL, FLAGSHIP):
                room[(base, "bound")].append(np.mean([_pct(m[base][s], lb) for s in seeds]))
                room[(base, "best")].append(np.mean([_pct(m[base][s], best) for s in seeds]))
            for s in seeds:
                gaps.append((m[FLAGSHIP][s] - lb) / lb * 100 if lb else 0.0)
                proven += m[FLAGSHIP][s] <= lb
                runs += 1
            if d == 1 and ("exact", key[1]) in bounds:
                exact_n += 1
                exact_ok += max(m[FLAGSHIP][s] for s in seeds) <= 1.005 * bounds[("exact", key[1])]
        n = len(vs_b)
        lines.append(f"| {dataset} | {d} | {n} | {np.mean(vs_b):+.2f} | {better}/{n} | {np.mean(vs_l):+.2f} | "
                     f"{no_worse}/{n} | {np.mean(gaps):.2f} | {proven}/{runs} | "
                     + (f"{exact_ok}/{exact_n} |" if d == 1 else "- |")
                     + "".join(f" {np.mean(room[(b, 'bound')]):+.2f} / {np.mean(room[(b, 'best')]):+.2f} |"
                               for b in (BRKGA, LOCAL, FLAGSHIP)))
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=os.path.join("experiments", "results", "flagship-no60"))
    ap.add_argument("--cache", default=os.path.join("experiments", "cache", "flagship"))
    ap.add_argument("--also", nargs="+", default=[], metavar="RESULTS",
                    help="other experiments' results folders: their peaks count toward the best known, and a "
                         "method of the same name adds its seeds (e.g. the flagship_all_s34 config's)")
    ap.add_argument("--out", default=None, help="the table's file (default: targets.md beside the results)")
    args = ap.parse_args(argv)
    lines = table(args.results, args.cache, args.also)
    print("\n".join(lines))
    out = args.out or os.path.join(args.results, "targets.md")
    command = " ".join(["python -m experiments.flagship_targets", *(sys.argv[1:] if argv is None else argv)])
    bounds = ("" if os.path.isdir(args.cache) else
              f"Solver bounds: none ({args.cache} is not here): the bound is each graph's own "
              "(`Graph.lower_bound`), weaker than with exact's and CP-SAT's, so the gaps and the "
              "headroom at the bound are overstated.\n\n")
    if bounds:
        print(bounds.strip(), file=sys.stderr)
    with atomic_text(out) as f:
        f.write(f"# Issue 10's targets\n\nCommand: `{command}`\n\n{bounds}" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
