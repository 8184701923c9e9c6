"""Choose one of the flagship's settings on valid splits, and check it on sources it was not chosen on.

    python -m experiments.tune_flagship --name anneal-tuning \\
        --graphs data/manifest_synthetic.json:valid:16 data/manifest.json:valid:12 \\
        --devices 1 2 4 --seeds 0 1 --set anneal_temperature 0 0.01 0.02 0.04 0.08

For each value of a field of `regal.FlagshipConfig` (`--set NAME V1 V2 ...`; `--fix NAME V`
holds another at V), the flagship (`regal.optimize(..., config=FlagshipConfig()._replace(NAME=V))`,
5,000 evaluations) runs on every graph, device count and seed, beside the
local-search baseline on the same seeds; the table gives, per source (the graph file's folder)
and d, the mean % lower peak than local search and on how many graphs the flagship's mean over
seeds is no worse. A graph spec is `MANIFEST:SPLIT:LIMIT` (a corpus manifest's split is
`SOURCE:SPLIT`; LIMIT graphs evenly spaced over the split, 0 for all); `--min-nodes` keeps the
large ones. `--reuse FILE [NAME=VALUE]` takes the local-search cells of an earlier run's raw
peaks (FILE.json) instead of running them again and, with NAME=VALUE, that run's flagship cells
at NAME=VALUE for the values of `--set` equal to the setting's present default (valid only
while the default flagship and the baseline are unchanged since that run). Each value after the
first is also compared with the first run by run (paired: same graph, d and seed), with a 95 %
bootstrap interval, so that a difference of means within the seeds' noise reads as such;
`--table` prints the table again from an earlier run's raw peaks. Runs on a process pool
(`--workers`); writes `experiments/results/flagship-tuning/<name>.md` and the raw peaks beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from multiprocessing import Pool

import numpy as np

from regal._io import atomic_text

RESULTS = os.path.join("experiments", "results", "flagship-tuning")


def graph_paths(spec: str) -> list[str]:
    """The graph files of MANIFEST:SPLIT:LIMIT (LIMIT evenly spaced, 0: all)."""
    from regal.dataset import split_paths
    manifest, *split, limit = spec.split(":")
    paths = split_paths(":".join(split), manifest)
    if int(limit) and len(paths) > int(limit):
        paths = [paths[i] for i in np.linspace(0, len(paths) - 1, int(limit)).round().astype(int)]
    return paths


def config_with(settings) -> "regal.FlagshipConfig":
    """The default FlagshipConfig with each (NAME, VALUE) of `settings` set, VALUE cast to the
    field's type (KeyError naming an unknown field)."""
    import regal
    default = regal.FlagshipConfig()
    fields = default._asdict()
    changes = {}
    for name, value in settings:
        if name not in fields or name == "brkga":
            raise KeyError(name)
        kind = type(fields[name])
        changes[name] = kind(int(value)) if kind in (bool, int) else kind(value)
    return default._replace(**changes)


def _run(job: tuple) -> tuple:
    """One cell: (path, d, seed, setting value or None for local search) -> peak bytes."""
    path, devices, seed, name, value, budget, fixed = job
    import regal
    import regal.methods
    graph = regal.load(path)
    if value is None:
        return job[:5], regal.methods.solve("local-search", graph, devices, seed=seed, budget=budget).peak_bytes
    config = config_with([*fixed, (name, value)])
    return job[:5], regal.optimize(graph, devices, budget=budget, seed=seed, config=config).peak_bytes


def _key(cell: tuple) -> str:
    """A cell (path, d, seed[, NAME, value]) as the raw peaks file names it: PATH|D|SEED|..."""
    return "|".join([os.path.relpath(os.path.normpath(cell[0])), *map(str, cell[1:])])


def _reused(reuse: list, jobs: list, name: str, default: float) -> dict:
    """The cells of `jobs` an earlier run's raw peaks hold (`--reuse FILE [NAME=VALUE]`)."""
    earlier = json.load(open(reuse[0]))
    old = reuse[1].split("=") if len(reuse) > 1 else None
    local = {k.rsplit("|", 2)[0]: v for k, v in earlier.items() if k.endswith("|None")}  # PATH|D|SEED
    out = {}
    for job in jobs:
        value = job[4]
        if value is None:
            hit = local.get(_key(job[:3]))
        elif old is not None and value == default:
            hit = earlier.get(_key((*job[:3], old[0], float(old[1]))))
        else:
            hit = None
        if hit is not None:
            out[job[:5]] = hit
    return out


def table(paths, devices, seeds, name, values, peaks) -> list[str]:
    sources = sorted({os.path.basename(os.path.dirname(p)) for p in paths})
    lines = [f"| d | {name} | " + " | ".join(f"{s}: % vs local search (graphs no worse)" for s in sources)
             + f" | all | paired vs {values[0]}: mean (95 % CI), runs better / worse |",
             "|---:|---:|" + "---:|" * (len(sources) + 2)]
    for d in devices:
        for value in values:
            per: dict = {s: [] for s in sources}
            for p in paths:
                ls = statistics.mean(peaks[(p, d, s, name, None)] for s in seeds)
                fl = statistics.mean(peaks[(p, d, s, name, value)] for s in seeds)
                per[os.path.basename(os.path.dirname(p))].append(100 * (ls - fl) / ls)
            cells = [f"{statistics.mean(x):+.2f} ({sum(y >= -1e-9 for y in x)}/{len(x)})" for x in per.values()]
            everything = [y for x in per.values() for y in x]
            lines.append(f"| {d} | {value} | " + " | ".join(cells) + f" | {statistics.mean(everything):+.2f} | "
                         + (_paired(paths, d, seeds, name, values[0], value, peaks) if value != values[0] else "-")
                         + " |")
    return lines


def _paired(paths, d, seeds, name, base, value, peaks) -> str:
    """The mean over (graph, seed) runs of the % of local search's peak by which `value` is below
    `base`, its 95 % bootstrap interval (2,000 resamples of the runs, seed 0), and the runs where
    it is lower / higher: whether a difference of means is more than the seeds' noise."""
    diffs = np.array([100 * (peaks[(p, d, s, name, base)] - peaks[(p, d, s, name, value)])
                      / peaks[(p, d, s, name, None)] for p in paths for s in seeds])
    rng = np.random.default_rng(0)
    boots = [rng.choice(diffs, diffs.size).mean() for _ in range(2000)]
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return f"{diffs.mean():+.2f} ({lo:+.2f}, {hi:+.2f}), {(diffs > 0).sum()} / {(diffs < 0).sum()}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True, help="the results file's name")
    ap.add_argument("--graphs", nargs="+", required=True, help="MANIFEST:SPLIT:LIMIT ...")
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--set", nargs="+", required=True, metavar=("NAME", "VALUE"),
                    help="a field of regal.FlagshipConfig and the values to try")
    ap.add_argument("--fix", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="another field of regal.FlagshipConfig held at VALUE in every flagship run")
    ap.add_argument("--min-nodes", type=int, default=0, help="only the graphs with at least this many nodes")
    ap.add_argument("--budget", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reuse", nargs="+", metavar=("FILE", "NAME=VALUE"),
                    help="an earlier run's raw peaks: its local-search cells, and its flagship cells at NAME=VALUE "
                         "for the present default")
    ap.add_argument("--table", action="store_true",
                    help="no runs: the table again from <name>.json (written by an earlier run of the same arguments)")
    args = ap.parse_args(argv)
    name, values = args.set[0], [float(v) for v in args.set[1:]]
    fixed = tuple((other, float(v)) for other, v in args.fix)
    try:
        config_with([*fixed, (name, values[0])])
    except KeyError as e:
        ap.error(f"no setting {e.args[0]} (a field of regal.FlagshipConfig)")
    paths = [p for spec in args.graphs for p in graph_paths(spec)]
    if args.min_nodes:
        import regal
        paths = [p for p in paths if regal.load(p).num_nodes >= args.min_nodes]
    jobs = [(p, d, s, name, v, args.budget, fixed) for p in paths for d in args.devices for s in args.seeds
            for v in [None, *values]]
    if args.table:
        raw = json.load(open(os.path.join(RESULTS, f"{args.name}.json")))
        peaks = {j[:5]: raw[_key(j[:5])] for j in jobs}
        print("\n".join(table(paths, args.devices, args.seeds, name, values, peaks)))
        return 0
    peaks = _reused(args.reuse, jobs, name, float(getattr(config_with(()), name))) if args.reuse else {}
    with Pool(args.workers) as pool:
        peaks.update(pool.imap_unordered(_run, [j for j in jobs if j[:5] not in peaks], chunksize=1))
    lines = table(paths, args.devices, args.seeds, name, values, peaks)
    print("\n".join(lines))
    os.makedirs(RESULTS, exist_ok=True)
    command = "python -m experiments.tune_flagship " + " ".join(sys.argv[1:] if argv is None else argv)
    with atomic_text(os.path.join(RESULTS, f"{args.name}.md")) as f:
        f.write(f"# {args.name}\n\nCommand: `{command}`\n\n{len(paths)} graphs, {args.budget:,} evaluations, "
                f"seeds {', '.join(map(str, args.seeds))}.\n\n" + "\n".join(lines) + "\n")
    with atomic_text(os.path.join(RESULTS, f"{args.name}.json")) as f:
        json.dump({_key(k): v for k, v in sorted(peaks.items(), key=lambda kv: _key(kv[0]))}, f, indent=0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
