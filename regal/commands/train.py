"""`regal train`: a REGAL policy trained by imitation, then REINFORCE on Dask."""

from __future__ import annotations

import os
import sys

import click

from regal import _args
from regal.commands._common import (BUDGET, SEED, Count, Fraction, OutputPath, exit_stopped, friendly_errors, command_deadline,
                              skip_flax_interop)


_RESUME_OPTIONS = {"devices": "--devices", "max_devices": "--devices", "samples": "--samples", "budget": "--budget",
                   "learning_rate": "--lr", "entropy_coef": "--entropy", "imitation_steps": "--imitate",
                   "seed": "--seed", "kind": "--kind", "features": "--features", "placement": "--heads", "scheduling": "--heads",
                   "elite": "--heads", "objective": "--objective", "transfer_priority": "--objective",
                   "train_graphs": "--manifest, --split, --synthetic or --max-nodes",
                   "valid_graphs": "--manifest, --valid-split, --max-valid or --max-nodes"}


@click.command("train", short_help="train a REGAL policy (imitation, then REINFORCE on Dask)", help=(
    "Train a REGAL policy on a data split: imitation of the structural teacher, then REINFORCE; "
    "the defaults are the recipe of the v1 policy REGAL's Tables 1 and 3 were made with "
    "(experiments/policies/default-v1.json), except --features (it reads v1; new policies read the "
    "source-invariant v2); the shipped default (regal/policy/default.json) is another recipe. BRKGA runs "
    "fan out over Dask (a local cluster of --workers processes, or an existing one with --scheduler). Resumes from OUT's "
    "checkpoint unless --fresh. Writes OUT/best.npz, OUT/train.csv, OUT/valid.csv, OUT/curves.png. "
    "--head start|moves trains the learned policy's other heads instead (regal/policy/learned.npz: "
    "docs/learned-priors.md): the start choice (OUT/start.npz), then the move head on it (OUT/learned.npz), "
    "each on flagship runs it collects (cached in OUT); their defaults are learned.json's recipe."))
@click.option("--head", type=click.Choice(["start", "moves"]), default=None,
              help="train the start-choice head, or the move head on a start policy, instead of the Beta heads")
@click.option("--manifest", default=None, help="data set manifest (default: the shipped data/manifest.json)")
@click.option("--split", default="train", show_default=True, help="training split (real data set)")
@click.option("--valid-split", default="valid", show_default=True)
@click.option("--synthetic/--no-synthetic", default=False, show_default=True,
              help="also train on the synthetic data set's training split")
@click.option("--max-nodes", default=2000, show_default=True, type=Count(1, _args.MAX_COUNT), help="skip larger training graphs")
@click.option("--max-valid", default=12, show_default=True, type=Count(0, _args.MAX_COUNT), help="validation graphs used")
@click.option("--devices", "-d", multiple=True, type=click.IntRange(1, 8), default=(1, 2), show_default=True,
              help="device counts, cycled over steps (repeat the option; --head: 2, 4, each cell at each)")
@click.option("--steps", default=400, show_default=True, type=Count(1, _args.MAX_COUNT),
              help="training steps (--head moves: REINFORCE steps, default 4)")
@click.option("--samples", default=6, show_default=True, type=Count(2, _args.MAX_POPULATION),
              help="samples per step (--head moves: flagship runs per REINFORCE step, default 12)")
@click.option("--budget", "-n", default=5000, show_default=True, type=BUDGET,
              help="evaluations of each BRKGA run (each sample's and the plain reference's; --head: of each flagship run, "
                   "default 1000)")
@click.option("--lr", "learning_rate", default=1e-4, show_default=True, type=Fraction(0, low_open=True),
              help="Adam's learning rate (--head start: 3e-3; --head moves: REINFORCE's, 1e-3)")
@click.option("--entropy", "entropy_coef", default=0.0005, show_default=True, type=Fraction(0),
              help="entropy bonus (--head start: 0.01)")
@click.option("--imitate", "imitation_steps", default=400, show_default=True, type=Count(0, _args.MAX_COUNT),
              help="warm-start steps imitating the structural teacher (regal.policy.teacher; --head moves: imitating the "
                   "no-policy flagship's improving picks, default 600)")
@click.option("--kind", type=click.Choice(["gnn", "gas"]), default="gnn", show_default=True)
@click.option("--objective", type=click.Choice(["memory", "runtime"]), default="memory", show_default=True,
              help="the reward: peak memory, or makespan (BRKGA on the timed chromosome, no memory limit, the "
                   "default device model; the policy gets REGAL's transfer-priority head)")
@click.option("--heads", default="placement,scheduling", show_default=True,
              help="active heads: any of placement, scheduling, elite")
@click.option("--features", type=click.Choice(["v1", "v2"]), default="v2", show_default=True,
              help="node features: v2 is source-invariant (regal.policy.features), v1 REGAL's original")
@click.option("--workers", default=None, type=Count(1, _args.MAX_WORKERS), help="local Dask workers (default: cores; --head: 1, in this process)")
@click.option("--scheduler", default=None, help="tcp://HOST:PORT of an existing Dask scheduler")
@click.option("--seed", "-s", default=0, show_default=True, type=SEED,
              help="the network's initialization, the order of the graphs and the BRKGA seeds drawn")
@click.option("--fresh", is_flag=True, help="ignore an existing checkpoint in OUT (--head: the collected runs)")
@click.option("--per-source", default=30, show_default=True, type=Count(1, _args.MAX_COUNT),
              help="--head: train graphs per corpus source (valid: a third)")
@click.option("--graph", "graphs", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="--head: train on these graph files instead of the corpus (repeat the option)")
@click.option("--collect-seeds", default="0,1", show_default=True,
              help="--head: seeds of the flagship runs that make the data, comma-separated")
@click.option("--epochs", default=16, show_default=True, type=Count(0, _args.MAX_COUNT),
              help="--head start: passes over the training cells")
@click.option("--start", "start_policy", default=None,
              help="--head moves: the start policy the move head sits on (default OUT/start.npz)")
@click.option("--mix", default=0.5, show_default=True, type=Fraction(0, 1),
              help="--head moves: share of the climb's picks the head makes")
@click.option("-o", "--output", "out_dir", default=None, type=OutputPath(file_okay=False, dir_okay=True),
              help="OUT: the directory to write (and resume from); one run at a time")
@click.option("--out", "out_alias", default=None, type=OutputPath(file_okay=False, dir_okay=True), hidden=True)  # the old spelling
@friendly_errors
def train_cmd(head, manifest, split, valid_split, synthetic, max_nodes, max_valid, devices, steps, samples,
              budget, learning_rate, entropy_coef, imitation_steps, kind, objective, heads, features, workers,
              scheduler, seed, fresh, per_source, graphs, collect_seeds, epochs, start_policy, mix, out_dir, out_alias):
    if out_dir and out_alias and out_dir != out_alias:
        raise click.UsageError("give the directory once: -o/--output (--out is its old spelling)")
    out_dir = out_dir or out_alias
    if not out_dir:
        raise click.UsageError("Missing option '-o' / '--output' (the directory to write).")
    given = _explicit(click.get_current_context())
    if head is None:
        wrong = sorted(given & set(_HEAD_ONLY))
        if wrong:
            raise click.UsageError(f"{_HEAD_ONLY[wrong[0]]} applies to --head start|moves only")
        return _train_beta(manifest, split, valid_split, synthetic, max_nodes, max_valid, devices, steps, samples,
                           budget, learning_rate, entropy_coef, imitation_steps, kind, objective, heads, features,
                           workers, scheduler, seed, fresh, out_dir)
    wrong = sorted(given & set(_BETA_ONLY[head]))
    if wrong:
        raise click.UsageError(f"{_BETA_ONLY[head][wrong[0]]} does not apply to --head {head}")
    recipe = _HEAD_DEFAULTS[head]
    pick = {name: (value if name in given else recipe.get(name, value)) for name, value in
            dict(devices=devices, steps=steps, samples=samples, budget=budget, learning_rate=learning_rate,
                 entropy_coef=entropy_coef, imitation_steps=imitation_steps).items()}
    try:
        seeds = tuple(sorted({int(x) for x in collect_seeds.split(",") if x.strip()}))
    except ValueError:
        seeds = ()
    if not seeds or min(seeds) < 0 or max(seeds) > _args.MAX_SEED:
        raise click.BadParameter(f"{collect_seeds!r}: give seeds in {_args.range_text(0, _args.MAX_SEED)}, "
                                 "comma-separated", param_hint="--collect-seeds")
    from regal.training.heads import train_head
    train_head(head, out_dir, manifest=manifest, graphs=graphs, per_source=per_source, seeds=seeds,
               epochs=epochs, start_policy=start_policy, mix=mix, seed=seed, fresh=fresh, workers=workers or 1,
               log=click.echo, **pick)


#: Options of --head only, and of the Beta heads only (by parameter name: the option named in errors)
_HEAD_ONLY = {"per_source": "--per-source", "graphs": "--graph", "collect_seeds": "--collect-seeds",
              "epochs": "--epochs", "start_policy": "--start", "mix": "--mix"}
_BETA_SHARED = {"split": "--split", "valid_split": "--valid-split", "synthetic": "--synthetic", "max_nodes": "--max-nodes",
                "max_valid": "--max-valid", "kind": "--kind", "objective": "--objective", "heads": "--heads",
                "features": "--features", "scheduler": "--scheduler"}
_BETA_ONLY = {"start": {**_BETA_SHARED, "steps": "--steps", "samples": "--samples", "imitation_steps": "--imitate",
                        "start_policy": "--start", "mix": "--mix"},
              "moves": {**_BETA_SHARED, "epochs": "--epochs", "entropy_coef": "--entropy"}}
#: --head's defaults where they differ from the Beta heads' (regal/policy/learned.json's recipe)
_HEAD_DEFAULTS = {"start": {"devices": (2, 4), "budget": 1000, "learning_rate": 3e-3, "entropy_coef": 0.01},
                  "moves": {"devices": (2, 4), "budget": 1000, "learning_rate": 1e-3, "steps": 4, "samples": 12,
                            "imitation_steps": 600}}


def _explicit(ctx) -> set:
    """Names of the parameters given on the command line (or by the environment)."""
    from click.core import ParameterSource
    return {name for name in ctx.params
            if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP, None)}


def _train_beta(manifest, split, valid_split, synthetic, max_nodes, max_valid, devices, steps, samples,
                budget, learning_rate, entropy_coef, imitation_steps, kind, objective, heads, features, workers,
                scheduler, seed, fresh, out_dir):
    from regal.dataset import split_paths, spread
    from regal.parallel import dask_client
    from regal.policy.network import PolicyConfig
    from regal.training.reinforce import CheckpointError, TrainConfig, check_resume, run_setup, train
    active = {h.strip() for h in heads.split(",") if h.strip()}
    unknown = active - {"placement", "scheduling", "elite"}
    if unknown or not active:
        raise click.BadParameter(f"unknown or no heads: {sorted(unknown) or heads!r}", param_hint="--heads")
    train_paths = split_paths(split, manifest=manifest, max_nodes=max_nodes)
    if synthetic:
        train_paths += split_paths(split, manifest=manifest, synthetic=True)
    valid_paths = spread(split_paths(valid_split, manifest=manifest, max_nodes=max_nodes), max_valid, manifest)
    if not train_paths:
        raise click.ClickException(f"no training graphs in split {split!r}")
    pc = PolicyConfig(kind=kind, placement="placement" in active, scheduling="scheduling" in active,
                      elite="elite" in active, max_devices=max(4, max(devices)), features=features,
                      transfer_priority=objective == "runtime")
    tc = TrainConfig(devices=tuple(devices), steps=steps, samples=samples, budget=budget,
                     learning_rate=learning_rate, entropy_coef=entropy_coef, seed=seed,
                     imitation_steps=imitation_steps, objective=objective)
    from regal._io import directory_lock
    from regal._stop import Stopped, interruptible, stop_on_signals
    deadline = command_deadline()
    try:  # one run per directory, held from before the cluster starts; a signal writes the checkpoint (exit 3)
        with stop_on_signals(deadline), directory_lock(out_dir, what="another regal train"):
            if not fresh:  # a checkpoint of another setting fails now, not once a cluster has started
                check_resume(out_dir, run_setup(tc, pc, train_paths, valid_paths))
            click.echo(f"training a {kind} policy on {len(train_paths)} graphs, validating on {len(valid_paths)}, "
                       f"devices {list(devices)}, heads {sorted(active)}")
            interruptible(_start_jax, deadline)  # seconds, before the cluster: a stop needs no cluster closed
            # a stop ends the process without closing the cluster (its workers end with it); the
            # multiprocessing resource tracker, started with the cluster, then cleans up its
            # semaphores without a warning (it takes this process's -W options)
            sys.warnoptions.append("ignore:resource_tracker:UserWarning")
            with dask_client(scheduler, workers) as client:  # a stop exits inside: its workers end with us
                try:
                    pol = train(train_paths, valid_paths, out_dir, pc, tc, client=client, resume=not fresh,
                                log=click.echo, deadline=deadline)
                except Stopped as e:
                    _stopped_before_training(e, deadline)
                if "stopped" in pol.meta:
                    click.echo(f"stopped ({pol.meta['stopped']}) at step {pol.meta['step']}: the same command "
                               f"resumes from {os.path.join(out_dir, 'checkpoint.npz')}", err=True)
                    exit_stopped()
    except CheckpointError as e:
        option = _RESUME_OPTIONS.get(getattr(e, "field", None))
        raise click.ClickException(f"{e} ({'option ' + option + '; ' if option else ''}--fresh starts over)") from None
    except Stopped as e:
        _stopped_before_training(e, deadline)
    click.echo(f"best policy: {os.path.join(out_dir, 'best.npz')} "
               f"(step {pol.meta.get('step')}, valid {pol.meta.get('valid_improvement_pct', float('nan')):+.3f}%)")


def _stopped_before_training(e, deadline) -> None:
    click.echo(f"stopped ({e.reason}) before the first step: no checkpoint written", err=True)
    exit_stopped(nothing=deadline)


def _start_jax() -> None:
    """Import JAX, Haiku and optax (a few seconds: training's start)."""
    skip_flax_interop()
    import haiku  # noqa: F401
    import jax  # noqa: F401
    import optax  # noqa: F401
