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

The analysis here is also the layout gates' (tests/test_layout.py, run by `make test`; rules and
allow-list in docs/development.md, "The gates"): no circle, no upward import, no import of the
scripts' or data's packages from the library, every module in a room of `LAYERS` and `LAYERS`
equal to docs/architecture.md's table, at most `MAX_MODULE_LINES` lines a module of regal/ or
baselines/, at most `MAX_KERNEL_PARAMS` parameters a Numba kernel. The report prints the same
numbers, with no allow-list.
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
    ("primitives", ["regal._jit", "regal.threads", "regal._lean_start", "regal._takeover", "regal._io",
                    "regal._ops", "regal._stop", "regal._args"]),
    ("kernels", ["regal.kernels", "regal._remat", "regal._remat_climb"]),
    ("graph", ["regal.graph", "regal.structure", "regal.priors", "regal.policy.names"]),
    # regal.torch spans two rooms, so its modules are placed one by one: the importer and its op
    # table here, the package itself and the rest of it (plans, processes, the planned step and
    # `eager`, its measured baselines) in tools
    ("importers", ["regal.hlo", "regal.onnx", "regal.torch.importer", "regal.torch._ops", "regal.load"]),
    ("models", ["regal.simulate", "regal.decode", "regal.allocation", "regal.solution", "regal.timed",
                "regal.packing", "regal.memory_plan", "regal.recompute", "regal.check"]),
    ("heuristics", ["regal.heuristics", "regal.timed_heuristics", "regal.local_search", "regal.climb", "regal.moves"]),
    ("policy", ["regal.policy.actions", "regal.policy.teacher", "regal.policy.features", "regal.policy.network",
                "regal.policy", "regal.policy.resolve"]),
    ("searches", ["regal.brkga", "regal.config", "regal.problems", "regal.loop", "regal.search", "regal.memetic",
                  "regal.runtime", "regal.arena_search", "regal.recompute_search", "regal.recompute_runtime",
                  "regal.flagship"]),
    ("tools", ["regal.methods", "regal.parallel", "regal.dataset", "regal.plot", "regal.training",
               "regal.fit", "regal._warmup", "regal.torch", "regal.torch.tracing", "regal.torch.plan",
               "regal.torch._storage", "regal.torch._workers", "regal.torch.dist", "regal.torch.compare",
               "regal.torch._optim", "regal.torch._step_trace", "regal.torch._step_report", "regal.torch.step",
               "regal.torch.eager",
               "regal.torch.recompute", "regal.torch._compile_joint", "regal.torch._compile_order",
               "regal.torch.compile"]),
    ("front", ["regal.__init__", "regal.cli", "regal.commands"]),
]


def _read(path: str) -> tuple[str, ast.Module]:
    """(text, syntax tree) of the file at `path`, read once per process while the file is
    unchanged (the report and the gates look at each file several times)."""
    stamp = os.stat(path).st_mtime_ns
    hit = _FILES.get(path)
    if hit is None or hit[0] != stamp:
        with open(path) as f:
            text = f.read()
        hit = _FILES[path] = (stamp, text, ast.parse(text, path))
    return hit[1], hit[2]


_FILES: dict[str, tuple[int, str, ast.Module]] = {}


def parse(path: str) -> ast.Module:
    return _read(path)[1]


def text_of(path: str) -> str:
    return _read(path)[0]


def statements(body, nested: bool = False):
    """(statement, inside a function?) of every statement under `body`, however deep (imports
    and definitions are statements: walking them alone skips the expressions, most of a tree)."""
    for st in body:
        yield st, nested
        inner = nested or isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef))
        for field in ("body", "orelse", "finalbody"):
            yield from statements(getattr(st, field, None) or [], inner)
        for part in (getattr(st, "handlers", None) or []) + (getattr(st, "cases", None) or []):
            yield from statements(part.body, inner)


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


def _calls(path: str, words=()) -> list[str]:
    """The dotted names of the calls in a file (`sys.path.insert`, `Pool`, `client.submit`, ...);
    none where its text holds none of `words` (when given: a quick way past most files)."""
    names = []
    if words and not any(w in text_of(path) for w in words):
        return names
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
                  and any(c in ("sys.path.insert", "sys.path.append", "sys.path.extend") for c in _calls(p, ["sys.path"])))


def runners(mods: dict) -> list[str]:
    """Script modules other than `RUNNER` that start their own worker processes (a
    multiprocessing pool or process, a process pool executor) or hand a Dask client work."""
    own = ("Pool", "multiprocessing.Pool", "Process", "multiprocessing.Process", "ProcessPoolExecutor",
           "concurrent.futures.ProcessPoolExecutor", "client.submit", "client.map")
    return sorted(m for m, p in mods.items() if m != RUNNER and not m.startswith("regal")
                  and any(c in own for c in _calls(p, ["Pool", "Process", "client."])))


def imported_names(path: str, name: str | None = None) -> list[tuple[str, list[str], bool, int]]:
    """(module named, [module.attribute for each name it imports], inside a function?, line) of
    every import statement in the file at `path` (the module `name`: relative imports resolve
    against its package)."""
    name = module_name(path) if name is None else name
    package = name if os.path.basename(path) == "__init__.py" else name.rpartition(".")[0]
    found = []
    for st, nested in statements(parse(path).body):
        if isinstance(st, ast.Import):
            found.extend((a.name, [], nested, st.lineno) for a in st.names)
        elif isinstance(st, ast.ImportFrom):
            base = st.module or ""
            if st.level:
                parent = package.split(".")[:len(package.split(".")) - (st.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            found.append((base, [f"{base}.{a.name}" for a in st.names], nested, st.lineno))
    return found


def imports(path: str, mods: dict, name: str | None = None) -> list[tuple[str, bool, int]]:
    """(imported module of `mods`, inside a function?, line) of every import in the file."""
    me = module_name(path) if name is None else name
    found = []
    for base, attrs, nested, line in imported_names(path, me):
        found.extend((n, nested, line) for n in [base] + attrs if n in mods and n != me)
    return found


def graph(mods):
    edges = {}
    for name, path in mods.items():
        for target, nested, line in imports(path, mods, name):
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
        for node, _ in statements(parse(path).body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((node.end_lineno - node.lineno + 1, f"{name}.{node.name}"))
    return sorted(out, reverse=True)


# ---- The rules the layout gates hold (tests/test_layout.py; docs/development.md, "The gates") ----

#: A module of regal/ or baselines/ has at most this many lines.
MAX_MODULE_LINES = 600
#: A Numba kernel takes at most this many parameters (more: pass a struct, as `KernelGraph`,
#: `ClimbState` and `ClimbParams` do, docs/architecture.md's kernels room).
MAX_KERNEL_PARAMS = 12
#: The folders whose modules the size rule covers, and their packages.
SIZED = {"regal": "regal", "baselines": "regal_baselines"}
#: The top-level packages beside the library that it never imports: regal runs from its wheel,
#: which holds none of them.
NOT_FOR_THE_LIBRARY = ("benchmarks", "experiments", "data", "baselines", "regal_baselines", "tests")
#: The page whose table `LAYERS` is.
ARCHITECTURE = os.path.join("docs", "architecture.md")


def repo() -> str:
    return os.path.dirname(ROOT)


def line_count(path: str) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def module_sizes() -> dict[str, int]:
    """Lines of each module of the `SIZED` folders, by its path under the repository
    ("regal/kernels/climb.py")."""
    out = {}
    for folder, package in SIZED.items():
        top = os.path.join(repo(), folder)
        if os.path.isdir(top):
            for path in modules(top, package).values():
                out[os.path.relpath(path, repo()).replace(os.sep, "/")] = line_count(path)
    return out


def _dotted(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(parts[::-1])


def is_kernel(fn: ast.FunctionDef) -> bool:
    """Decorated with Numba's `njit` or `jit`, called or bare, however it is spelled
    (`@numba.njit(**JIT)`, `@njit`, `@nb.jit(nopython=True)`)."""
    return any(_dotted(d.func if isinstance(d, ast.Call) else d).rpartition(".")[2] in ("njit", "jit")
               for d in fn.decorator_list)


def parameter_count(fn: ast.FunctionDef) -> int:
    a = fn.args
    return len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)


def kernel_signatures(mods: dict) -> dict[str, tuple[int, str, int]]:
    """Each Numba kernel of `mods` ("regal.kernels.greedy._greedy_pick") -> (its parameters, its file,
    its line)."""
    out = {}
    for name, path in mods.items():
        for node, _ in statements(parse(path).body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_kernel(node):
                key, count = f"{name}.{node.name}", parameter_count(node)
                if count >= out.get(key, (-1,))[0]:
                    out[key] = (count, os.path.relpath(path, repo()).replace(os.sep, "/"), node.lineno)
    return out


def sized_modules() -> dict[str, str]:
    """The modules of the `SIZED` folders (the library and the baselines): their kernels are held
    to `MAX_KERNEL_PARAMS`."""
    out = {}
    for folder, package in SIZED.items():
        top = os.path.join(repo(), folder)
        if os.path.isdir(top):
            out.update(modules(top, package))
    return out


def upward_imports(edges) -> list[tuple[str, str, int]]:
    """(importer, imported, line) of each import of a module of a higher room (`LAYERS`)."""
    out = []
    for a, e in sorted(edges.items()):
        for b, (_, line) in sorted(e.items()):
            la, lb = layer_of(a), layer_of(b)
            if la is not None and lb is not None and lb > la:
                out.append((a, b, line))
    return out


def front_api_imports(mods: dict) -> list[tuple[str, str, int]]:
    """(module, what, line): modules of regal/ below the front that import the package `regal`
    itself (`import regal`, `from regal import NAME` where NAME is no module): the names of
    `regal/__init__.py` are the front's."""
    front = len(LAYERS) - 1
    out = []
    for name, path in sorted(mods.items()):
        rank = layer_of(name)
        if rank is None or rank == front:
            continue
        for base, attrs, _, line in imported_names(path, name):
            if base == "regal" and not attrs:
                out.append((name, "import regal", line))
            elif base == "regal":
                out.extend((name, f"from regal import {a[6:]}", line) for a in attrs if a not in mods)
    return out


def script_imports(mods: dict) -> list[tuple[str, str, int]]:
    """(module, imported, line): imports in the library of the scripts' and data's packages
    (`NOT_FOR_THE_LIBRARY`), as statements or as `importlib.import_module("...")` of a constant."""
    out = []

    def banned(target: str) -> bool:
        return target.partition(".")[0] in NOT_FOR_THE_LIBRARY

    for name, path in sorted(mods.items()):
        for base, _, _, line in imported_names(path, name):
            if banned(base):
                out.append((name, base, line))
        if "import_module" not in text_of(path) and "__import__" not in text_of(path):
            continue
        for node in ast.walk(parse(path)):
            if (isinstance(node, ast.Call) and _dotted(node.func) in ("importlib.import_module", "import_module",
                                                                       "__import__")
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                    and banned(node.args[0].value)):
                out.append((name, node.args[0].value, node.lineno))
    return out


def unplaced(mods: dict) -> list[str]:
    return sorted(m for m in mods if layer_of(m) is None)


def _doc_name(token: str) -> str:
    """`_jit` -> regal._jit, `policy/names` -> regal.policy.names, `policy/` -> regal.policy."""
    return "regal." + token.strip("/").replace("/", ".")


def doc_rooms(path: str | None = None, mods: dict | None = None) -> list[tuple[str, list[str]]]:
    """The rooms of docs/architecture.md's table, in its order: (room, the modules its "modules"
    column names). A name in parentheses after a module is one of its submodules where such a
    module exists (`graph` (`records`, `core`) -> regal.graph.records, regal.graph.core); the
    other words there are prose."""
    path = os.path.join(repo(), ARCHITECTURE) if path is None else path
    mods = modules() if mods is None else mods
    rows = []
    with open(path) as f:
        lines = [ln for ln in f if ln.startswith("|")]
    if not lines or [c.strip() for c in lines[0].strip().strip("|").split("|")][:2] != ["room", "modules"]:
        raise ValueError(f"{path}: no table | room | modules | ... found")
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        names, parent, depth, i, text = [], None, 0, 0, cells[1]
        while i < len(text):
            c = text[i]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            elif c == "`":
                end = text.index("`", i + 1)
                token = text[i + 1:end]
                if depth == 0:
                    parent = _doc_name(token)
                    names.append(parent)
                elif parent is not None and f"{parent}.{token}" in mods:
                    names.append(f"{parent}.{token}")
                i = end
            i += 1
        rows.append((cells[0], names))
    return rows


def layers_against_doc(mods: dict, path: str | None = None) -> list[str]:
    """How `LAYERS` and docs/architecture.md's table disagree (nothing when they are one list):
    the rooms and their order, each module's room, and names of modules that do not exist."""
    rows = doc_rooms(path, mods)
    out = []
    if [r for r, _ in rows] != [r for r, _ in LAYERS]:
        out.append(f"rooms: the page lists {[r for r, _ in rows]}, LAYERS {[r for r, _ in LAYERS]}")
        return out
    listed = {n for _, names in rows for n in names}
    for room, names in rows:
        for n in names:
            if n != "regal.__init__" and n not in mods and not any(m.startswith(n + ".") for m in mods):
                out.append(f"the page's {room} room names {n}, which is no module")
    for room, names in LAYERS:
        for n in names:
            if n != "regal.__init__" and n not in mods and not any(m.startswith(n + ".") for m in mods):
                out.append(f"LAYERS' {room} room names {n}, which is no module")
            elif n not in listed and n != "regal.__init__":
                out.append(f"LAYERS' {room} room names {n}, which the page does not")

    def doc_room(m):
        m = "regal.__init__" if m == "regal" else m
        best, found = -1, None
        for room, names in rows:
            for p in names:
                if (m == p or m.startswith(p + ".")) and len(p) > best:
                    best, found = len(p), room
        return found

    for m in sorted(mods):
        a, b = doc_room(m), layer_of(m)
        b = LAYERS[b][0] if b is not None else None
        if a != b:
            out.append(f"{m}: in the page's {a or 'no'} room, in LAYERS' {b or 'no'} room")
    return out


def main(argv=None) -> int:
    global ROOT
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
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
    up = [f"{a} ({LAYERS[layer_of(a)][0]}) -> {b} ({LAYERS[layer_of(b)][0]}), line {line}"
          for a, b, line in upward_imports(edges)]
    up += [f"{m} -> the package's front ({what}), line {line}" for m, what, line in front_api_imports(mods)]
    print(f"upward imports: {len(up)}")
    for line in up:
        print("  " + line)
    banned = script_imports(mods)
    print(f"imports of {', '.join(NOT_FOR_THE_LIBRARY)} in the library: {len(banned)}")
    for m, target, line in banned:
        print(f"  {m} -> {target}, line {line}")
    if unplaced(mods):
        print("modules in no layer: " + ", ".join(unplaced(mods)))
    if not argv:
        for line in layers_against_doc(mods):
            print(f"LAYERS and {ARCHITECTURE} disagree: {line}")
    sizes = sorted(((line_count(p), m) for m, p in mods.items()), reverse=True)
    print(f"modules over {MAX_MODULE_LINES} lines: {sum(n > MAX_MODULE_LINES for n, _ in sizes)}")
    print("ten largest modules:")
    for n, m in sizes[:10]:
        print(f"  {n:5d}  {m}")
    kernels = sorted(((k, name) for name, (k, _, _) in kernel_signatures(mods).items()), reverse=True)
    print(f"kernels: {len(kernels)}, over {MAX_KERNEL_PARAMS} parameters: "
          f"{sum(k > MAX_KERNEL_PARAMS for k, _ in kernels)}")
    for k, name in kernels[:8]:
        print(f"  {k:5d}  {name}")
    funcs = functions(mods)
    print(f"functions over 80 lines: {sum(n > 80 for n, _ in funcs)}")
    print("ten longest functions:")
    for n, f in funcs[:10]:
        print(f"  {n:5d}  {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
