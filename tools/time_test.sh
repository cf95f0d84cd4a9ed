#!/usr/bin/env bash
# `make test` timed as a new user meets it after the README's set-up: a fresh clone of this checkout's commit,
# `make install` (timed apart: `make demo` installs first in the README's order), then `make test`'s two parts, the
# notebooks (`make test-nbs`) and pytest (`make test-py`), each timed as a whole. Written to
# benchmarks/results/test_time.json, from which the README's sentence is written (`python3 tools/doc_figures.py write`).
# Run it alone on the machine: other work beside it slows it down.
#
#   bash tools/time_test.sh [CLONE_DIR]      # default /tmp/rsi_repro_time_test (removed first)
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/fresh_clone.sh
fresh_clone_installed "${1:-/tmp/rsi_repro_time_test}"
t=$SECONDS; make test-nbs > test-nbs.log 2>&1; nbs=$((SECONDS - t))
t=$SECONDS; make test-py > test-py.log 2>&1; py=$((SECONDS - t))
python3 - "$here/benchmarks/results/test_time.json" "$commit" "$setup" "$nbs" "$py" "$(tail -n 1 test-py.log)" <<'PY'
import json, os, platform, sys, datetime
out, commit, setup, nbs, py, said = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]), sys.argv[6]
doc = {'what': "make install, then make test's two parts (make test-nbs, make test-py), in a fresh clone, each timed as a "
               "whole (tools/time_test.sh); make test is the two parts, set-up apart",
       'commit': commit, 'date': datetime.date.today().isoformat(), 'cpus': os.cpu_count(), 'machine': platform.machine(),
       'python': platform.python_version(), 'setup_seconds': setup, 'notebooks_seconds': nbs, 'pytest_seconds': py,
       'test_seconds': nbs + py, 'pytest_said': said.strip()}
open(out + '.tmp', 'w').write(json.dumps(doc, indent=1) + '\n'); os.replace(out + '.tmp', out)
print(f"set-up {setup} s, make test {nbs + py} s (notebooks {nbs} s, pytest {py} s): {out}")
PY
