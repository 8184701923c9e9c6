"""The training curves: `train.csv`, `valid.csv` (appended, cut back on resume) and
`curves.png`; see `regal.training.reinforce`."""

from __future__ import annotations

import csv
import io
import os

import numpy as np

from regal._io import atomic_savefig, atomic_text


def _csv_text(path: str) -> str:
    if not os.path.exists(path):
        return ""
    with open(path, newline="", encoding="utf-8") as f:
        return f.read()


def _append_csv(path: str, row: dict) -> None:
    """One more row (a header first in a new file), the whole file rewritten atomically."""
    old = _csv_text(path)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(row))
    if not old:
        w.writeheader()
    w.writerow(row)
    with atomic_text(path) as f:
        f.write(old + buf.getvalue())


def _truncate_csv(path: str, step: int) -> None:
    """Drop the rows of `path` after `step` (written after the checkpoint a run resumes from, and
    run again) and rows that do not parse (a file cut off by an older version)."""
    rows = list(csv.reader(io.StringIO(_csv_text(path))))
    if not rows or "step" not in rows[0]:
        return
    i = rows[0].index("step")
    keep = [r for r in rows[1:] if len(r) == len(rows[0]) and r[i].isdigit() and int(r[i]) <= step]
    if len(keep) < len(rows) - 1:
        buf = io.StringIO()
        csv.writer(buf).writerows([rows[0]] + keep)
        with atomic_text(path) as f:
            f.write(buf.getvalue())


def plot_curves(out_dir: str) -> str | None:
    """curves.png: moving-average training reward and validation improvement against steps."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tpath, vpath = os.path.join(out_dir, "train.csv"), os.path.join(out_dir, "valid.csv")
    if not os.path.exists(tpath):
        return None
    rows = list(csv.DictReader(io.StringIO(_csv_text(tpath))))
    steps = np.array([int(r["step"]) for r in rows])
    rew = np.array([float(r["mean_reward_pct"]) for r in rows])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, rew, alpha=0.25, color="C0", label="train reward per step")
    w = min(25, len(rew))
    if w > 1:
        ax.plot(steps[w - 1:], np.convolve(rew, np.ones(w) / w, mode="valid"), color="C0",
                label=f"train reward, {w}-step mean")
    if os.path.exists(vpath):
        vr = list(csv.DictReader(io.StringIO(_csv_text(vpath))))
        ax.plot([int(r["step"]) for r in vr], [float(r["mean_improvement_pct"]) for r in vr], "o-",
                color="C3", label="valid improvement (most likely actions)")
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xlabel("step (one graph, one device count)")
    ax.set_ylabel("peak reduction over plain BRKGA (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = os.path.join(out_dir, "curves.png")
    atomic_savefig(fig, out, dpi=110)
    plt.close(fig)
    return out
