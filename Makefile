# hdlib entry points. Everything runs in .venv, which scripts/setup.sh creates
# and keeps up to date (a no-op re-run takes seconds).
#
#   make lab        set up (the packaged model warmed up), open JupyterLab on notebooks/ (news pop-up off)
#   make class      before a class: set up, warm the model in bfloat16 too, write the handouts (cards, exit quiz) to handouts/
#   make demo       set up, generate one answer on the command line (headless)
#   make test       set up (Gemma 3 and .venv-vllm included), run the whole test suite, slow tests included (as CI does)
#   make setup-vllm make .venv-vllm: vLLM beside hdlib, for build-db model --engine vllm (its own transformers)
#   make test-fast  set up, run the tests not marked slow
#   make strip      remove outputs and execution counts from notebooks/ (before committing)
#   make lint       ruff: lines within 120 characters, imports sorted, no unused names (tests/test_lint.py too)
#   make benchmarks-doc  write docs/benchmarks.md from the results committed under benchmarks/results/ (runs no benchmark)
#   make clean      remove caches and build outputs; make distclean also removes .venv
#
# Extra pytest arguments: make test PYTEST_ARGS="-k tree -x"

VENV        := .venv
PY          := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: help setup setup-vllm lab class demo test test-fast strip lint benchmarks-doc clean distclean

help:
	@grep '^#   make' Makefile | sed 's/^#//'

setup:
	@bash scripts/setup.sh

setup-vllm:
	@bash scripts/setup_vllm.sh

# scripts/lab-settings/overrides.json: the defaults JupyterLab starts from (here: never ask to fetch news)
lab: setup
	$(VENV)/bin/jupyter lab notebooks/ --LabApp.app_settings_dir=$(CURDIR)/scripts/lab-settings \
		$(if $(filter 0,$(shell id -u)),--allow-root)

# Before a class (docs/notebooks.md): warm the model in bfloat16 too (notebook 05), then print the handouts
class: setup
	$(VENV)/bin/hdlib warmup --dtype bfloat16
	$(VENV)/bin/hdlib handouts --out handouts

demo: setup
	$(VENV)/bin/hdlib generate --prompt-file data/prompts/summarize.txt --max-new-tokens 128

# The whole suite covers the real Gemma 3 (its 512-token sliding window) and the real vLLM CPU engine:
# make test installs both.
test: export HDLIB_GEMMA = 1
test: setup setup-vllm
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

strip:
	python3 scripts/strip_notebooks.py

lint: setup
	$(VENV)/bin/ruff check .

# Each table from its JSON, with the command and the machine; tests/test_benchmarks_doc.py checks the committed file
benchmarks-doc:
	$(PY) -m scripts.benchmarks_doc

clean:
	rm -rf build dist .pytest_cache .hypothesis *.egg-info
	find . -path ./$(VENV) -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints \) -type d -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) .venv-vllm
