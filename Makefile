# Two entry points that work on a fresh machine with only Python: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

STAGE := build/stage
# the build backend's notes about editable installs are not the user's to act on: `make demo`
# shows the demo, not setuptools (errors still stop the install and are printed)
PIP_QUIET := PYTHONWARNINGS=ignore::UserWarning

.PHONY: demo test lint typecheck clean venv stage test-min docs

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(PIP_QUIET) $(BIN)/python -m pip install --quiet -e '.[dev,mcp,cost]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/stowage demo

# pytest-xdist: one worker more than the 2 cores this was measured on (many tests wait on a
# timeout, a server or a child process: 3 workers keep both cores busy; 2 took half again as
# long, 4 no shorter); --dist loadfile keeps each file on one worker, so a module's fixtures (the
# crash runs, the built wheel, the console's demo store) are made once
TEST_WORKERS ?= 3
XDIST := -n $(TEST_WORKERS) --dist loadfile

test: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST)

# The suite against the lowest versions of the core dependencies that pyproject.toml declares.
.venv-min/.installed: pyproject.toml .ci/constraints-min.txt
	test -d .venv-min || $(PYTHON) -m venv .venv-min
	.venv-min/bin/python -m pip install --quiet --upgrade pip
	$(PIP_QUIET) .venv-min/bin/python -m pip install --quiet -e '.[dev]' -c .ci/constraints-min.txt
	touch .venv-min/.installed

test-min: .venv-min/.installed
	.venv-min/bin/python -m pytest -q -p no:cacheprovider $(XDIST)

# A tree of symlinks shaped like the wheel (runtime/ as stowage/, actors/ and storage/ inside it),
# for the tools that cannot follow the editable install's folder mapping: mypy and import-linter.
stage:
	rm -rf $(STAGE) && mkdir -p $(STAGE)/stowage
	cp -rs $(CURDIR)/runtime/. $(STAGE)/stowage/
	cp -rs $(CURDIR)/actors $(STAGE)/stowage/actors
	cp -rs $(CURDIR)/storage $(STAGE)/stowage/storage
	find $(STAGE) -name __pycache__ -prune -exec rm -rf {} +

lint: $(STAMP) stage
	$(BIN)/ruff check runtime actors storage tests scripts
	$(BIN)/ruff format --check runtime actors storage tests scripts
	cd $(STAGE) && PYTHONPATH=. $(CURDIR)/$(BIN)/lint-imports $(CURDIR)/pyproject.toml

typecheck: $(STAMP) stage
	cd $(STAGE) && $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml -p stowage

# The documentation site into site/, warnings as errors (mkdocs.yml; its hook stages the package
# under build/docs-stage for the API reference). Material for MkDocs prints a notice of its end
# of life (May 2027) on every build; NO_MKDOCS_2_WARNING keeps the build's output to the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) build site .pytest_cache .mypy_cache .ruff_cache .stowage
