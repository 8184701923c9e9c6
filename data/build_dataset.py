"""Trace the model zoo to XLA HLO and import each program as a `regal-graph/1` file.

    python -m data.build_dataset --out data/graphs [--only FAMILY ...] [--jobs N]

For every variant in `data.models.MODELS`, each mode (`fwd`: inference; `train`: one step of
`value_and_grad` + optax update) at the variant's batch sizes is lowered with `jax.jit` on
abstract arguments (no weights are materialised) and imported at two stages:

    pre: jax.jit(f).lower(*args).compiler_ir("hlo").as_hlo_text()   (before XLA passes)
    opt: lowered.compile().as_text()                                (XLA:CPU, fused, scheduled)

with `regal.hlo.parse_hlo`. Graphs with fewer than `MIN_NODES` or more than `MAX_NODES` nodes
are dropped. Each kept graph is written to `<out>/real/<name>.json.gz`, with
`name = <variant>_b<batch>_<mode>_<stage>` (e.g. `resnet50_b32_train_pre`) and meta fields
model, family, variant, batch, mode, stage, split. A config that fails is logged and skipped.
Finally `data/manifest.json` lists every real graph (see `write_manifest`).

Tracing always runs on the CPU backend (`JAX_PLATFORMS=cpu`): the `opt` graphs are what
XLA:CPU of the installed jax/jaxlib makes, which keeps the build deterministic on one machine.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
from typing import NamedTuple

__all__ = ["FAMILY_SPLIT", "MIN_NODES", "MAX_NODES", "Config", "configs", "build_config", "run_configs", "write_manifest", "main"]

MIN_NODES, MAX_NODES = 100, 20_000

#: Split of every family: test families never appear in train or valid.
FAMILY_SPLIT = {
    "resnet": "train", "vgg": "train", "densenet": "train", "mlp": "train", "lstm": "train",
    "transformer_enc": "train", "wavenet": "train", "vae": "train",
    "mobilenet": "valid", "gru": "valid", "transformer_dec": "valid", "mlp_mixer": "valid",
    "unet": "test", "vqvae": "test", "vit": "test", "gnn": "test",
}
SPLITS = ("train", "valid", "test")
STAGES = ("pre", "opt")
MANIFEST_FORMAT = "regal-manifest/1"


class Config(NamedTuple):
    """One traced program: a variant, a batch size and a mode (it yields one graph per stage)."""

    variant: str
    family: str
    batch: int
    mode: str

    @property
    def model(self) -> str:
        return f"{self.variant}_b{self.batch}_{self.mode}"

    def graph_name(self, stage: str) -> str:
        return f"{self.model}_{stage}"


def configs(only: set[str] | None = None) -> list[Config]:
    """Every config of the zoo (restricted to families in `only`), in registry order."""
    from data.models import MODELS
    out = []
    for spec in MODELS.values():
        if only and spec.family not in only:
            continue
        for mode, batches in (("fwd", spec.fwd_batches), ("train", spec.train_batches)):
            out.extend(Config(spec.name, spec.family, b, mode) for b in batches)
    return out


def build_config(cfg: Config, out_dir: str) -> list[dict]:
    """Trace one config, import both stages, save those in range; one record per stage.

    A record is {"name", "status": "kept" | "too small" | "too large" | "failed", ...}; kept
    records carry the manifest fields. Exceptions are caught per stage and become "failed".
    """
    import jax
    from regal.hlo import parse_hlo
    from data._files import save_graph
    from data.models import MODELS, abstract_args, fwd_fn, train_fn

    spec = MODELS[cfg.variant]
    records = []
    try:
        t0 = time.perf_counter()
        args = abstract_args(spec, cfg.batch, cfg.mode)
        fn = fwd_fn(spec) if cfg.mode == "fwd" else train_fn(spec)
        lowered = jax.jit(fn).lower(*args)
        texts = {"pre": lowered.compiler_ir("hlo").as_hlo_text()}
        texts["opt"] = lowered.compile().as_text()
        trace_s = time.perf_counter() - t0
        num_params = int(sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(args[0])))
    except Exception as e:  # a model that does not trace or compile: skip it, keep building
        msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        return [{"name": cfg.graph_name(s), "status": "failed", "error": msg} for s in STAGES]
    for stage in STAGES:
        name = cfg.graph_name(stage)
        try:
            g = parse_hlo(texts[stage], name=name, source=f"{name}.hlo")
        except Exception as e:
            records.append({"name": name, "status": "failed", "error": f"{type(e).__name__}: {e}"[:300]})
            continue
        if not MIN_NODES <= g.num_nodes <= MAX_NODES:
            records.append({"name": name, "status": "too small" if g.num_nodes < MIN_NODES else "too large",
                            "nodes": g.num_nodes})
            continue
        split = FAMILY_SPLIT.get(cfg.family, "train")
        g.meta.update(model=cfg.model, family=cfg.family, variant=cfg.variant, batch=cfg.batch,
                      mode=cfg.mode, stage=stage, split=split, description=spec.notes,
                      num_parameters=num_params, jax_version=jax.__version__)
        rel = f"real/{name}.json.gz"
        path = os.path.join(out_dir, rel)
        file_bytes = save_graph(g, path)
        records.append({"name": name, "status": "kept", "path": rel, "family": cfg.family,
                        "variant": cfg.variant, "batch": cfg.batch, "mode": cfg.mode, "stage": stage,
                        "split": split, "nodes": g.num_nodes, "edges": g.num_data_edges,
                        "control_edges": g.num_control_edges, "total_bytes": int(g.bytes.sum()),
                        "file_bytes": file_bytes, "trace_s": round(trace_s, 1)})
    return records


def _failed(cfg: Config, error: str) -> list[dict]:
    return [{"name": cfg.graph_name(s), "status": "failed", "error": error[:300]} for s in STAGES]


def _child(cfg: Config, out_dir: str, conn) -> None:
    try:
        recs = build_config(cfg, out_dir)
    except BaseException as e:  # never let one config take the build down
        recs = _failed(cfg, f"{type(e).__name__}: {e}")
    conn.send(recs)
    conn.close()


def run_configs(todo: list[Config], out_dir: str, jobs: int, timeout_s: float):
    """Build each config in its own spawned process, `jobs` at a time; yield (cfg, records).

    A fresh process per config isolates crashes and timeouts (a config that dies or runs past
    `timeout_s` is recorded as failed) and returns all compiler memory after each config.
    """
    from multiprocessing.connection import wait
    ctx = mp.get_context("spawn")
    pending = list(todo)
    running: dict = {}  # receiving end -> (process, cfg, start time)
    while pending or running:
        while pending and len(running) < jobs:
            cfg = pending.pop(0)
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(cfg, out_dir, send), daemon=True)
            proc.start()
            send.close()
            running[recv] = (proc, cfg, time.monotonic())
        for recv in wait(list(running), timeout=5.0):
            proc, cfg, _ = running.pop(recv)
            try:
                recs = recv.recv()
            except EOFError:  # the child died without answering
                proc.join()
                recs = _failed(cfg, f"worker exited with code {proc.exitcode}")
            proc.join()
            recv.close()
            yield cfg, recs
        now = time.monotonic()
        for recv, (proc, cfg, t0) in list(running.items()):
            if now - t0 > timeout_s:
                proc.kill()
                proc.join()
                recv.close()
                del running[recv]
                yield cfg, _failed(cfg, f"timed out after {timeout_s:.0f}s")


_MANIFEST_KEYS = ("path", "family", "variant", "batch", "mode", "stage", "split", "nodes", "edges",
                  "control_edges", "total_bytes", "file_bytes")


def write_manifest(path: str, graphs: dict[str, dict], root: str = "graphs",
                   shipped: set[str] | None = None) -> dict:
    """Write `regal-manifest/1`: splits (sorted names), family -> split, and one entry per graph.

    `shipped` names the graphs whose files are kept in git (default: all); the rest are
    regenerated by the build command.
    """
    entries = {}
    for name in sorted(graphs):
        rec = {k: graphs[name][k] for k in _MANIFEST_KEYS if k in graphs[name]}
        rec["shipped"] = shipped is None or name in shipped
        entries[name] = rec
    families = sorted({r["family"] for r in entries.values()})
    doc = {
        "format": MANIFEST_FORMAT,
        "description": "Real computation graphs traced from data/models.py; see data/README.md.",
        "root": root,  # each entry's path is relative to <folder of this file>/<root>
        "node_range": [MIN_NODES, MAX_NODES],
        "splits": {s: [n for n in entries if entries[n]["split"] == s] for s in SPLITS},
        "families": {f: FAMILY_SPLIT.get(f, "train") for f in sorted(set(FAMILY_SPLIT) | set(families))},
        "graphs": entries,
    }
    from data._files import write_json
    write_json(doc, path)
    return doc


def _expected_cost(cfg: Config) -> float:
    """Rough relative compile time, to start the slow configs first (load balance only)."""
    heavy = {"densenet": 4, "lstm": 3, "gru": 3, "transformer_dec": 3, "unet": 2, "transformer_enc": 2}
    return (4.0 if cfg.mode == "train" else 1.0) * heavy.get(cfg.family, 1) * (1 + len(cfg.variant) / 100)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m data.build_dataset", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="data/graphs", help="output folder (graphs go to OUT/real/)")
    p.add_argument("--manifest", default=None, help="manifest path (default: OUT/../manifest.json)")
    p.add_argument("--only", action="append", default=None, metavar="FAMILY",
                   help="build only this family (repeatable); the manifest keeps the other entries")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per config before it is skipped")
    a = p.parse_args(argv)

    os.environ["JAX_PLATFORMS"] = "cpu"  # inherited by the spawned workers before they import jax
    from data.models import FAMILIES
    only = set(a.only) if a.only else None
    if only and only - set(FAMILIES):
        p.error(f"unknown family {sorted(only - set(FAMILIES))}; known: {', '.join(FAMILIES)}")
    out_dir = a.out
    os.makedirs(os.path.join(out_dir, "real"), exist_ok=True)
    manifest_path = a.manifest or os.path.join(os.path.dirname(os.path.abspath(out_dir)), "manifest.json")

    todo = sorted(configs(only), key=_expected_cost, reverse=True)
    print(f"building {len(todo)} configs ({2 * len(todo)} candidate graphs) with {a.jobs} jobs", flush=True)
    t0 = time.perf_counter()
    results: list[dict] = []
    for i, (cfg, recs) in enumerate(run_configs(todo, out_dir, max(1, a.jobs), a.timeout), 1):
        results.extend(recs)
        line = ", ".join(f"{r['name'].rsplit('_', 1)[1]} {r['status']}"
                         + (f" ({r['nodes']} nodes)" if "nodes" in r else "")
                         + (f": {r['error']}" if "error" in r else "") for r in recs)
        print(f"[{i}/{len(todo)} {time.perf_counter() - t0:5.0f}s] {cfg.model}: {line}", flush=True)

    kept = {r["name"]: r for r in results if r["status"] == "kept"}
    built_names = {r["name"] for r in results}
    graphs: dict[str, dict] = {}
    if only and os.path.exists(manifest_path):  # keep the other families' entries
        with open(manifest_path, encoding="utf-8") as f:
            old = json.load(f).get("graphs", {})
        graphs = {n: r for n, r in old.items() if r.get("family") not in only and n not in built_names}
    graphs.update(kept)
    # Drop files the manifest no longer lists (out of range now, or from an older zoo).
    for fname in sorted(os.listdir(os.path.join(out_dir, "real"))):
        name = fname.split(".")[0]
        if fname.endswith(".json.gz") and name not in graphs and (not only or name in built_names):
            os.remove(os.path.join(out_dir, "real", fname))
    root = os.path.relpath(os.path.abspath(out_dir), os.path.dirname(os.path.abspath(manifest_path)))
    write_manifest(manifest_path, graphs, root=root)
    failed = [r for r in results if r["status"] == "failed"]
    print(f"kept {len(kept)} graphs, {len(failed)} failed, "
          f"{sum(r['status'] in ('too small', 'too large') for r in results)} out of range; "
          f"manifest {manifest_path} lists {len(graphs)}; {time.perf_counter() - t0:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
