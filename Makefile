# Two commands on a fresh machine with Python 3.11 and pip:
#   make demo   - create .venv, install regal, optimize a shipped real graph (plain BRKGA, then regal's flagship)
#   make test   - create .venv, install regal, run the linter (make lint) and the default test suite
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
DEMO_GRAPH ?= data/graphs/real/vit_l8_d256_b8_train_opt.json.gz

.PHONY: demo lint test test-slow bench clean clean-numba-cache

$(BIN)/.installed: setup.cfg pyproject.toml constraints.txt
	@echo "== 1/4 creating $(VENV) with $(PY) (seconds)"
	$(PY) -m venv $(VENV)
	@echo "== 2/4 upgrading pip"
	$(BIN)/python -m pip install -q --upgrade "pip>=23"
	@echo "== 3/4 installing regal and its pinned dependencies (NumPy, Numba, JAX, PyTorch...: a minute or more, longer without a pip cache)"
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test]'
	@echo "== 4/4 compiling every Numba kernel once, into Numba's cache (about two minutes on 2 cores; later runs load them)"
	$(BIN)/python -c "import regal; regal.warmup()"
	@echo "== installed: $(BIN)/regal"
	touch $@

demo: $(BIN)/.installed
	@echo "== plain BRKGA, 5,000 evaluations"
	$(BIN)/regal solve brkga $(DEMO_GRAPH) --devices 2 --budget 5000 --seed 0 -o demo_brkga.json
	@echo "== regal optimize: the flagship (memetic REGAL), same budget and seed"
	$(BIN)/regal optimize $(DEMO_GRAPH) --devices 2 --budget 5000 --seed 0 -o demo_solution.json

# The linter (ruff, pinned in constraints.txt, rules in pyproject.toml), a gate of `make test`;
# the layout gates are a test of the suite (tests/test_layout.py). docs/development.md: "The gates".
lint: $(BIN)/.installed
	$(BIN)/ruff check --no-cache .

# The suite runs on every core (pytest-xdist, -n auto); TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= auto

test: $(BIN)/.installed lint
	@echo "== the default test suite (slow tests deselected: make test-slow) on $(TEST_WORKERS) workers; a dot per test"
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

test-slow: $(BIN)/.installed
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m slow

clean:
	rm -rf $(VENV) demo_solution.json demo_brkga.json

# Numba's on-disk cache is checked per source file: a kernel that calls one in another module keeps
# its compiled copy of the callee after only the callee's file changed. After editing a kernel
# module, clear it (the next run compiles everything again, a few minutes).
clean-numba-cache:
	find regal baselines -name '*.nbi' -delete -o -name '*.nbc' -delete
