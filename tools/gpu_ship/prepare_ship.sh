#!/usr/bin/env bash
# Everything a device call carries that git does not, prepared on the CPU side in one command. A new checkout has none of
# it (the folders are ignored): vLLM's wheels (prepare_vllm.py), the pipeline's (pipeline_wheels.py), both installed into
# one folder and packed as pieces of one compressed stream (pack_site.py pack: .site_ship/), and the kernels extra's wheel
# (.kernel_wheels). PYTHON312 names a CPython 3.12, the GPU machine's Python (default: .venv-core-3.12, which
# `make test-core` builds, else python3.12 on the PATH). About 10 minutes on two cores; downloads are kept for a rerun.
# The Triton and FlashInfer caches (.triton_cache.tgz, .flashinfer_cache.tgz) come only from the GPU machine: `gpu_study.sh caches`.
#
#   bash tools/gpu_ship/prepare_ship.sh        # then the calls pack_site.py prints, the last one with `unpack`
set -euo pipefail
cd "$(dirname "$0")/../.."
PY312=${PYTHON312:-$( [ -x .venv-core-3.12/bin/python ] && echo .venv-core-3.12/bin/python || command -v python3.12 || true)}
[ -n "$PY312" ] && "$PY312" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null \
  || { echo "prepare_ship.sh: no CPython 3.12 (PYTHON312=${PY312:-unset}); set PYTHON312 to one" >&2; exit 2; }
python3 tools/gpu_ship/prepare_vllm.py --tier core
python3 tools/gpu_ship/pipeline_wheels.py --python "$PY312" --out .pipeline_wheels
for f in .pipeline_wheels .kernel_wheels; do grep -qx "/$f/" .git/info/exclude || echo "/$f/" >> .git/info/exclude; done
"$PY312" -m pip download -q --no-deps --only-binary=:all: 'liger-kernel>=0.8.5,<0.9' -d .kernel_wheels
python3 tools/gpu_ship/pack_site.py pack --python "$PY312"
