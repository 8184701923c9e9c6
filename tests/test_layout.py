"""The layout gates (docs/development.md, "The gates"): docs/architecture.md's rules, held on every
`make test` with benchmarks/layout_report.py's analysis (`python -m benchmarks.layout_report`
prints the same numbers).

- no import circle among the library and the scripts, not even through an import inside a function;
- no upward import: a module imports only its own room and the rooms above it, and a module below
  the front does not import the package `regal` itself (its names are the front's);
- the library (regal/) never imports benchmarks/, experiments/, data/, baselines/ or tests/;
- every module of regal/ is in a room, and the report's `LAYERS` is docs/architecture.md's table;
- a module of regal/ or baselines/ has at most 600 lines (`MAX_MODULE_LINES`);
- a Numba kernel (a function decorated with `njit` / `jit`) takes at most 12 parameters
  (`MAX_KERNEL_PARAMS`).

The modules and kernels that broke the last two rules when the gates were set (issue 57) are
allowed below, each with its size then as a ceiling: they may shrink, never grow, and their entry
goes when they meet the rule (the modules are split later).
"""

import ast
import os

import pytest

from benchmarks import layout_report as layout

#: Modules over `MAX_MODULE_LINES` when the gates were set: path -> its lines then, a ceiling.
#: Never raise one; delete the entry when the module is split below the limit.
LONG_MODULES: dict[str, int] = {}

#: Kernels over `MAX_KERNEL_PARAMS` when the gates were set: kernel -> its parameters then, a
#: ceiling. Never raise one; delete the entry when its arguments are bundled into structs.
WIDE_KERNELS: dict[str, int] = {}

SEE = "(docs/architecture.md; docs/development.md, \"The gates\")"


class Tree:
    """One reading of the repository: every gate looks at it."""

    def __init__(self):
        self.mods = layout.modules()
        self.scripts = layout.script_modules()
        self.edges = layout.graph(self.mods)
        self.all_edges = layout.graph(self.mods | self.scripts)
        self.sizes = layout.module_sizes()
        self.kernels = layout.kernel_signatures(layout.sized_modules())


@pytest.fixture(scope="module")
def tree():
    return Tree()


def _fail(problems: list[str], what_to_do: str):
    if problems:
        pytest.fail(f"{len(problems)} layout problem(s):\n  " + "\n  ".join(problems) + "\n"
                    + " ".join(filter(None, [what_to_do, SEE])), pytrace=False)


def circle_problems(edges) -> list[str]:
    out = []
    for comp in layout.circles(edges):
        links = [f"{a} imports {b} (line {line}{', inside a function' if nested else ''})"
                 for a in comp for b, (nested, line) in sorted(edges.get(a, {}).items()) if b in comp]
        out.append("import circle " + " <-> ".join(comp) + ": " + "; ".join(links))
    return out


def upward_problems(mods, edges) -> list[str]:
    rooms = [name for name, _ in layout.LAYERS]
    out = [f"{a} ({rooms[layout.layer_of(a)]}) imports {b} ({rooms[layout.layer_of(b)]}), line {line}: "
           f"an upward import" for a, b, line in layout.upward_imports(edges)]
    out += [f"{m} ({rooms[layout.layer_of(m)]}): `{what}`, line {line}: the package's names are the front's; "
            f"import the module that defines the name" for m, what, line in layout.front_api_imports(mods)]
    return out


def size_problems(sizes: dict, allowed: dict) -> list[str]:
    out = []
    for path, n in sorted(sizes.items()):
        ceiling = allowed.get(path)
        if ceiling is None and n > layout.MAX_MODULE_LINES:
            out.append(f"{path}: {n} lines, over the {layout.MAX_MODULE_LINES}-line limit of a module of regal/ "
                       f"or baselines/: split it by concern (each part in its room), or put the new code in a "
                       f"module of its own; do not add it to LONG_MODULES")
        elif ceiling is not None and n > ceiling:
            out.append(f"{path}: {n} lines, over its ceiling of {ceiling} (LONG_MODULES in tests/test_layout.py: "
                       f"an exception to the {layout.MAX_MODULE_LINES}-line limit until it is split, which "
                       f"may not grow): put the new code in another module or split this one; do not raise "
                       f"the ceiling")
    return out


def kernel_problems(kernels: dict, allowed: dict) -> list[str]:
    out = []
    for name, (n, path, line) in sorted(kernels.items()):
        ceiling = allowed.get(name)
        where = f"{name} ({path}:{line})"
        if ceiling is None and n > layout.MAX_KERNEL_PARAMS:
            out.append(f"{where}: a Numba kernel with {n} parameters, over the limit of "
                       f"{layout.MAX_KERNEL_PARAMS}: pass arrays that travel together as one NamedTuple "
                       f"struct (as `KernelGraph`, `ClimbState`, `ClimbParams` do); do not add it to "
                       f"WIDE_KERNELS")
        elif ceiling is not None and n > ceiling:
            out.append(f"{where}: {n} parameters, over its ceiling of {ceiling} (WIDE_KERNELS in "
                       f"tests/test_layout.py: an exception to the limit of {layout.MAX_KERNEL_PARAMS} "
                       f"that may not grow): bundle the new argument with others into a struct; do not "
                       f"raise the ceiling")
    return out


def stale_entries(sizes: dict, kernels: dict) -> list[str]:
    """Allow-list entries whose module or kernel is gone or meets the rule now."""
    out = [f"LONG_MODULES[{path!r}]: the module is {'gone' if path not in sizes else f'{sizes[path]} lines'}, "
           f"within the rule: delete the entry, so that it cannot grow back"
           for path in LONG_MODULES if sizes.get(path, 0) <= layout.MAX_MODULE_LINES]
    out += [f"WIDE_KERNELS[{name!r}]: the kernel "
            f"{'is gone' if name not in kernels else f'takes {kernels[name][0]} parameters'}, within the rule: "
            f"delete the entry, so that it cannot grow back"
            for name in WIDE_KERNELS if kernels.get(name, (0,))[0] <= layout.MAX_KERNEL_PARAMS]
    return out


def test_no_import_circle(tree):
    _fail(circle_problems(tree.all_edges),
          "Break each circle: move what both sides need down into the lower module (or its room), or "
          "pass it in as an argument; an import inside a function still counts.")


def test_no_upward_import(tree):
    _fail(upward_problems(tree.mods, tree.edges),
          "A module imports only its own room and the rooms above it: move the code it needs up (into its "
          "room or one above), or move the importing module down a room, in LAYERS and in the page's table.")


def test_the_library_never_imports_the_scripts(tree):
    _fail([f"{m} imports {target} (line {line})" for m, target, line in layout.script_imports(tree.mods)],
          f"The library runs from its wheel, which holds none of {', '.join(layout.NOT_FOR_THE_LIBRARY)}: "
          "move what it needs into regal/ (the scripts may import the library, never the reverse).")


def test_every_module_is_in_a_room(tree):
    _fail([f"{m} is in no room" for m in layout.unplaced(tree.mods)],
          "Add each to the room it belongs to, in docs/architecture.md's table (the modules column, and a "
          "word on what it holds) and in LAYERS in benchmarks/layout_report.py, the same room in both.")


def test_layers_is_the_architecture_pages_table(tree):
    _fail(layout.layers_against_doc(tree.mods),
          "LAYERS in benchmarks/layout_report.py and docs/architecture.md's table must be one list: "
          "make them agree.")


def _is_command(name: str) -> bool:
    """A command module: regal.commands.X, X not private (`_common`, `_report`: their helpers)."""
    parts = name.split(".")
    return len(parts) == 3 and parts[:2] == ["regal", "commands"] and not parts[2].startswith("_")


def test_no_command_imports_another(tree):
    _fail([f"{a} imports {b} (line {line})" for a, targets in sorted(tree.edges.items()) if _is_command(a)
           for b, (_, line) in sorted(targets.items()) if _is_command(b) and b != a],
          "A command's helpers are the commands' (regal/commands/_common.py, _report.py): move what both "
          "use there.")


#: Private names that cross a package, allowed: "importer -> module.name". Never add one.
PRIVATE_CROSSINGS: set = set()


def private_crossings(mods: dict) -> list[str]:
    """Each private name (`_x`, not dunder) that a module of regal/ imports, or reads as an
    attribute of an imported module, from a module of another package: "importer -> module.name"."""
    out = set()
    for name, path in mods.items():
        package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
        tree_ = layout.parse(path)
        aliases = {}
        for node in ast.walk(tree_):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "regal":
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if full in mods:   # a module imported by name
                        aliases[a.asname or a.name] = full
                    elif a.name.startswith("_") and not a.name.startswith("__"):
                        src_path = mods.get(node.module, "")
                        src_package = node.module if src_path.endswith("__init__.py") else node.module.rsplit(".", 1)[0]
                        if src_package != package:
                            out.add(f"{name} -> {node.module}.{a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname and a.name in mods:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree_):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                target = aliases[node.value.id]
                t_package = target if mods[target].endswith("__init__.py") else target.rsplit(".", 1)[0]
                if t_package != package:
                    out.add(f"{name} -> {target}.{node.attr}")
    return sorted(out)


def test_no_private_name_crosses_a_package(tree):
    found = private_crossings(tree.mods)
    _fail([f"{x}: a private name used from another package" for x in found if x not in PRIVATE_CROSSINGS]
          + [f"PRIVATE_CROSSINGS[{x!r}]: no longer used, delete the entry" for x in PRIVATE_CROSSINGS
             if x not in found],
          "Make the name public in its module (no leading underscore) if another package needs it, or move "
          "the code that needs it into that package.")


def test_module_sizes(tree):
    _fail(size_problems(tree.sizes, LONG_MODULES), "")


def test_kernel_signatures(tree):
    _fail(kernel_problems(tree.kernels, WIDE_KERNELS), "")


def test_the_allow_lists_hold_only_exceptions(tree):
    _fail(stale_entries(tree.sizes, tree.kernels), "An entry goes when its module or kernel meets the rule.")


# ---- The gates catch what they should: a small tree with one of each problem ----

_BAD_TREE = {
    "regal/__init__.py": "",
    "regal/_jit.py": "def f():\n    import regal.flagship\n",                       # up, in a function; a circle
    "regal/flagship.py": "from regal import _jit\n",
    "regal/heuristics.py": ("import importlib\nfrom regal import optimize\nimport experiments.run\n"
                            "importlib.import_module('benchmarks.bench_engine')\n"),
    "regal/newthing.py": "",                                                         # in no room
    "regal/kernels/decode.py": ("import numba\n\n\n@numba.njit(cache=True)\ndef wide(" + ", ".join(f"a{i}" for i in range(13))
                          + "):\n    return a0\n\n\n@numba.njit\ndef narrow(a, b):\n    return a\n"
                          + "\n" * 600),                                              # 13 parameters; 611 lines
}


@pytest.fixture
def bad_tree(tmp_path, monkeypatch):
    for rel, text in _BAD_TREE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.setattr(layout, "ROOT", str(tmp_path / "regal"))
    return tmp_path


def test_the_gates_catch_each_problem(bad_tree):
    mods = layout.modules()
    edges = layout.graph(mods)
    assert circle_problems(edges) == ["import circle regal._jit <-> regal.flagship: regal._jit imports "
                                      "regal.flagship (line 2, inside a function); regal.flagship imports "
                                      "regal._jit (line 1)"]
    up = upward_problems(mods, edges)
    assert any(p.startswith("regal._jit (primitives) imports regal.flagship (searches), line 2") for p in up), up
    assert any("regal.heuristics (heuristics): `from regal import optimize`" in p for p in up), up
    assert [(m, t) for m, t, _ in layout.script_imports(mods)] == [("regal.heuristics", "experiments.run"),
                                                                   ("regal.heuristics", "benchmarks.bench_engine")]
    assert layout.unplaced(mods) == ["regal.newthing"]
    sizes = layout.module_sizes()
    assert sizes["regal/kernels/decode.py"] == 611
    assert [p.split(":")[0] for p in size_problems(sizes, {})] == ["regal/kernels/decode.py"]
    assert "over its ceiling of 610" in size_problems(sizes, {"regal/kernels/decode.py": 610})[0]
    assert size_problems(sizes, {"regal/kernels/decode.py": 611}) == []
    kernels = layout.kernel_signatures(mods)
    assert {k: v[0] for k, v in kernels.items()} == {"regal.kernels.decode.wide": 13, "regal.kernels.decode.narrow": 2}
    assert len(kernel_problems(kernels, {})) == 1 and "regal/kernels/decode.py:5" in kernel_problems(kernels, {})[0]
    assert kernel_problems(kernels, {"regal.kernels.decode.wide": 13}) == []


def test_the_doc_table_is_read_as_written(tree):
    """The page's table, parsed: submodules in parentheses where they exist, prose skipped."""
    rooms = dict(layout.doc_rooms(mods=tree.mods))
    assert list(rooms) == [name for name, _ in layout.LAYERS]
    assert "regal.policy.loader" in rooms["policy"] and "regal.policy.Policy" not in rooms["policy"]
    assert {"regal.torch", "regal.torch.step"} <= set(rooms["tools"])
    assert "regal.torch.importer" in rooms["importers"] and "regal.__init__" in rooms["front"]
    assert len(tree.kernels) > 100 and os.path.basename(layout.ROOT) == "regal"
