"""The Numba JIT options, set in one place for every kernel module (stumpy / umap style).

`JIT`: a sequential kernel (the GIL released, compiled code cached on disk); `PARALLEL_JIT`: a
kernel with a `prange` loop over the population; `UINDEX`: the type hot loops cast array indices
to.
"""

import numpy as np

JIT = dict(nogil=True, cache=True)
PARALLEL_JIT = dict(parallel=True, nogil=True, cache=True)
#: Hot loops cast array indices to this unsigned type: Numba wraps every signed index around
#: (`a[-1]`), two or three instructions per access (10-15 % of the simulator's sweep, issue 36).
UINDEX = np.uint64
