"""`regal torch FILE.py:FN`: optimize a PyTorch program and run both orders in PyTorch.

FILE.py is executed (imported as a module, its folder first on the import path, as `python
FILE.py` would see it) and `FN()` returns `(module, example_inputs)`. The command traces it
(`regal.torch.trace`: the forward pass, or one training step with `--train NAME`, the one trace
`regal.torch.planned_step` makes, its loss `--loss`), runs it
in its own order and in the order (and on the devices) regal's flagship chooses, measures eager
PyTorch running the same program, and reports each device's peak as regal predicts it and as
measured in the process (`regal.torch.compare.compare`: every tensor the process holds + the
allocator's high mark during the run, as `regal.torch.eager` measures every anchor). What the program prints goes to
standard error, so `--json` stays one JSON object on standard output.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import sys

import click

from regal.commands._common import BUDGET, DEVICES, SEED, SEED_HELP, Fraction

__all__ = ["torch_cmd", "load_program"]

#: The most devices `regal torch` runs a plan on: a process each on the CPU (CUDA: the GPUs seen).
MAX_CPU_DEVICES = 16


#: `--train`'s optimizers (`regal.torch._optim.NAMED`: lr 1e-3, SGD with momentum 0.9).
OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop", "adagrad", "adamax", "adadelta")
#: `--loss`'s named losses: the model's output against the last input (the target).
LOSSES = ("mean", "mse", "cross_entropy")


def load_program(spec: str):
    """`FILE.py:FN` -> `FN()`'s `(module, example_inputs)`; one-line errors name the problem."""
    got = _call_from_file(spec, call=True)
    import torch
    path = spec.rpartition(":")[0]
    fn = spec.rpartition(":")[2]
    if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], torch.nn.Module)):
        raise click.ClickException(f"{path}:{fn}() must return (module, example_inputs), got {type(got).__name__}")
    return got


def load_loss(spec: str | None):
    """`--loss`: None or "mean" (the sum of the floating outputs' means), "mse" / "cross_entropy"
    (the output against the last input), or `FILE.py:FN`, a function `FN(outputs, *inputs)`."""
    if spec is None or spec == "mean":
        return None
    if spec in ("mse", "cross_entropy"):
        import torch.nn.functional as F
        f = F.mse_loss if spec == "mse" else F.cross_entropy
        return lambda out, *inputs: f(out, inputs[-1])
    if ":" not in spec:
        raise click.BadParameter(f"'{spec}' is none of {', '.join(LOSSES)}, nor FILE.py:FUNCTION", param_hint="--loss")
    return _call_from_file(spec, call=False)


def _call_from_file(spec: str, call: bool):
    """`FILE.py:FN`'s FN() (`call`) or FN itself, loaded as `load_program` says; one-line errors."""
    path, sep, fn = spec.rpartition(":")
    if not sep or not path or not fn:
        raise click.UsageError(f"'{spec}': expected FILE.py:FUNCTION")
    if not os.path.isfile(path):
        raise click.ClickException(f"{path}: no such file")
    name = "regal_user_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    # the program's prints stay out of --json; it may import a module beside it
    with contextlib.redirect_stdout(sys.stderr), _beside(path):
        try:
            mod_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
        except BaseException as e:  # noqa: BLE001 - user code raises anything (SystemExit too); one line
            if isinstance(e, KeyboardInterrupt):
                raise
            raise click.ClickException(f"{path}: importing it failed ({type(e).__name__}: {_line(e)})") from None
        make = getattr(module, fn, None)
        if not callable(make):
            raise click.ClickException(f"{path}: no function '{fn}'")
        if not call:
            return make
        try:
            return make()
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            raise click.ClickException(f"{path}:{fn}() failed ({type(e).__name__}: {_line(e)})") from None


@contextlib.contextmanager
def _beside(path: str):
    """The program's folder first on the import path while it loads, as `python FILE.py` has it."""
    folder = os.path.dirname(os.path.abspath(path))
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)


def _line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200]


def _mb(n: int) -> str:
    return f"{n / 2**20:9.2f} MiB"


@click.command("torch", short_help="optimize a PyTorch program and run it in PyTorch, measuring the allocator",
               help="Run FILE.py (it is executed, its folder on the import path) and trace FN() = (module, "
                    "example_inputs); optimize its placement and order with the flagship, run PyTorch's own order, "
                    "regal's plan and eager PyTorch, and report each device's peak as predicted and as PyTorch's "
                    "allocator measured it. To train with a plan, see regal.torch.planned_step.")
@click.argument("program", metavar="FILE.py:FN")
@click.option("--devices", "-d", default=1, show_default=True, type=DEVICES, help="number of devices")
@click.option("--device", "device", default=None, metavar="cpu|cuda[:N]",
              help="where to run (the module is moved there first; default: where FN() put it)")
@click.option("--train", type=click.Choice(OPTIMIZERS), default=None,
              help="one training step with this torch.optim optimizer (lr 1e-3; sgd: momentum 0.9), traced as "
                   "regal.torch.planned_step traces it (default: the forward pass)")
@click.option("--loss", "loss", default=None, metavar="mean|mse|cross_entropy|FILE.py:FN",
              help="the training step's loss: mean (default: the sum of the floating outputs' means), mse or "
                   "cross_entropy (the output against the last input, the target), or FN(outputs, *inputs) "
                   "from FILE.py")
@click.option("--recompute", "recompute", type=Fraction(0), default=0.0, show_default=True, metavar="B",
              help="extra compute the search may spend recomputing values instead of keeping them, a fraction "
                   "of one run's cost (as regal optimize --recompute-budget; one device); 0: none")
@click.option("--budget", "-n", default=5000, show_default=True, type=BUDGET, help="evaluations")
@click.option("--seed", "-s", default=0, show_default=True, type=SEED, help=SEED_HELP)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def torch_cmd(program, devices, device, train, loss, recompute, budget, seed, as_json):
    if loss is not None and train is None:
        raise click.BadParameter("a loss needs a training step (--train NAME)", param_hint="--loss")
    if recompute and devices != 1:
        raise click.BadParameter(f"recomputation runs on one device, not {devices}", param_hint="--recompute")
    if loss is not None and loss not in LOSSES and ":" not in loss:
        raise click.BadParameter(f"'{loss}' is none of {', '.join(LOSSES)}, nor FILE.py:FUNCTION", param_hint="--loss")
    try:
        import torch
    except ImportError:
        raise click.ClickException("regal torch needs PyTorch: pip install regal[torch]") from None
    import logging
    from regal.graph import GraphError
    from regal.torch.compare import compare, module_device
    # PyTorch logs a failed trace at length (the program's code, guards) before it raises; the
    # command prints the one-line reason instead
    logging.getLogger("torch").setLevel(logging.CRITICAL)
    if device is not None:
        try:
            dev = torch.device(device)
        except (RuntimeError, ValueError):
            raise click.BadParameter(f"'{device}' is no device (cpu, cuda, cuda:N)", param_hint="--device") from None
        if dev.type not in ("cpu", "cuda"):
            raise click.BadParameter(f"'{device}': regal torch runs on cpu or cuda", param_hint="--device")
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise click.ClickException(f"--device {device}: PyTorch sees no CUDA device here")
    loss_fn = load_loss(loss)
    module, inputs = load_program(program)
    where = torch.device(device) if device is not None else module_device(module)
    most = torch.cuda.device_count() if where.type == "cuda" else MAX_CPU_DEVICES
    if devices > most:
        raise click.BadParameter(f"{devices} devices: at most {most} on {where.type} "
                                 f"({'the GPUs PyTorch sees' if where.type == 'cuda' else 'one process each'})",
                                 param_hint="--devices")
    if sys.stderr.isatty():  # what PyTorch prints meanwhile is held back; say what runs (a minute or more)
        click.echo(f"regal torch: tracing {program}, searching its order ({budget:,} evaluations), then running "
                   "PyTorch's order, regal's plan and eager PyTorch...", err=True)
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            # what PyTorch and the program print while tracing and running: shown on success, on stderr
            cmp = compare(module, inputs, devices, training=train, budget=budget, seed=seed, device=where,
                          loss_fn=loss_fn, recompute_budget=recompute)
    except GraphError as e:
        raise click.ClickException(str(e).splitlines()[0]) from None
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as e:   # the program's own ops failing to run
        raise click.ClickException(f"{program}: running it failed ({type(e).__name__}: {_line(e)})") from None
    sys.stderr.write(said.getvalue())
    doc = {"devices": devices,
           "pytorch": {"predicted_peak_bytes": cmp.pytorch.predicted_peak_bytes,
                       "measured_peak_bytes": cmp.pytorch.measured_peak_bytes},
           "regal": {"predicted_peak_bytes": cmp.regal.predicted_peak_bytes,
                     "measured_peak_bytes": cmp.regal.measured_peak_bytes},
           "eager": {"measured_peak_bytes": [cmp.eager]},
           "outputs_match": bool(cmp.regal.outputs_match)}
    rc = cmp.solution.info.get("recompute") or {}   # as regal optimize --json says it (zeros: none)
    doc["recompute"] = {"count": int(rc.get("count", 0)), "extra_cost": float(rc.get("extra_cost", 0.0)),
                        "extra_fraction": float(rc.get("extra_fraction", 0.0))}
    if as_json:
        click.echo(json.dumps(doc))
    else:
        g = cmp.graph
        click.echo(f"program   {program} ({'training step, ' + train if train else 'forward'}; "
                   f"{g.num_nodes:,} nodes; {where})")
        click.echo(f"{'':24}{'predicted':>14}{'measured':>14}")
        click.echo(f"{'eager pytorch':24}{'':>14}{_mb(cmp.eager):>14}")
        click.echo(f"{'pytorch order':24}{_mb(cmp.pytorch.predicted_peak_bytes[0]):>14}"
                   f"{_mb(cmp.pytorch.measured_peak_bytes[0]):>14}")
        for k, (p, m) in enumerate(zip(cmp.regal.predicted_peak_bytes, cmp.regal.measured_peak_bytes)):
            label = "regal plan" if devices == 1 else f"regal plan, device {k}"
            click.echo(f"{label:24}{_mb(p):>14}{_mb(m):>14}")
        click.echo(f"outputs   {'equal to PyTorch order' if cmp.regal.outputs_match else 'DIFFER from PyTorch order'}")
        if recompute:
            r = doc["recompute"]
            click.echo(f"recompute {r['count']:,} op run{'' if r['count'] == 1 else 's'} again, "
                       f"+{r['extra_fraction'] * 100:.2f} % compute (budget {recompute * 100:g} %)")
        click.echo("measured  as the process sees it: every tensor it holds + the allocator's high mark during the run"
                   + ("" if devices == 1 else " (several devices: each worker's arguments + its high mark)"))
