#!/usr/bin/env bash
# The study's pipeline on the GPU machine, after the wheels are in (install_vllm.py install: vLLM and, packed with it by
# prepare_vllm.py --also, the pipeline's own wheels, in /tmp/vllm_site). Results and logs under $OUT.
#
#   bash benchmarks/device/gpu_study.sh base     # build data/nemotron_h_small on the GPU when absent; a tar of it to $OUT
#   bash benchmarks/device/gpu_study.sh smoke    # configs/gpu-smoke.yaml from a clean folder, then a rerun that skips all
#   bash benchmarks/device/gpu_study.sh resume   # kill gpu-smoke's eval part-way, resume, compare with the finished rows
#   bash benchmarks/device/gpu_study.sh tests    # pytest -m gpu
#   bash benchmarks/device/gpu_study.sh tiny     # the tiny profile with vLLM serving (configs/tiny-vllm.yaml)
#   bash benchmarks/device/gpu_study.sh estimate # rsi-repro estimate of the nemotron profile, with the gpu-smoke run's lengths
set -u
export PYTHONPATH=/tmp/vllm_site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1   # no NVLink multicast on shared hosts
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d ~/.local/share/jupyter/kernels/python3 ] || python3 -m ipykernel install --user --name python3 > /dev/null
rsi() { python3 -m rsi_repro.cli "$@"; }
for step in "$@"; do
  case "$step" in
  base)
    [ -f data/nemotron_h_small/model.safetensors ] || python3 -c "
from rsi_repro.tiny import build_nemotron_h_small
info = build_nemotron_h_small('data/nemotron_h_small', device='cuda')
print('built', info['parameters'], 'parameters in', info['train_seconds'], 's; loss', info['loss_log'][0]['loss'], '->', info['loss_log'][-1]['loss'])"
    tar -cf "$OUT/nemotron_h_small.tar" data/nemotron_h_small ;;
  smoke) python3 benchmarks/gpu_pipeline.py run configs/gpu-smoke.yaml --out "$OUT/gpu_pipeline.json" 2>&1 | tee "$OUT/smoke.log" | grep -v "^\[IPKernelApp\]" ;;
  resume) python3 benchmarks/gpu_pipeline.py resume configs/gpu-smoke.yaml --stage eval --kill-after "${KILL_AFTER:-20}" --out "$OUT/gpu_pipeline.json" > "$OUT/resume.log" 2>&1; tail -n 25 "$OUT/resume.log" ;;
  tests) PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/test_gpu.py tests/test_train_fast.py > "$OUT/pytest_gpu.log" 2>&1; tail -n 15 "$OUT/pytest_gpu.log" ;;
  tiny) python3 benchmarks/gpu_pipeline.py run configs/tiny-vllm.yaml --out "$OUT/gpu_pipeline_tiny.json" > "$OUT/tiny.log" 2>&1; tail -n 25 "$OUT/tiny.log"
        cp outputs/tiny-vllm/report/summary.json "$OUT/tiny_vllm_summary.json" 2>/dev/null
        python3 -c "
import json
for r in json.load(open('outputs/tiny-vllm/report/summary.json'))['ladder']:
    print(r['step'], r['instrument'], r['n'], round(r['rate_parent'], 3), round(r['rate'], 3), r['fixed'], r['lost'], '%.3g' % r['p'])" ;;
  estimate) rsi estimate configs/nemotron.yaml --run outputs/gpu-smoke > "$OUT/estimate_run.txt" 2>&1; tail -n 5 "$OUT/estimate_run.txt" ;;
  *) echo "usage: $0 base|smoke|resume|tests|tiny|estimate ..." >&2; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv
