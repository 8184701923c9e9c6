#!/bin/bash
# One prepared run on a lent GPU machine (docs/development.md, "The device machine"): regal's
# planned training steps run on CUDA and measured by the caching allocator beside what a
# PyTorch user runs (docs/planned-steps.md). Called from the repository root with $OUT set:
#   bash benchmarks/device_check.sh      (carry .whl: the pymetis wheel for the image's Python)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:. || exit 1
export PYTHONUNBUFFERED=1
{ lscpu | grep -E "Model name|^CPU\(s\)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import numba, numpy, torch; print('numba', numba.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__)"
  git rev-parse --short HEAD 2>/dev/null; } 2>&1 | tee "$OUT/machine.txt"
# the planned training steps on CUDA, against eager, optimizer-in-backward and torch.compile
# (issue 46; the CPU table is experiments/results/torch-steps/table_cpu.md); then the plans-run tests
timeout 420 python3 -m experiments.torch_steps --device cuda --budget 2000 --timeout 100 --out "$OUT/ts" 2>&1 \
    | tee "$OUT/torch_steps.log"
timeout 120 python3 -m pytest -q -x tests/test_torch_step.py 2>&1 | tail -3 | tee "$OUT/pytest.log"
tar czf "$OUT/torch_steps_cuda.tar.gz" -C "$OUT" ts && rm -rf "$OUT/ts"
