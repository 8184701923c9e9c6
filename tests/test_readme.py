"""The READMEs are executable documentation: every Python block and every `regal ...` command
line in README.md and data/README.md runs against the files the repository ships."""

import doctest
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "README.md", ROOT / "data" / "README.md")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
COMMAND = re.compile(r"^(?:\$\s+)?(?:\.venv/bin/)?regal\s")


def _blocks(kind: str) -> list:
    """(id, code) of every fenced block: "python" blocks, or "bash" blocks with regal commands."""
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for m in FENCE.finditer(text):
            lang, code = m.group(1), m.group(2)
            line = text.count("\n", 0, m.start()) + 1
            if kind == "python" and lang == "python":
                out.append((f"{doc.relative_to(ROOT)}:{line}", code))
            if kind == "bash" and lang == "bash" and any(COMMAND.match(ln.strip()) for ln in code.splitlines()):
                out.append((f"{doc.relative_to(ROOT)}:{line}", code))
    return out


def _commands(code: str) -> list[list[str]]:
    """The block's `regal ...` command lines as argument lists (prompt and trailing comment dropped)."""
    out = []
    for line in code.splitlines():
        line = line.strip()
        if COMMAND.match(line):
            args = shlex.split(line.lstrip("$ ").strip(), comments=True)
            out.append(args[1:])
    return out


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A scratch directory that sees the repository's shipped files (data/, tests/) where the
    READMEs name them; outputs the snippets write stay in it."""
    for name in ("data", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REGAL_JAX_CACHE_DIR", str(tmp_path / "jax"))
    return tmp_path


def test_the_readmes_have_snippets_to_run():
    """The extraction finds the blocks it should (a README without them would pass vacuously)."""
    assert len(_blocks("python")) >= 3 and len(_blocks("bash")) >= 2


@pytest.mark.parametrize("where, code", _blocks("python"), ids=lambda x: x if ":" in str(x) else "")
def test_python_block_runs(where, code, workdir):
    """Each Python block runs as written; an interactive (>>>) block must print what it shows."""
    if "torch" in code:
        pytest.importorskip("torch")
        pytest.importorskip("torchvision")
    if ">>>" in code:
        test = doctest.DocTestParser().get_doctest(code, {}, where, where, 0)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        runner.run(test)
        assert runner.failures == 0, f"{where}: {runner.failures} example(s) print something else"
    else:
        exec(compile(code, where, "exec"), {"__name__": "__readme__"})


@pytest.mark.parametrize("where, code", _blocks("bash"), ids=lambda x: x if ":" in str(x) else "")
def test_regal_command_lines_run(where, code, workdir):
    """Each `regal ...` line of a block runs, in order, and exits 0."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for args in _commands(code):
        r = subprocess.run([sys.executable, "-m", "regal.cli", *args], cwd=workdir, env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{where}: regal {' '.join(args)} -> {r.returncode}: {r.stderr.strip()[-400:]}"
