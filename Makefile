# dawnbench: `make run` trains the default reference end to end; `make test` runs the test suite.
# Every target sets up what it needs (virtual environments under .venv/, datasets under data/).

PYTHON ?= python3
REF    ?= fashion-mnist-cnn-pytorch
ARGS   ?=
NPROC  ?= 1
RUNS   ?= 3
RUNTIME ?= auto
BASE_IMAGE ?=
FRAMEWORK_PIN ?=
VERSIONS ?=

REFS      := $(notdir $(patsubst %/,%,$(dir $(wildcard references/*/reference.toml))))
REF_DIR   := references/$(REF)
VENV      := .venv/$(REF)
TEST_VENV := .venv/test
TOOLS_VENV := .venv/tools
IMAGE_OPTS = $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) $(if $(FRAMEWORK_PIN),--framework-pin '$(FRAMEWORK_PIN)')
# pip prints a warning per missing local index folder of PIP_FIND_LINKS; keep the output readable
PIP_FLAGS := --quiet --disable-pip-version-check

.PHONY: run run-native run-docker build compare test list bench setup data help clean

help:
	@echo "make run [REF=name] [ARGS='--set lr=0.2 --seed 3 --max-epochs 30'] [NPROC=2] [RUNTIME=auto|docker|native]"
	@echo "make build [REF=name] [BASE_IMAGE=image:tag] [FRAMEWORK_PIN=tensorflow-cpu==2.20.0]"
	@echo "make compare REF=name VERSIONS='<pin A> <pin B>' [RUNS=3] [ARGS=...]"
	@echo "make test | make list | make bench [REF=name] [RUNS=3] | make setup [REF=name] | make clean"

check-ref:
	@test -f $(REF_DIR)/reference.toml || { echo "unknown reference '$(REF)'; available: $(REFS)" >&2; exit 2; }

# A virtual environment per reference, from its pinned requirements; the harness goes in editable.
$(VENV)/.installed: $(REF_DIR)/requirements.txt requirements/harness.txt pyproject.toml | check-ref
	@echo "setting up $(VENV) from $(REF_DIR)/requirements.txt"
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install $(PIP_FLAGS) -r $(REF_DIR)/requirements.txt 2>&1 | grep -v "^WARNING: Location" || true
	@$(VENV)/bin/pip check >/dev/null 2>&1 || { $(VENV)/bin/pip check; exit 1; }
	$(VENV)/bin/pip install $(PIP_FLAGS) --no-deps --no-build-isolation -e . 2>&1 | grep -v "^WARNING: Location" || true
	@$(VENV)/bin/python -c "import harness, common" && touch $@

setup: check-ref $(VENV)/.installed

data: setup
	$(VENV)/bin/dawnbench data fetch --reference $(REF)

# RUNTIME=auto: docker when an engine answers, else native; either way it says which it chose.
run: check-ref
	@case "$(RUNTIME)" in \
	  docker) echo "runtime: docker (RUNTIME=docker)"; $(MAKE) --no-print-directory run-docker ;; \
	  native) echo "runtime: native (RUNTIME=native)"; $(MAKE) --no-print-directory run-native ;; \
	  auto) if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then \
	          echo "runtime: docker (an engine answers; RUNTIME=native to run here)"; $(MAKE) --no-print-directory run-docker; \
	        else \
	          echo "runtime: native (no Docker engine answers; RUNTIME=docker to insist)"; $(MAKE) --no-print-directory run-native; \
	        fi ;; \
	  *) echo "RUNTIME=$(RUNTIME): expected auto, docker or native" >&2; exit 2 ;; \
	esac

# The host-side tools: the Docker SDK for images, matplotlib for comparison plots.
$(TOOLS_VENV)/.installed: requirements/tools.txt requirements/harness.txt pyproject.toml
	@echo "setting up $(TOOLS_VENV) from requirements/tools.txt"
	@test -x $(TOOLS_VENV)/bin/python || $(PYTHON) -m venv $(TOOLS_VENV)
	$(TOOLS_VENV)/bin/pip install $(PIP_FLAGS) -r requirements/tools.txt 2>&1 | grep -v "^WARNING: Location" || true
	$(TOOLS_VENV)/bin/pip install $(PIP_FLAGS) --no-deps --no-build-isolation -e . 2>&1 | grep -v "^WARNING: Location" || true
	@$(TOOLS_VENV)/bin/python -c "import harness, common, docker, matplotlib" && touch $@

build: check-ref $(TOOLS_VENV)/.installed
	$(TOOLS_VENV)/bin/python -m dawnbench.containers build $(REF) $(IMAGE_OPTS)

run-docker: check-ref $(TOOLS_VENV)/.installed
	$(TOOLS_VENV)/bin/dawnbench data fetch --reference $(REF)
	$(TOOLS_VENV)/bin/python -m dawnbench.containers run $(REF) $(IMAGE_OPTS) --nproc $(NPROC) -- $(ARGS)

compare: check-ref $(TOOLS_VENV)/.installed
	@test -n "$(VERSIONS)" || { echo "VERSIONS='<pin A> <pin B>': give two framework pins, e.g. VERSIONS='tensorflow-cpu==2.20.0 tensorflow-cpu==2.21.0'" >&2; exit 2; }
	$(TOOLS_VENV)/bin/python -m bench.compare $(REF) --versions $(VERSIONS) --runs $(RUNS) $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) -- $(ARGS)

run-native: data
ifeq ($(NPROC),1)
	$(VENV)/bin/dawnbench run $(REF) $(ARGS)
else
	@test -x $(VENV)/bin/torchrun || { echo "NPROC=$(NPROC): $(REF) has no torchrun (not a PyTorch reference); \
TensorFlow references use every local GPU through MirroredStrategy, run them without NPROC" >&2; exit 2; }
	$(VENV)/bin/torchrun --standalone --nproc-per-node $(NPROC) -m dawnbench run $(REF) $(ARGS)
endif

list: setup
	@$(VENV)/bin/dawnbench list

bench: data
	$(VENV)/bin/python -m bench.tta --reference $(REF) --runs $(RUNS)
	$(VENV)/bin/python -m bench.overhead --reference $(REF)

$(TEST_VENV)/.installed: requirements/test.txt requirements/harness.txt pyproject.toml
	@echo "setting up $(TEST_VENV) from requirements/test.txt"
	@test -x $(TEST_VENV)/bin/python || $(PYTHON) -m venv $(TEST_VENV)
	$(TEST_VENV)/bin/pip install $(PIP_FLAGS) -r requirements/test.txt 2>&1 | grep -v "^WARNING: Location" || true
	$(TEST_VENV)/bin/pip install $(PIP_FLAGS) --no-deps --no-build-isolation -e . 2>&1 | grep -v "^WARNING: Location" || true
	@$(TEST_VENV)/bin/python -c "import harness, common, torch, tensorflow, pytest, jsonschema" && touch $@

test: $(TEST_VENV)/.installed
	$(TEST_VENV)/bin/dawnbench data fetch fashion-mnist
	$(TEST_VENV)/bin/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf .venv build *.egg-info
