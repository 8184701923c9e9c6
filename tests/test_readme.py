"""The documentation is executable: every fenced block of README.md and of every docs/*.md page
runs or is checked, against the files the repository ships, and the README's method table is the
registry's.

In README.md and docs/*.md, each fenced `python` block runs (a `>>>` block must print what it
shows) and each line of a fenced `bash` block (only the `$ ` lines, where a block shows a prompt)
must be one of:

- `regal ...`: run, in the block's order, in a scratch directory; it must exit 0;
- `make TARGET`: `make -n TARGET` must succeed, and every `regal` line it prints is run as above
  (so `make demo`'s searches run; `make test` is not run inside the tests);
- `python -m pytest ARGS`: collected (`--collect-only`), not run;
- `python -m MODULE ...` or `python SCRIPT.py ...`: imported and run with `--help`, and every
  `.json` argument must exist (the full runs take minutes to hours and rewrite tracked results).

Anything else fails the test, so no command is silently skipped. The line just above a fence may
say `<!-- test: slow -->` (the block runs under `make test-slow` only) or
`<!-- test: not run: REASON -->` (reported as skipped, with the reason). data/README.md keeps the
older, looser rule: its `python` blocks and the `regal` lines of its `bash` blocks run.
"""

import doctest
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
STRICT = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
DOCS = (*STRICT, ROOT / "data" / "README.md")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
MARK = re.compile(r"<!--\s*test:\s*(slow|not run:\s*(.*?))\s*-->\s*\n\s*$")
VENV = r"(?:\.venv/bin/)?"
COMMAND = re.compile(rf"^{VENV}regal\s")
MAKE = re.compile(r"^make\s+([\w-]+)\s*$")
PYTEST = re.compile(rf"^{VENV}python[\d.]*\s+-m\s+pytest(\s|$)")
MODULE = re.compile(rf"^{VENV}python[\d.]*\s+-m\s+([\w.]+)(\s|$)")
SCRIPT = re.compile(rf"^{VENV}python[\d.]*\s+([\w./-]+\.py)(\s|$)")
TIMEOUT_S = 600


class Block(NamedTuple):
    where: str  # "docs/results.md:12"
    lang: str
    code: str
    mark: str  # "", "slow" or "not run: REASON"
    strict: bool


def _blocks() -> list[Block]:
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for m in FENCE.finditer(text):
            mark = MARK.search(text[max(0, m.start() - 300):m.start()])
            line = text.count("\n", 0, m.start()) + 1
            out.append(Block(f"{doc.relative_to(ROOT)}:{line}", m.group(1), m.group(2),
                             mark.group(1) if mark else "", doc in STRICT))
    return out


def _lines(code: str) -> list[str]:
    """The command lines of a bash block: its `$ ` lines if it shows a prompt, else every line
    that is not blank or a comment (a trailing backslash joins the next line)."""
    raw = code.replace("\\\n", " ").splitlines()
    if any(ln.startswith("$ ") for ln in raw):
        return [ln[2:].strip() for ln in raw if ln.startswith("$ ")]
    return [ln.strip() for ln in raw if ln.strip() and not ln.strip().startswith("#")]


def _param(block: Block):
    marks = []
    if block.mark == "slow":
        marks.append(pytest.mark.slow)
    elif block.mark.startswith("not run"):
        marks.append(pytest.mark.skip(reason=f"{block.where}: {block.mark}"))
    return pytest.param(block.where, block.code, block.strict, marks=marks, id=block.where)


PYTHON = [_param(b) for b in _blocks() if b.lang == "python"]
BASH = [_param(b) for b in _blocks() if b.lang == "bash"
        and (b.strict or any(COMMAND.match(ln) for ln in _lines(b.code)))]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A scratch directory that sees the repository's shipped files (data/, tests/) where the
    docs name them; outputs the snippets write stay in it."""
    for name in ("data", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REGAL_JAX_CACHE_DIR", str(tmp_path / "jax"))
    return tmp_path


def _run(args: list[str], cwd: Path, where: str, line: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    r = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, f"{where}: `{line}` -> {r.returncode}: {(r.stderr or r.stdout).strip()[-400:]}"
    return r


def _run_regal(line: str, workdir: Path, where: str) -> None:
    args = shlex.split(line, comments=True)
    _run([sys.executable, "-m", "regal.cli", *args[1:]], workdir, where, line)


def _check(line: str, workdir: Path, where: str) -> None:
    """Run or check one command line of a strict bash block (module docstring)."""
    if COMMAND.match(line):
        return _run_regal(line, workdir, where)
    args = shlex.split(line, comments=True)
    if m := MAKE.match(line.split("#")[0].strip()):
        dry = _run(["make", "-n", m.group(1)], ROOT, where, line)
        for printed in dry.stdout.splitlines():
            if COMMAND.match(printed.strip()):
                _run_regal(printed.strip(), workdir, where)
        return
    if PYTEST.match(line):
        _run([sys.executable, "-m", "pytest", "--collect-only", "-q", *args[3:]], ROOT, where, line)
        return
    for pattern, launcher in ((MODULE, ["-m"]), (SCRIPT, [])):
        if m := pattern.match(line):
            _run([sys.executable, *launcher, m.group(1), "--help"], ROOT, where, line)
            missing = [a for a in args if a.endswith(".json") and not (ROOT / a).exists()]
            assert not missing, f"{where}: `{line}` names files that do not exist: {missing}"
            return
    pytest.fail(f"{where}: `{line}` is no command the docs test knows how to run or check; "
                "make it one, or mark its block <!-- test: not run: REASON -->")


def test_the_docs_have_snippets_to_run():
    """The extraction finds the blocks it should (docs without them would pass vacuously)."""
    assert len(PYTHON) >= 5 and len(BASH) >= 5
    assert {Path(p.values[0].split(":")[0]).parts[0] for p in BASH} >= {"README.md", "docs"}


@pytest.mark.parametrize("where, code, strict", PYTHON)
def test_python_block_runs(where, code, strict, workdir):
    """Each Python block runs as written; an interactive (>>>) block must print what it shows."""
    if "torch" in code:
        pytest.importorskip("torch")
    if "torchvision" in code:
        pytest.importorskip("torchvision")
    if ">>>" in code:
        test = doctest.DocTestParser().get_doctest(code, {}, where, where, 0)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        runner.run(test)
        assert runner.failures == 0, f"{where}: {runner.failures} example(s) print something else"
    else:
        exec(compile(code, where, "exec"), {"__name__": "__readme__"})


@pytest.mark.parametrize("where, code, strict", BASH)
def test_command_lines_run(where, code, strict, workdir):
    """Each command line of a bash block runs and exits 0, or is checked (module docstring)."""
    for line in _lines(code):
        if strict:
            _check(line, workdir, where)
        elif COMMAND.match(line):
            _run_regal(line, workdir, where)


def _methods_table():
    spec = importlib.util.spec_from_file_location("methods_table", ROOT / "docs" / "methods_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_method_table_is_the_registry():
    """README.md's method table is exactly what docs/methods_table.py generates from regal.methods."""
    module = _methods_table()
    assert module.section((ROOT / "README.md").read_text()) == module.table(), \
        "README.md's method table is stale: run `python docs/methods_table.py --write`"


LINK = re.compile(r"\]\(([^)\s#]+)(#[^)\s]*)?\)")


def test_the_docs_links_resolve():
    """Every relative link of README.md and docs/*.md names a file or folder that exists."""
    broken = [f"{doc.relative_to(ROOT)}: {m.group(1)}" for doc in STRICT for m in LINK.finditer(doc.read_text())
              if not m.group(1).startswith(("http://", "https://", "mailto:"))
              and not (doc.parent / m.group(1)).exists()]
    assert not broken, broken


def test_every_docs_page_is_in_the_index():
    """docs/README.md links every page of docs/, so that none is an orphan."""
    index = (ROOT / "docs" / "README.md").read_text()
    orphans = [p.name for p in STRICT if p.parent.name == "docs" and p.name != "README.md" and f"({p.name}" not in index]
    assert not orphans, orphans
