#!/bin/bash
# One prepared run on a lent GPU machine (docs/development.md, "The device machine"): the timed
# evaluation against a peak one on the host's own CPU (issue 36: "on both machine types"), and
# the zoo's plans run on CUDA and measured by the caching allocator with the current flagship
# (docs/plans-that-run.md). Called from the repository root with $OUT set:
#   bash benchmarks/device_check.sh      (carry .whl: the pymetis wheel for the image's Python)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:. || exit 1
export PYTHONUNBUFFERED=1
{ lscpu | grep -E "Model name|^CPU\(s\)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import numba, numpy, torch; print('numba', numba.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__)"
  git rev-parse --short HEAD 2>/dev/null; } 2>&1 | tee "$OUT/machine.txt"
# one core, the rest of the machine idle
timeout 240 taskset -c 0 python3 -m benchmarks.bench_timed --repeats 7 --devices 1 2 4 --sizes 1000 10000 \
    --out "$OUT/timed_device.md" 2>&1 | tee "$OUT/timed.log"
timeout 300 python3 -m experiments.torch_plans --device cuda --devices 1 --no-inductor --out "$OUT/tp" 2>&1 \
    | tee "$OUT/torch_plans.log"
tar czf "$OUT/torch_plans_cuda.tar.gz" -C "$OUT" tp && rm -rf "$OUT/tp"
