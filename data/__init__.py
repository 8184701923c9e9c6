"""Data set builders: the Haiku model zoo traced to XLA HLO graphs, and REGAL-style synthetic DAGs.

Not part of the installed `regal` package; run the builders from the repository root
(`python -m data.build_dataset`, `python -m data.synthetic`, `python -m data.stats`).
"""
