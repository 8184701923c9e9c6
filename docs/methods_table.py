"""The README's method table, generated from the registry (regal.methods).

    python docs/methods_table.py            # print the table (Markdown)
    python docs/methods_table.py --write    # rewrite it in README.md, between the two markers

tests/test_readme.py checks that README.md holds exactly what this prints, so a method added to
or changed in the registry (or plugged in through the `regal.methods` entry point) shows up as a
failing test until the README is regenerated.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import regal.methods

BEGIN = "<!-- methods: generated from regal.methods by `python docs/methods_table.py --write`; do not edit -->"
END = "<!-- /methods -->"
README = Path(__file__).resolve().parent.parent / "README.md"


def table() -> str:
    """One row per registered method, in registry order (the library's first, the flagship on top)."""
    rows = ["| method | objective | evaluation budget | from | what it is |", "|---|---|---|---|---|"]
    for name in regal.methods.names():
        spec = regal.methods.get(name)
        description = spec.description.removeprefix("runtime: ").replace("|", "\\|")
        budget = "yes" if spec.takes_budget else "-"
        origin = "library" if spec.origin == "regal" else f"plug-in `{spec.origin}`"
        rows.append(f"| `{name}` | {spec.objective} | {budget} | {origin} | {description} |")
    return "\n".join(rows) + "\n"


def section(text: str) -> str:
    """The text between the markers of `text` (a README), markers excluded."""
    start = text.index(BEGIN) + len(BEGIN) + 1
    return text[start:text.index(END, start)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the table in README.md")
    args = parser.parse_args()
    if not args.write:
        print(table(), end="")
        return
    text = README.read_text()
    old = section(text)
    README.write_text(text.replace(BEGIN + "\n" + old + END, BEGIN + "\n" + table() + END, 1))


if __name__ == "__main__":
    main()
