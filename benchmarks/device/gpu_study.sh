#!/usr/bin/env bash
# The study's pipeline on the GPU machine. The wheels travel first: the pipeline's (pipeline_wheels.py, carried as
# .pipeline_wheels: `gpu_study.sh wheels` installs them into /tmp/site) and vLLM's (prepare_vllm.py's pieces, one call
# each; install_vllm.py install puts them in /tmp/vllm_site). Results and logs under $OUT.
#
#   bash benchmarks/device/gpu_study.sh wheels   # install the carried .pipeline_wheels into /tmp/site; list the machine's packages
#   bash benchmarks/device/gpu_study.sh base     # build data/nemotron_h_small on the GPU when absent; a tar of it to $OUT
#   bash benchmarks/device/gpu_study.sh smoke    # configs/gpu-smoke.yaml from a clean folder, then a rerun that skips all
#   bash benchmarks/device/gpu_study.sh resume   # kill gpu-smoke's eval part-way, resume, compare with the finished rows
#   bash benchmarks/device/gpu_study.sh tests    # pytest -m gpu
#   bash benchmarks/device/gpu_study.sh tiny     # the tiny profile with vLLM serving (configs/tiny-vllm.yaml)
#   bash benchmarks/device/gpu_study.sh estimate # rsi-repro estimate of the nemotron profile, with the gpu-smoke run's lengths
#
# A device call lasts at most 10 minutes: `start STEP ...` runs the steps in the background, in a session of their own
# (results in /tmp/study_out), and `wait` (in later calls, back to back) waits up to $WAIT seconds for them, then copies
# the results to $OUT and shows the log's end.
set -u
case "${1:-}" in
start) shift; rm -f /tmp/study.done; mkdir -p /tmp/study_out
       OUT=/tmp/study_out setsid nohup bash -c "bash '$0' $* ; touch /tmp/study.done" > /tmp/study.log 2>&1 < /dev/null &
       echo "started in the background: $*"; exit 0 ;;
wait)  for _ in $(seq 1 $(( ${WAIT:-540} / 5 ))); do [ -f /tmp/study.done ] && break; sleep 5; done
       [ -f /tmp/study.done ] && echo "finished" || echo "still running"
       cp -r /tmp/study_out/. "${OUT:-/tmp/out}/" 2>/dev/null; grep -v "^\[IPKernelApp\]" /tmp/study.log | tail -n 40; exit 0 ;;
esac
export PYTHONPATH=/tmp/vllm_site:/tmp/site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export JUPYTER_PATH=/tmp/site/share/jupyter     # nbconvert's templates, installed with the wheels under --target
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1   # no NVLink multicast on shared hosts
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
kernel() { [ -d ~/.local/share/jupyter/kernels/python3 ] || python3 -m ipykernel install --user --name python3 > /dev/null; }
rsi() { python3 -m rsi_repro.cli "$@"; }
for step in "$@"; do
  case "$step" in
  wheels)
    python3 -m pip list --format=freeze > "$OUT/machine_packages.txt" 2>/dev/null
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .pipeline_wheels/*.whl \
      && python3 -c "import papermill, trl, datasets, nbclient, ipykernel, langdetect, math_verify; print('pipeline wheels import')" ;;
  base)
    [ -f data/nemotron_h_small/model.safetensors ] || python3 -c "
from rsi_repro.tiny import build_nemotron_h_small
info = build_nemotron_h_small('data/nemotron_h_small', device='cuda')
print('built', info['parameters'], 'parameters in', info['train_seconds'], 's; loss', info['loss_log'][0]['loss'], '->', info['loss_log'][-1]['loss'])"
    tar -cf "$OUT/nemotron_h_small.tar" data/nemotron_h_small ;;
  smoke) kernel; python3 benchmarks/gpu_pipeline.py run configs/gpu-smoke.yaml --out "$OUT/gpu_pipeline.json" 2>&1 | tee "$OUT/smoke.log" | grep -v "^\[IPKernelApp\]" ;;
  resume) kernel; python3 benchmarks/gpu_pipeline.py resume configs/gpu-smoke.yaml --stage eval --kill-after "${KILL_AFTER:-20}" --out "$OUT/gpu_pipeline.json" > "$OUT/resume.log" 2>&1; tail -n 25 "$OUT/resume.log" ;;
  tests) PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/test_gpu.py tests/test_train_fast.py > "$OUT/pytest_gpu.log" 2>&1; tail -n 15 "$OUT/pytest_gpu.log" ;;
  tiny) kernel; python3 benchmarks/gpu_pipeline.py run configs/tiny-vllm.yaml --out "$OUT/gpu_pipeline_tiny.json" > "$OUT/tiny.log" 2>&1; tail -n 25 "$OUT/tiny.log"
        cp outputs/tiny-vllm/report/summary.json "$OUT/tiny_vllm_summary.json" 2>/dev/null
        python3 -c "
import json
for r in json.load(open('outputs/tiny-vllm/report/summary.json'))['ladder']:
    print(r['step'], r['instrument'], r['n'], round(r['rate_parent'], 3), round(r['rate'], 3), r['fixed'], r['lost'], '%.3g' % r['p'])" ;;
  estimate) rsi estimate configs/nemotron.yaml --run outputs/gpu-smoke > "$OUT/estimate_run.txt" 2>&1; tail -n 5 "$OUT/estimate_run.txt" ;;
  *) echo "usage: $0 wheels|base|smoke|resume|tests|tiny|estimate ..." >&2; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv
