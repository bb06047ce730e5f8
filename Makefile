# modelplane: set-up, the embedded default, and the tests.
# `make local` and `make test` are the two commands in README.md; both set everything up first.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup engine local test test-prometheus prometheus lint typecheck bench clean-local cel-tables hydrate-requirements

# The exact versions it is tested with (constraints.txt) within pyproject.toml's ranges.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# The Pulumi CLI, the Python language host and the Kubernetes provider, cached per user
# (built from Go modules when not installed; minutes the first time, seconds after).
engine: $(STAMP)
	$(BIN)/python -m modelplane.toolchain install

# Bytecode for the package and the stack program: every engine run and `modelplane` process
# imports them, and an environment with PYTHONDONTWRITEBYTECODE (common in containers) would
# otherwise compile them from source in each (about 0.2 s of CPU per process).
setup: engine
	$(BIN)/python -m compileall -q modelplane stacks

# The embedded default: the local fleet through the real engine on the local file backend.
# Its secrets passphrase is the documented local one unless you export your own.
local: setup
	PULUMI_CONFIG_PASSPHRASE="$${PULUMI_CONFIG_PASSPHRASE-modelplane-local}" \
		$(BIN)/modelplane up specs/local --yes
	@echo
	@echo "manifests:  specs/local/rendered/1-manifest/ ($$(ls specs/local/rendered/1-manifest | wc -l) files)"
	@echo "state:      specs/local/.modelplane/state (Pulumi file backend)"
	@echo "placement:  specs/local/modelplane.lock.yaml"
	@echo "next:       .venv/bin/modelplane status specs/local   (with PULUMI_CONFIG_PASSPHRASE=modelplane-local)"

# Two lanes (tests/fixtures/lanes.py): the dev-fleet modules in one worker, the rest beside.
test: setup
	$(BIN)/python -m pytest -q --durations=30 -n 2 --dist loadgroup --no-loadscope-reorder

# The dev fleet's Prometheus (optional: 25-45 min cold on 2 cores) and the tests that use it
# (`make test` deselects them and says so).
prometheus: $(STAMP)
	$(BIN)/python -m modelplane.toolchain install prometheus

test-prometheus: setup prometheus
	MODELPLANE_TEST_PROMETHEUS=1 $(BIN)/python -m pytest -q -m prometheus

# celpy's CEL grammar as ready parser tables (modelplane/cel/grammar.py); after a celpy upgrade.
cel-tables: $(STAMP)
	$(BIN)/python -m modelplane.cel.grammar > modelplane/cel/parser_tables.py.new
	mv modelplane/cel/parser_tables.py.new modelplane/cel/parser_tables.py

# The ModelCache hydration Job's pinned, hashed requirements (network to PyPI), after a
# change of modelplane/components/manifests/hydrate_requirements.py's PIN (security review M10).
hydrate-requirements: $(STAMP)
	$(BIN)/python -m modelplane.components.manifests.hydrate_requirements

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

# The components against the provider SDKs' type hints (strict on modelplane/components/cloud/); also run
# by `make test` (tests/components/test_typecheck.py). About a minute of CPU the first time (only the SDK
# modules the components use are read), seconds after (.mypy_cache).
typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/plan_scale.py
	$(BIN)/python bench/render_scale.py

clean-local:
	rm -rf specs/local/.modelplane specs/local/rendered
