# Every target sets up .venv itself, so a fresh machine needs only python3 and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Every distribution in the repository: the core, the shipped carriers, the kept plugins.
DISTS := $(patsubst %/pyproject.toml,%,$(wildcard core/pyproject.toml carriers_*/pyproject.toml plugins/*/pyproject.toml))
PACKAGES := conveyor $(filter-out %.egg-info,$(notdir $(wildcard carriers_*/src/conveyor_* plugins/*/src/conveyor_*)))
STAMP := $(VENV)/.installed

.PHONY: run test test-metal lint typecheck pytest bench clean

$(STAMP): pyproject.toml $(addsuffix /pyproject.toml,$(DISTS))
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, alone: it resolves to the CPU build here, and the metal extra's tilelang
	# would otherwise pull a CUDA torch of several GB.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	# compat editable mode puts src/ on sys.path through a .pth file, which mypy can follow.
	# setuptools says it will remove that mode; every pyproject caps setuptools below 85 so a
	# release that does cannot break a fresh install (84.2.1 is the newest, and works).
	$(BIN)/python -m pip install --quiet --config-settings editable_mode=compat \
		$(foreach d,$(DISTS),-e ./$(d)) -e '.[test,demo,metal]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/conveyor demo

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python tools/private_writes.py

typecheck: $(STAMP)
	$(BIN)/mypy $(foreach p,$(PACKAGES),-p $(p))

# One worker per core (pytest-xdist); tests sharing a wider fixture share one (tests/conftest.py).
# Bytecode is cached even where PYTHONDONTWRITEBYTECODE is set: every worker and every
# subprocess of the suite would otherwise compile the sources and rewrite the tests again.
pytest: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n auto

test: lint typecheck pytest

# The full Metal sweep: every advertised plan's kernels lowered with TileLang (about 1,900,
# 23 min cold on an idle 2-core machine; the lowered sources are cached under the temporary
# folder, so a rerun takes minutes). `make test` leaves it out (pyproject's addopts); CI runs both.
test-metal: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n auto -m metal_sweep tests/metal

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	for script in benchmarks/*.py; do $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
