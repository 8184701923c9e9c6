"""The Numba kernels: every `@njit` of the searches and models, structs in, arrays out
(docs/architecture.md, the kernels room).

`structs` holds the structs they take (`KernelGraph`, `ClimbState`, `ClimbParams`); `peak_memory`
the simulator (SPEC.md 3); `decode` the chromosome's decode and BRKGA's population kernels
(SPEC.md 5); `orders`, `greedy`, `heft` the list schedules; `climb` the local search's climb and
`climb_picks` a move policy's picks and their credit; `timed` the timed model (SPEC.md 4);
`pack`, `minimalloc`, `alloc` the packers and XLA-style buffer assignment; `heap` the binary heap
the list schedulers share. Each has a naive twin in tests/naive*.py. Recomputation's kernels
(`regal._remat`, `regal._remat_climb`) are in the same room, beside the package.
"""
