"""Checkpoints of a training run (`checkpoint.npz`: arrays, and JSON for the rest; no pickle)
and the check that a resumed run has the setting it was saved with; see `regal.training.reinforce`."""

from __future__ import annotations

import json
import math
import os

import numpy as np

from regal._io import atomic_binary
from regal.training.config import RESUMABLE_FIELDS, TrainConfig, _TrainState
from regal.training.learner import _Learner


CHECKPOINT = "checkpoint.npz"
CHECKPOINT_FORMAT = "regal-checkpoint/1"
_LEGACY_CHECKPOINT = "checkpoint.pkl"  # pickles of older versions: never read (unpickling runs code)


class CheckpointError(ValueError):
    """A checkpoint that cannot be read: cut off, corrupt, of another format or of another network."""


class ResumeError(CheckpointError):
    """A checkpoint written by a run of another setting; `field` names the setting."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def run_setup(tc: TrainConfig, policy_config, train_paths, valid_paths) -> dict:
    """What a checkpoint must share with the run that resumes it, as JSON values: the training
    config (but `RESUMABLE_FIELDS`), the policy config and the graphs (by file name, in order)."""
    return json.loads(json.dumps({
        "train_config": {k: v for k, v in tc._asdict().items() if k not in RESUMABLE_FIELDS},
        "policy_config": dict(policy_config._asdict()),
        "train_graphs": [os.path.basename(os.fspath(p)) for p in train_paths],
        "valid_graphs": [os.path.basename(os.fspath(p)) for p in valid_paths]}))


def check_resume(out_dir: str, setup: dict) -> None:
    """`ResumeError` naming the first field in which the checkpoint in `out_dir` (if any) differs
    from `setup` (`run_setup`); `CheckpointError` for one that cannot be read. Reads only the
    checkpoint's JSON part: a cheap check before a cluster starts."""
    path = os.path.join(out_dir, CHECKPOINT)
    if os.path.exists(path):
        _check_setup(path, _read_checkpoint(path)[0].get("setup"), setup)
    elif os.path.exists(os.path.join(out_dir, _LEGACY_CHECKPOINT)):
        raise _legacy_error(os.path.join(out_dir, _LEGACY_CHECKPOINT))


def _legacy_error(path: str) -> CheckpointError:
    return CheckpointError(f"{path}: a pickle checkpoint of an older regal, not read (unpickling can run "
                           "code); start the run over")


def _show(value) -> str:
    return json.dumps(value) if not isinstance(value, str) else repr(value)


def _policy_config_defaults():
    from regal.policy.network import PolicyConfig
    return PolicyConfig()


def _check_setup(path: str, saved, now: dict) -> None:
    """`ResumeError` naming the first field where the checkpoint's setup `saved` differs from `now`."""
    if not isinstance(saved, dict):
        raise CheckpointError(f"{path}: no 'setup' object in the checkpoint")
    for group in ("policy_config", "train_config"):
        old = saved.get(group)
        if not isinstance(old, dict):
            raise CheckpointError(f"{path}: no '{group}' object in the checkpoint")
        defaults = (TrainConfig() if group == "train_config" else _policy_config_defaults())._asdict()
        for field, value in now[group].items():
            if field not in old and field in defaults and json.loads(json.dumps(defaults[field])) == value:
                continue  # a field added since, at its default: the run it asks for is the checkpoint's
            if field not in old:
                raise ResumeError(f"{path}: the checkpoint has no {field} (a {group.replace('_', ' ')} field of "
                                  "another version); start the run over", field)
            if old[field] != value or isinstance(old[field], bool) != isinstance(value, bool):
                raise ResumeError(f"{path}: the checkpoint was trained with {field}={_show(old[field])}, this run "
                                  f"asks for {field}={_show(value)}; resume with the same setting or start over",
                                  field)
    for group, what in (("train_graphs", "training"), ("valid_graphs", "validation")):
        old, new = saved.get(group), now[group]
        if not isinstance(old, list):
            raise CheckpointError(f"{path}: no '{group}' list in the checkpoint")
        if old != new:
            gone = [n for n in old if n not in set(new)]
            added = [n for n in new if n not in set(old)]
            how = (f"{gone[0]} is missing" if gone else f"{added[0]} is new" if added else "another order")
            raise ResumeError(f"{path}: the checkpoint was trained with {len(old)} {what} graphs ({group}), this run "
                              f"has {len(new)} ({how}); resume with the same graphs or start over", group)


def _save_checkpoint(path: str, state: _TrainState, rng: np.random.Generator, setup: dict) -> None:
    """The full training state, written atomically as an .npz without pickles: the parameters
    (`params/MODULE/NAME`), the optimizer state's leaves in `jax.tree_util` order (`opt/I`), the
    PRNG key, and JSON (`__state__`): step, best validation, graph order, `rng`'s state and the
    run's `setup` (`run_setup`)."""
    import jax
    arrays = {f"params/{m}/{k}": np.asarray(v) for m, d in state.params.items() for k, v in d.items()}
    arrays.update({f"opt/{i}": np.asarray(x) for i, x in enumerate(jax.tree_util.tree_leaves(state.opt_state))})
    arrays["key"] = np.asarray(state.key)
    best = float(state.best_valid)
    doc = {"format": CHECKPOINT_FORMAT, "step": int(state.step), "best_valid": best if math.isfinite(best) else None,
           "order": [int(i) for i in state.order], "rng": rng.bit_generator.state, "setup": setup}
    arrays["__state__"] = np.array(json.dumps(doc))
    with atomic_binary(path) as f:
        np.savez(f, **arrays)


def _read_checkpoint(path: str) -> tuple[dict, dict]:
    """(the JSON state, the arrays) of a checkpoint file; `CheckpointError` for anything that does
    not decode (a cut-off or corrupted file fails the zip's CRC or its structure)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        doc = json.loads(str(arrays.pop("__state__")))
    # whatever a damaged zip or .npy header raises: decoding a file, no other code runs here
    except (Exception, RecursionError) as e:  # noqa: BLE001
        raise CheckpointError(f"{path}: not a readable regal checkpoint ({type(e).__name__}); it may be "
                              "cut off or corrupted") from None
    if not isinstance(doc, dict) or doc.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: not a {CHECKPOINT_FORMAT} file")
    return doc, arrays


def _load_checkpoint(path: str, rng: np.random.Generator, learner: _Learner, params_like: dict, setup: dict,
                     num_train: int) -> _TrainState:
    """The state `_save_checkpoint` wrote, checked against this run (`setup`, the shapes of
    `params_like` and of a fresh optimizer state); `rng` is restored in place."""
    import jax
    import jax.numpy as jnp
    doc, arrays = _read_checkpoint(path)
    _check_setup(path, doc.get("setup"), setup)

    def bad(field, what):
        return CheckpointError(f"{path}: field '{field}' {what}")

    step, order, best = doc.get("step"), doc.get("order"), doc.get("best_valid")
    if type(step) is not int or step < 0:
        raise bad("step", "is not a non-negative integer")
    if (not isinstance(order, list) or not all(type(i) is int for i in order)
            or sorted(order) != list(range(num_train))):
        raise bad("order", f"is not an order of the {num_train} training graphs")
    if best is not None and (type(best) not in (int, float) or not math.isfinite(best)):
        raise bad("best_valid", "is not a finite number or null")

    def like(prefix, got: list, want: list):
        if len(got) != len(want):
            raise bad(prefix, f"has {len(got)} arrays, this network needs {len(want)}")
        for i, (a, b) in enumerate(zip(got, want)):
            if a.shape != np.shape(b) or a.dtype != np.asarray(b).dtype:
                raise bad(prefix, f"array {i} is {a.dtype}{list(a.shape)}, this network needs "
                                  f"{np.asarray(b).dtype}{list(np.shape(b))}")

    params: dict = {}
    for name, a in arrays.items():
        if name.startswith("params/") and "/" in name[7:]:
            module, leaf = name[7:].rsplit("/", 1)
            params.setdefault(module, {})[leaf] = a
    if jax.tree_util.tree_structure(params) != jax.tree_util.tree_structure(params_like):
        raise bad("params", "does not hold the parameters of this network")
    like("params", jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(params_like))
    fresh, treedef = jax.tree_util.tree_flatten(learner.opt.init(params_like))
    opt = [arrays.get(f"opt/{i}") for i in range(len(fresh))]
    if any(a is None for a in opt) or sum(n.startswith("opt/") for n in arrays) != len(fresh):
        raise bad("opt", f"does not hold this optimizer's state ({len(fresh)} arrays opt/0, opt/1, ...)")
    like("opt", opt, fresh)
    key = arrays.get("key")
    like("key", [] if key is None else [key], [jax.random.PRNGKey(0)])
    try:
        rng.bit_generator.state = doc.get("rng")
    except (TypeError, ValueError, KeyError, OverflowError):
        raise bad("rng", f"is not a {type(rng.bit_generator).__name__} state") from None
    return _TrainState(jax.tree_util.tree_map(jnp.asarray, params),
                       jax.tree_util.tree_unflatten(treedef, [jnp.asarray(a) for a in opt]), step,
                       jnp.asarray(key), -np.inf if best is None else float(best), order)
