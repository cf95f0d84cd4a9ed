#!/usr/bin/env bash
# The README's two set-up-and-run commands timed as a new user meets them: a fresh clone of this checkout's commit,
# `make install` then `make demo`, each timed as a whole, and the run's own per-stage times (outputs/tiny/run_times.jsonl,
# which the runner writes). Written to benchmarks/results/demo_time.json, from which the README's timing sentence is
# written (`python3 tools/doc_figures.py write`). Run it alone on the machine: other work beside it slows it down.
#
#   bash tools/time_demo.sh [CLONE_DIR]      # default /tmp/rsi_repro_time_demo (removed first)
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/fresh_clone.sh
fresh_clone_installed "${1:-/tmp/rsi_repro_time_demo}"
t=$SECONDS; make demo > demo.log 2>&1; demo=$((SECONDS - t))
python3 - "$here/benchmarks/results/demo_time.json" "$commit" "$setup" "$demo" <<'EOF'
import json, os, platform, sys, datetime
out, commit, setup, demo = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = [json.loads(l) for l in open('outputs/tiny/run_times.jsonl')]
stages = [{'stage': r['stage'], 'status': r['status'], 'seconds': r['seconds']} for r in rows if r['run_began'] == rows[0]['run_began']]
doc = {'what': "make install, then make demo, in a fresh clone, each timed as a whole (tools/time_demo.sh); the stages' "
               "times are the run's own (outputs/tiny/run_times.jsonl)",
       'commit': commit, 'date': datetime.date.today().isoformat(), 'cpus': os.cpu_count(), 'machine': platform.machine(),
       'python': platform.python_version(), 'setup_seconds': setup, 'demo_seconds': demo, 'total_seconds': setup + demo,
       'stages_seconds': round(sum(s['seconds'] for s in stages), 1), 'stages': stages}
open(out + '.tmp', 'w').write(json.dumps(doc, indent=1) + '\n'); os.replace(out + '.tmp', out)
print(f"set-up {setup} s, demo {demo} s (stages {doc['stages_seconds']} s): {out}")
EOF
