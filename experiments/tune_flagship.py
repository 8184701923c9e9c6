"""One of the flagship's settings tried on valid splits against local search, from the command line.

    python -m experiments.tune_flagship --name anneal-tuning \\
        --graphs data/manifest_synthetic.json:valid:16 data/manifest.json:valid:12 \\
        --devices 1 2 4 --seeds 0 1 --set anneal_temperature 0 0.01 0.02 0.04 0.08

Writes a tune config (experiments/configs/tune/<name>.json; `experiments.tune` says what it
holds and what the run reports) and runs it with the one runner (`experiments.run`), as
`python -m experiments.run experiments/configs/tune/<name>.json` would.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from experiments.run import run
from experiments.runner import ROOT, flagship_config
from experiments.tune import CACHE
from regal._io import atomic_text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True, help="the config's and its results folder's name")
    ap.add_argument("--graphs", nargs="+", required=True, help="MANIFEST:SPLIT:LIMIT ...")
    ap.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--set", nargs="+", required=True, metavar=("NAME", "VALUE"),
                    help="a field of regal.FlagshipConfig and the values to try")
    ap.add_argument("--fix", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="another field of regal.FlagshipConfig held at VALUE in every flagship run")
    ap.add_argument("--min-nodes", type=int, default=0, help="only the graphs with at least this many nodes")
    ap.add_argument("--budget", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=None, help="local Dask worker processes (default: cores)")
    ap.add_argument("--scheduler", default=None, help="tcp://HOST:PORT of an existing Dask scheduler")
    args = ap.parse_args(argv)
    name, values = args.set[0], [float(v) for v in args.set[1:]]
    fixed = {other: float(v) for other, v in args.fix}
    try:
        flagship_config([*fixed.items(), (name, values[0])])
    except KeyError as e:
        ap.error(f"no setting {e.args[0]} (a field of regal.FlagshipConfig)")
    command = "python -m experiments.tune_flagship " + " ".join(sys.argv[1:] if argv is None else argv)
    cfg = {"name": args.name, "kind": "tune", "cache": CACHE, "description": f"Written by `{command}`.",
           "graphs": args.graphs, "min_nodes": args.min_nodes, "devices": args.devices, "seeds": args.seeds,
           "budget": args.budget, "set": {name: values}, "fix": fixed}
    path = os.path.join(ROOT, "experiments", "configs", "tune", f"{args.name}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_text(path) as f:
        json.dump(cfg, f, indent=1)
    out = run(path, args.scheduler, args.workers)
    print("\n".join(out["table"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
