# dawnbench: `make run` trains the default reference end to end; `make test` runs the test suite.
# Every target sets up what it needs (virtual environments under .venv/, datasets under data/).
# Recipes run in bash with -eu -o pipefail: a failed step fails the target, whatever follows it.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DELETE_ON_ERROR:

PYTHON ?= python3
, := ,
REF    ?= fashion-mnist-cnn-pytorch
ARGS   ?=
NPROC  ?= 1
RUNS   ?= 3
RUNTIME ?= auto
# RUNTIME=docker: JUDGE=host runs the harness here and each worker as a container of the image
# (harness.sandbox.container_mode); empty, the harness runs in the image (its entrypoint)
JUDGE ?=
BASE_IMAGE ?=
FRAMEWORK_PIN ?=
VERSIONS ?=
CANDIDATE ?=
INCUMBENT ?=
PAIRS  ?= 5

REFS      := $(notdir $(patsubst %/,%,$(dir $(wildcard references/*/reference.toml))))
REF_DIR   := references/$(REF)
# Where the environments live; `bin/dawnbench` (dawnbench/launcher.py) passes $DAWNBENCH_VENVS here.
VENVS     ?= .venv
VENV      := $(VENVS)/$(REF)
TEST_VENV := .venv/test
TOOLS_VENV := $(VENVS)/tools
NUMPY1_VENV := .venv/harness-numpy1
# INFER_RUNTIMES='onnxruntime openvino': an image with the pinned runtimes of `infer --runtime` (none by default)
INFER_RUNTIMES ?=
IMAGE_OPTS = $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) $(if $(FRAMEWORK_PIN),--framework-pin '$(FRAMEWORK_PIN)') \
             $(if $(INFER_RUNTIMES),--infer-runtimes '$(INFER_RUNTIMES)')
# pip prints a warning per missing local index folder of PIP_FIND_LINKS; the filter keeps the
# output readable and, under pipefail, never hides pip's own exit status.
PIP_FLAGS := --quiet --disable-pip-version-check
QUIET_PIP := 2>&1 | { grep -v "^WARNING: Location" || true; }

# $(call venv,DIR,REQUIREMENTS,IMPORTS[,INSTALLER]): a virtual environment from pinned requirements, the
# project installed into it (editable, no dependencies: they are the pinned ones), and a check
# that it imports what its users need before it is marked installed. INSTALLER installs the
# requirements (default DIR/bin/pip install).
define venv
	@echo "setting up $(1) from $(2)"
	@test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/pip install $(PIP_FLAGS) -r requirements/build.txt $(QUIET_PIP)
	$(if $(4),$(4),$(1)/bin/pip install) $(PIP_FLAGS) -r $(2) $(QUIET_PIP)
	$(1)/bin/pip install $(PIP_FLAGS) --no-deps --no-build-isolation -e . $(QUIET_PIP)
	@$(1)/bin/pip check >/dev/null || { $(1)/bin/pip check; exit 1; }
	$(1)/bin/python -c "import $(3)"
	@touch $(1)/.installed
endef

.PHONY: run run-native run-docker build base-image compose compare compare-env challenge test test-fast test-harness-numpy1 test-mxnet lint tools list bench bench-gpu setup sandbox \
        data infer-runtime help clean check-ref check-nproc check-reach

help:
	@echo "bin/dawnbench list|run|infer|submit|validate|leaderboard|analyze|verify|data ...: the one command (README)"
	@echo "make run [REF=name] [ARGS='--set lr=0.2 --seed 3 --max-epochs 30'] [NPROC=2] [RUNTIME=auto|docker|native] [JUDGE=host]"
	@echo "make build [REF=name] [BASE_IMAGE=image:tag] [FRAMEWORK_PIN=tensorflow-cpu==2.20.0] [INFER_RUNTIMES=onnxruntime] | make compose"
	@echo "make base-image [BASE_IMAGE=image:tag]   # no registry: a Debian base with Python, from Debian's packages (root);"
	@echo "                                         # later builds of the CPU references use it, no BASE_IMAGE= needed"
	@echo "make compare REF=name VERSIONS='<pin A> <pin B>' [RUNS=3] [RUNTIME=docker] [ARGS=...]   # natively: an environment a pin"
	@echo "make challenge CANDIDATE=<ref, fork or entry> INCUMBENT=<ref, fork or entry> [PAIRS=5] [ARGS=...]   # timed on this machine"
	@echo "make test | make test-fast | make lint | make test-harness-numpy1 | make test-mxnet | make list | make bench [REF=name] [RUNS=3]"
	@echo "make bench-gpu [ARGS='--quick'] [BENCH_PYTHON=python3]"
	@echo "make setup [REF=name] | make tools | make clean"

# A path (REF=../references/x) is refused first: its environment would be built inside the reference's folder.
check-ref:
	@case '$(REF)' in */*) echo "dawnbench: error: reference name '$(REF)' is a path, not a plain folder name: give the reference's name \
(its folder under references/), e.g. REF=$(notdir $(patsubst %/,%,$(REF)))" >&2; exit 2 ;; esac
	@test -f $(REF_DIR)/reference.toml || { echo "dawnbench: error: unknown reference '$(REF)'; available: $(REFS)" >&2; exit 2; }

# Before any set-up, from a bare python3 (not $(PYTHON), the one environments are made with): a reference whose network cannot reach the threshold asked (its
# reference.toml's [reach]: ResNet-20 at CIFAR-10's 94%) is refused in one line naming the threshold it can
# reach, instead of a data fetch, an environment and a whole budget of epochs that end DNC.
check-reach: check-ref
	@DAWNBENCH_PROG=bin/dawnbench python3 -c 'import sys; from dawnbench import launcher; sys.exit(launcher.check_run(sys.argv[1:]))' \
	    $(REF) $(ARGS)

# Before any set-up: NPROC=abc (or 0) went as far as the rank launcher (or the container's torchrun).
check-nproc:
	@[[ "$(NPROC)" =~ ^[1-9][0-9]*$$ ]] || { echo "dawnbench: error: NPROC=$(NPROC): give the number of processes, \
a whole number 1 or more, e.g. make run NPROC=2" >&2; exit 2; }

# A virtual environment per reference: its pinned requirements and the `dawnbench` command's.
# A reference pinned to numpy 1.23.5 (MXNet 1.9.1) includes requirements/harness-numpy1.txt, which
# pins the `dawnbench` command's PyYAML too; requirements/dawnbench.txt (numpy 2) would conflict.
REF_EXTRA_REQS = $(if $(shell grep -s -l 'harness-numpy1.txt' $(REF_DIR)/requirements.txt),,-r requirements/dawnbench.txt)
$(VENV)/.installed: $(REF_DIR)/requirements.txt requirements/dawnbench.txt requirements/harness.txt requirements/build.txt \
                    requirements/harness-numpy1.txt docker/requirements.py pyproject.toml | check-ref
	@# Refused before anything is installed: only exact pins of the index, hashed wheel URLs and the shared
	@# files (docker/requirements.py; docs/RULES.md "The harness's environment"); installed as wheels only,
	@# so that no package's build code runs here (pip-install: one line for a requirement without a wheel).
	@$(PYTHON) docker/requirements.py check $(REF_DIR)/requirements.txt
	$(call venv,$(VENV),$(REF_DIR)/requirements.txt $(REF_EXTRA_REQS),harness$(,) common$(,) dawnbench.cli,$(PYTHON) docker/requirements.py pip-install $(VENV)/bin/pip)

setup: check-ref $(VENV)/.installed sandbox

# bubblewrap isolates the reference from the harness (docs/RULES.md, "Isolation"); without it a
# non-root run still goes, but is never official.
sandbox:
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; }; \
	  else echo "note: bubblewrap is not installed, so runs here cannot isolate the reference and are not official (sudo apt-get install bubblewrap)" >&2; fi; }

# The one command a user types (bin/dawnbench, dawnbench/launcher.py), started by $(PYTHON): it runs each
# command in the environment it needs (set up here first, so that make shows the set-up).
DAWNBENCH := DAWNBENCH_PROG=bin/dawnbench DAWNBENCH_VENVS=$(VENVS) DAWNBENCH_TOOLS_VENV=$(TOOLS_VENV) DAWNBENCH_PYTHON=$(PYTHON) bin/dawnbench

# From the host tools' environment, as the Docker path does: no framework is needed to fetch or
# check the data, so a run whose data is missing says so before its environment is installed.
# Into the data root the run reads: ARGS' --data DIR (or --data=DIR), else the run's default, $DAWNBENCH_DATA
# or ./data, which is the fetch's too (a fetch into ./data for a run of other data re-fetched the wrong folder).
FETCH_FOR_RUN = set -- $(ARGS); data=; while [ $$\# -gt 0 ]; do case "$$1" in \
	  --data) [ $$\# -gt 1 ] && data="$$2" && shift ;; --data=*) data="$${1\#--data=}" ;; esac; shift; done; \
	DAWNBENCH_PROG=bin/dawnbench $(TOOLS_VENV)/bin/dawnbench data fetch --reference $(REF) $${data:+--data "$$data"}

data: check-ref $(TOOLS_VENV)/.installed
	@$(FETCH_FOR_RUN)

# `infer --runtime onnxruntime|openvino` on first use (dawnbench/launcher.py): the pinned runtime into the tools
# environment, where the harness's timing process runs (a judge process: never the reference's environment, whose
# requirements could bring a runtime of their own; docs/RULES.md, "Inference").
INFER_RUNTIME ?=
infer-runtime: $(TOOLS_VENV)/.installed
	@test -f requirements/infer-$(INFER_RUNTIME).txt || { echo "INFER_RUNTIME=$(INFER_RUNTIME): expected onnxruntime or openvino" >&2; exit 2; }
	$(TOOLS_VENV)/bin/pip install $(PIP_FLAGS) -r requirements/infer-$(INFER_RUNTIME).txt $(QUIET_PIP)
	@$(TOOLS_VENV)/bin/pip check >/dev/null || { $(TOOLS_VENV)/bin/pip check; exit 1; }

# RUNTIME=auto: docker when an engine answers and has (or can pull) the base of REF's image, else
# native; either way one line says which and why (python -m dawnbench.containers runtime: exit 0
# docker, 3 native). Native rather than building a base: that needs root and minutes, and the
# native path runs wherever make does.
run: check-ref check-nproc check-reach
	@case "$(RUNTIME)" in \
	  docker) echo "runtime: docker (RUNTIME=docker)"; $(MAKE) --no-print-directory run-docker ;; \
	  native) echo "runtime: native (RUNTIME=native)"; $(MAKE) --no-print-directory run-native ;; \
	  auto) test -f $(TOOLS_VENV)/.installed || $(MAKE) --no-print-directory tools; \
	        status=0; $(TOOLS_VENV)/bin/python -m dawnbench.containers runtime $(REF) \
	            $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) || status=$$?; \
	        case $$status in \
	          0) $(MAKE) --no-print-directory run-docker ;; \
	          3) $(MAKE) --no-print-directory run-native ;; \
	          *) exit $$status ;; \
	        esac ;; \
	  *) echo "RUNTIME=$(RUNTIME): expected auto, docker or native" >&2; exit 2 ;; \
	esac

# The host-side tools: the Docker SDK for images, matplotlib for plots, jinja2 and jsonschema for
# the entry tools, mlperf-logging for `dawnbench compliance`, scipy and Pillow for `data prepare imagenet`.
$(TOOLS_VENV)/.installed: requirements/tools.txt requirements/energy-nvml.txt requirements/dawnbench.txt requirements/harness.txt requirements/build.txt pyproject.toml
	$(call venv,$(TOOLS_VENV),requirements/tools.txt,harness$(,) common$(,) dawnbench.cli$(,) docker$(,) matplotlib$(,) jinja2$(,) mlperf_logging.compliance_checker$(,) scipy.io$(,) PIL.Image)
	@test -x $(TOOLS_VENV)/bin/dawnbench

tools: $(TOOLS_VENV)/.installed

build: check-ref $(TOOLS_VENV)/.installed
	$(TOOLS_VENV)/bin/python -m dawnbench.containers build $(REF) $(IMAGE_OPTS)

# Where no registry answers: Debian bookworm with Python (debootstrap, as root), `docker import`ed
# as dawnbench/debian-python:bookworm (or BASE_IMAGE), the base the engine tests use too. Labelled,
# so that every later build of a CPU reference whose pinned base is not on the engine uses it.
base-image: $(TOOLS_VENV)/.installed
	$(TOOLS_VENV)/bin/python -m dawnbench.containers base-image $(if $(BASE_IMAGE),--tag $(BASE_IMAGE))

compose: $(TOOLS_VENV)/.installed
	$(TOOLS_VENV)/bin/python -m dawnbench.containers compose

run-docker: check-ref check-nproc check-reach $(TOOLS_VENV)/.installed
	@$(FETCH_FOR_RUN)
	DAWNBENCH_PROG=bin/dawnbench $(TOOLS_VENV)/bin/python -m dawnbench.containers run $(REF) $(IMAGE_OPTS) --nproc $(NPROC) \
	    $(if $(JUDGE),--judge $(JUDGE)) -- $(ARGS)

# `dawnbench compare`: natively (an environment a pin, .venv/REF@PIN, made by compare-env below) unless
# RUNTIME=docker (an image a pin); RUNTIME=auto compares natively too (an engine changes nothing here).
compare: check-ref check-reach $(TOOLS_VENV)/.installed
	@test -n "$(VERSIONS)" || { echo "dawnbench: error: no VERSIONS: give two framework pins, e.g. make compare REF=$(REF) VERSIONS='tensorflow-cpu==2.20.0 tensorflow-cpu==2.21.0'" >&2; exit 2; }
	DAWNBENCH_PROG=bin/dawnbench DAWNBENCH_VENVS=$(VENVS) DAWNBENCH_TOOLS_VENV=$(TOOLS_VENV) \
	    $(TOOLS_VENV)/bin/python -m dawnbench.compare $(REF) --versions $(VERSIONS) --runs $(RUNS) \
	    --runtime $(if $(filter docker,$(RUNTIME)),docker,native) $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) -- $(ARGS)

# `dawnbench challenge`: two entries timed against each other on this machine, interleaved pairs (natively;
# ARGS="--runtime docker" for their images); ARGS also takes --threshold, --max-epochs, --out, --data.
challenge: $(TOOLS_VENV)/.installed
	@test -n "$(CANDIDATE)" && test -n "$(INCUMBENT)" || { echo "dawnbench: error: give CANDIDATE and INCUMBENT, e.g. make challenge CANDIDATE=fashion-mnist-mynet-pytorch INCUMBENT=fashion-mnist-cnn-pytorch PAIRS=5" >&2; exit 2; }
	DAWNBENCH_PROG=bin/dawnbench DAWNBENCH_VENVS=$(VENVS) DAWNBENCH_TOOLS_VENV=$(TOOLS_VENV) \
	    $(TOOLS_VENV)/bin/python -m dawnbench.challenge $(CANDIDATE) --against $(INCUMBENT) --pairs $(PAIRS) $(ARGS)

# One side of a native `dawnbench compare`, built as a reference's environment is: COMPARE_REQS is the
# reference's requirements with the pin swapped in, flattened and checked (dawnbench/compare_native.py).
compare-env:
	@test -n "$(COMPARE_ENV)" && test -f "$(COMPARE_REQS)" || { echo "compare-env: give COMPARE_ENV=DIR COMPARE_REQS=FILE (dawnbench compare does)" >&2; exit 2; }
	$(call venv,$(COMPARE_ENV),$(COMPARE_REQS),harness$(,) common$(,) dawnbench.cli)

# data before setup: make takes the prerequisites in order.
run-native: check-nproc check-reach data setup
ifeq ($(NPROC),1)
	$(DAWNBENCH) run $(REF) $(ARGS)
else
	@test -x $(VENV)/bin/torchrun || { echo "NPROC=$(NPROC): $(REF) has no torchrun (not a PyTorch reference); \
TensorFlow references use every local GPU through MirroredStrategy, run them without NPROC" >&2; exit 2; }
	@# The rank launcher and each rank's harness are judge processes of the tools environment's Python (-I, no
	@# start-up hook: harness/judge.py); only the workers run REF's (docs/RULES.md, "The harness's environment").
	DAWNBENCH_WORKER_PYTHON=$(VENV)/bin/python \
	    $(TOOLS_VENV)/bin/python -I harness/judge.py harness.local_ranks --nproc-per-node $(NPROC) run $(REF) $(ARGS)
endif

# No environment: the references are read from a bare python3.
list:
	@$(DAWNBENCH) list

bench: data setup $(TEST_VENV)/.installed
	$(VENV)/bin/python -m bench.tta $(REF) --runs $(RUNS)
	$(VENV)/bin/python -m bench.overhead $(REF)
	# ResNet-50 batch-1 CPU latency: torch eager, onnxruntime, OpenVINO fp32/bf16, int8 (the test env has them all)
	$(TEST_VENV)/bin/python -m bench.infer_runtimes

# What one GPU measures without ImageNet (bench/gpu.py): in cifar10-fast-pytorch's environment (its
# pinned CUDA torch), or under BENCH_PYTHON, an interpreter that has torch already (a bare GPU
# machine: nothing is installed). Without CUDA it runs every part at tiny sizes on the CPU.
GPU_BENCH_REF := cifar10-fast-pytorch
bench-gpu:
ifeq ($(BENCH_PYTHON),)
	$(MAKE) --no-print-directory setup REF=$(GPU_BENCH_REF)
	.venv/$(GPU_BENCH_REF)/bin/dawnbench data fetch fashion-mnist || \
	  echo "note: no Fashion-MNIST, so its time-to-accuracy is not measured" >&2
	.venv/$(GPU_BENCH_REF)/bin/python -m bench.gpu $(ARGS)
else
	$(BENCH_PYTHON) -m bench.gpu $(ARGS)
endif

$(TEST_VENV)/.installed: requirements/test.txt requirements/infer-onnxruntime.txt requirements/infer-openvino.txt requirements/tools.txt requirements/energy-nvml.txt requirements/dawnbench.txt requirements/harness.txt requirements/build.txt pyproject.toml
	$(call venv,$(TEST_VENV),requirements/test.txt,harness$(,) common$(,) dawnbench$(,) torch$(,) tensorflow$(,) pytest$(,) jsonschema)

# Every test, spread over TEST_WORKERS xdist workers a module at a time: the modules that wait on
# image builds, other environments' installs and the real default's training start first and go
# on beside the rest (tests/conftest.py).
# TEST_WORKERS=0 runs them in this one process.
TEST_WORKERS ?= 3
test: $(TEST_VENV)/.installed sandbox
	$(TEST_VENV)/bin/dawnbench data fetch fashion-mnist
	$(TEST_VENV)/bin/python -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder) $(PYTEST_ARGS)

# The edit-test loop (under 5 minutes): every test but the tiers that need a Docker engine, a
# browser, another environment, several processes, the real default's training or a framework
# reference's whole run (pyproject.toml's markers; README "Tests"), on two workers. `make test` runs them all.
FAST_TIERS := not (engine or browser or second_env or multiprocess or trains_default or recipe_run)
test-fast: $(TEST_VENV)/.installed sandbox
	$(TEST_VENV)/bin/dawnbench data fetch fashion-mnist
	$(TEST_VENV)/bin/python -m pytest -n 2 --dist loadfile -m "$(FAST_TIERS)" $(PYTEST_ARGS)

lint: $(TEST_VENV)/.installed
	$(TEST_VENV)/bin/ruff check .

# The harness alone (numpy, tqdm), under numpy 1.23.5: what an MXNet 1.9.1 image has.
$(NUMPY1_VENV)/.installed: requirements/harness-numpy1.txt requirements/build.txt pyproject.toml
	$(call venv,$(NUMPY1_VENV),requirements/harness-numpy1.txt,harness.cli$(,) pytest)

test-harness-numpy1: $(NUMPY1_VENV)/.installed
	$(NUMPY1_VENV)/bin/python -c "import numpy; assert numpy.__version__ == '1.23.5', numpy.__version__"
	$(NUMPY1_VENV)/bin/python -m pytest -q -p no:cacheprovider -n 2 tests/harness_only

# The MXNet reference's tests in its own environment (MXNet 1.9.1, numpy 1.23.5, pytest from
# harness-numpy1.txt), and the MXNet half of its anchor table's checks: the main test environment has
# no MXNet and skips them.
MXNET_REF := imagenet-resnet152-mxnet
.venv/$(MXNET_REF)/.test-installed: requirements/test-mxnet.txt .venv/$(MXNET_REF)/.installed
	.venv/$(MXNET_REF)/bin/pip install $(PIP_FLAGS) -r requirements/test-mxnet.txt $(QUIET_PIP)
	@touch $@

test-mxnet:
	$(MAKE) --no-print-directory .venv/$(MXNET_REF)/.installed REF=$(MXNET_REF)
	$(MAKE) --no-print-directory .venv/$(MXNET_REF)/.test-installed REF=$(MXNET_REF)
	.venv/$(MXNET_REF)/bin/python -c "import mxnet, numpy; assert numpy.__version__ == '1.23.5', numpy.__version__"
	.venv/$(MXNET_REF)/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile tests/test_$(subst -,_,$(MXNET_REF)).py \
	    tests/test_anchor_imagenet_resnet152.py

clean:
	rm -rf .venv build *.egg-info
