"""The library's layout in numbers: import circles, upward imports, largest modules, longest functions.

    python -m benchmarks.layout_report            # a plain-text report of regal/ (and the scripts)
    python -m benchmarks.layout_report DIR        # of DIR/regal (e.g. `git archive` of an older commit)

Every `import regal.X` / `from regal.X import ...` counts, at module level or inside a function
(an import inside a function still makes a circle, it only hides it). A module's *layer* is its
room in docs/architecture.md (`LAYERS`, lowest first); an *upward* import is one from a module to
a module of a higher layer. A module `regal.a.b` takes the layer of the longest prefix listed, so a
package that spans layers (`regal.torch`: its importer in importers, its plans and planned step in
tools) names its modules one by one, and an import between two of its modules on different
floors counts like any other (up only if it goes up).
Circles are also looked for among the scripts (experiments/, benchmarks/, baselines/ as
`regal_baselines`) with the library; and the report counts the scripts' `sys.path` edits and the
process pools run beside the one runner (`experiments/runner.py`).
"""

from __future__ import annotations

import ast
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "regal")
#: The scripts' packages beside the library (name -> folder under the repository), for circles.
SCRIPTS = {"experiments": "experiments", "benchmarks": "benchmarks", "regal_baselines": "baselines"}
#: The one runner: the only script that may start processes for experiment cells.
RUNNER = "experiments.runner"

#: The rooms, lowest first (docs/architecture.md). A module may import its own layer and lower ones.
LAYERS = [
    ("primitives", ["regal._jit", "regal.threads", "regal._lean_start", "regal._heap", "regal._takeover", "regal._io",
                    "regal._ops", "regal._stop"]),
    ("kernels", ["regal._kernel_graph", "regal._peak_memory", "regal._kernels", "regal._orders", "regal._greedy",
                 "regal._climb", "regal._timed", "regal._pack_kernels", "regal._minimalloc", "regal._alloc_kernels",
                 "regal._heft", "regal._remat", "regal._remat_climb"]),
    ("graph", ["regal.graph", "regal.structure", "regal.priors", "regal.policy.names"]),
    # regal.torch spans two rooms, so its modules are placed one by one: the importer and its op
    # table here, the package itself and the rest of it (plans, processes, the planned step and
    # `eager`, its measured baselines) in tools
    ("importers", ["regal.hlo", "regal.onnx", "regal.torch.importer", "regal.torch._ops", "regal.load"]),
    ("models", ["regal.simulate", "regal.decode", "regal.allocation", "regal.solution", "regal.timed",
                "regal.packing", "regal.memory_plan", "regal.recompute"]),
    ("heuristics", ["regal.heuristics", "regal.timed_heuristics", "regal.local_search", "regal.climb"]),
    ("policy", ["regal.policy.actions", "regal.policy.teacher", "regal.policy.features", "regal.policy.network",
                "regal.policy", "regal.policy.resolve"]),
    ("searches", ["regal.brkga", "regal.config", "regal.problems", "regal.loop", "regal.search", "regal.memetic",
                  "regal.runtime", "regal.arena_search", "regal.recompute_search", "regal.flagship"]),
    ("tools", ["regal.methods", "regal.parallel", "regal.dataset", "regal.plot", "regal.training",
               "regal.fit", "regal._warmup", "regal.torch", "regal.torch.plan",
               "regal.torch._storage", "regal.torch._workers", "regal.torch.dist", "regal.torch.compare",
               "regal.torch.step", "regal.torch.eager", "regal.torch.recompute"]),
    ("front", ["regal.__init__", "regal.cli_common", "regal.cli", "regal.commands"]),
]


def parse(path: str) -> ast.Module:
    """The syntax tree of the file at `path`, parsed once per process while the file is unchanged
    (the report and the gates read each file several times)."""
    stamp = os.stat(path).st_mtime_ns
    hit = _TREES.get(path)
    if hit is None or hit[0] != stamp:
        with open(path) as f:
            hit = _TREES[path] = (stamp, ast.parse(f.read(), path))
    return hit[1]


_TREES: dict[str, tuple[int, ast.Module]] = {}


def module_name(path: str, root: str | None = None, package: str = "regal") -> str:
    """The dotted name of the module at `path` in the package `package` whose folder is `root`."""
    root = ROOT if root is None else root
    rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
    rel = package + ("" if rel == "__init__" else "." + rel)
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def layer_of(name: str) -> int | None:
    if name == "regal":
        name = "regal.__init__"
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    return rank


def modules(root: str | None = None, package: str = "regal") -> dict[str, str]:
    root = ROOT if root is None else root
    out = {}
    for base, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                out[module_name(os.path.join(base, f), root, package)] = os.path.join(base, f)
    return out


def script_modules() -> dict[str, str]:
    """The scripts' modules (`SCRIPTS`), where their folders exist."""
    repo = os.path.dirname(ROOT)
    out = {}
    for package, folder in SCRIPTS.items():
        if os.path.isdir(os.path.join(repo, folder)):
            out.update(modules(os.path.join(repo, folder), package))
    return out


def _calls(path: str) -> list[str]:
    """The dotted names of the calls in a file (`sys.path.insert`, `Pool`, `client.submit`, ...)."""
    names = []
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Call):
            parts, f = [], node.func
            while isinstance(f, ast.Attribute):
                parts.append(f.attr)
                f = f.value
            if isinstance(f, ast.Name):
                names.append(".".join([f.id] + parts[::-1]))
    return names


#: The one module that may put a folder on sys.path, and why: not to reach the project's own code,
#: but to load a user's program as `python FILE.py` would (its folder first, while it loads).
USER_PROGRAM_PATH = {"regal.commands.torch": "regal torch loads FILE.py with its folder on the import path"}


def path_edits(mods: dict) -> list[str]:
    """Modules that edit sys.path (insert, append, extend), but `USER_PROGRAM_PATH`."""
    return sorted(m for m, p in mods.items() if m not in USER_PROGRAM_PATH
                  and any(c in ("sys.path.insert", "sys.path.append", "sys.path.extend") for c in _calls(p)))


def runners(mods: dict) -> list[str]:
    """Script modules other than `RUNNER` that start their own worker processes (a
    multiprocessing pool or process, a process pool executor) or hand a Dask client work."""
    own = ("Pool", "multiprocessing.Pool", "Process", "multiprocessing.Process", "ProcessPoolExecutor",
           "concurrent.futures.ProcessPoolExecutor", "client.submit", "client.map")
    return sorted(m for m, p in mods.items() if m != RUNNER and not m.startswith("regal")
                  and any(c in own for c in _calls(p)))


def imports(path: str, mods: dict) -> list[tuple[str, bool, int]]:
    """(imported regal module, inside a function?, line) of every import in the file."""
    tree = parse(path)
    found = []

    def visit(node, nested):
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            names = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [child.module] + [f"{child.module}.{a.name}" for a in child.names]
            for n in names:
                if n in mods:
                    found.append((n, nested, child.lineno))
            visit(child, inner)

    visit(tree, False)
    me = module_name(path)
    return [(n, nested, line) for n, nested, line in found if n != me]


def graph(mods):
    edges = {}
    for name, path in mods.items():
        for target, nested, line in imports(path, mods):
            if target == "regal" or (name.startswith(target + ".") and target != "regal"):
                continue   # a package's own __init__ from inside it
            edges.setdefault(name, {}).setdefault(target, (nested, line))
    return edges


def circles(edges) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(edges) | {w for e in edges.values() for w in e}):
        if v not in index:
            strong(v)
    return out


def functions(mods) -> list[tuple[int, str]]:
    out = []
    for name, path in mods.items():
        tree = parse(path)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((node.end_lineno - node.lineno + 1, f"{name}.{node.name}"))
    return sorted(out, reverse=True)


def main(argv=None) -> int:
    global ROOT
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        ROOT = os.path.join(argv[0], "regal")
    mods = modules()
    scripts = script_modules() if not argv else {}
    edges = graph(mods)
    comps = circles(graph(mods | scripts))
    print(f"modules: {len(mods)} (and {len(scripts)} of the scripts)")
    print(f"import circles (scripts included): {len(comps)}")
    for c in comps:
        print("  " + " <-> ".join(c))
    edits = path_edits(mods | scripts)
    print(f"sys.path edits: {len(edits)}" + (": " + ", ".join(edits) if edits else "")
          + "".join(f" (and {m}: {why})" for m, why in USER_PROGRAM_PATH.items()))
    others = runners(scripts)
    print(f"runners: {1 + len(others)} ({RUNNER}" + "".join(", " + m for m in others) + ")")
    nested = [(a, b, line) for a, e in edges.items() for b, (n, line) in e.items() if n]
    print(f"imports inside functions (regal -> regal): {len(nested)}")
    up, unplaced = [], sorted(m for m in mods if layer_of(m) is None)
    for a, e in sorted(edges.items()):
        for b in e:
            la, lb = layer_of(a), layer_of(b)
            if la is not None and lb is not None and lb > la:
                up.append(f"{a} ({LAYERS[la][0]}) -> {b} ({LAYERS[lb][0]})")
    print(f"upward imports: {len(up)}")
    for line in up:
        print("  " + line)
    if unplaced:
        print("modules in no layer: " + ", ".join(unplaced))
    sizes = sorted(((sum(1 for _ in open(p)), m) for m, p in mods.items()), reverse=True)
    print(f"modules over 500 lines: {sum(n > 500 for n, _ in sizes)}")
    print("ten largest modules:")
    for n, m in sizes[:10]:
        print(f"  {n:5d}  {m}")
    funcs = functions(mods)
    print(f"functions over 80 lines: {sum(n > 80 for n, _ in funcs)}")
    print("ten longest functions:")
    for n, f in funcs[:10]:
        print(f"  {n:5d}  {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
