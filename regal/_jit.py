"""The Numba JIT options, set in one place for every kernel module (stumpy / umap style).

`JIT`: a sequential kernel (the GIL released, compiled code cached on disk); `PARALLEL_JIT`: a
kernel with a `prange` loop over the population.
"""

JIT = dict(nogil=True, cache=True)
PARALLEL_JIT = dict(parallel=True, nogil=True, cache=True)
