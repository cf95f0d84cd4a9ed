#!/usr/bin/env bash
# The card's shapes on a 2-GPU machine, one measurement per GPU side by side; results and logs under $OUT.
#
#   bash benchmarks/device/card_shapes.sh generation   # benchmarks/generation.py --shape ... on GPU 0 (Qwen3-MoE) and 1 (Nemotron-H)
#   bash benchmarks/device/card_shapes.sh training     # train_speed.py ours-dpo variants on both shapes; then vllm_check teacher
#                                                      # on GPU 0 beside `pytest -m gpu` on GPU 1
#
# Needs vLLM installed by `install_vllm.py install` (/tmp/vllm_site) and the wheels of .gpu17/whl carried with the call
# (mamba-ssm, causal-conv1d, trl, datasets, pytest: what the machine lacks), installed here into /tmp/site once.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ ! -f /tmp/site/.installed ] && [ -d .gpu17/whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu17/whl/*.whl && touch /tmp/site/.installed
fi
export PYTHONPATH=/tmp/site:/tmp/vllm_site
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv > "$OUT/gpus_before_$1.csv" 2>&1

case "$1" in
generation)
  # vLLM 0.26 refuses batch invariance for Mamba-2 layers, so Nemotron-H runs only without it; then the teacher part on GPU 1
  CUDA_VISIBLE_DEVICES=0 python3 benchmarks/generation.py --shape qwen3-moe-30b-a3b --backends vllm-invariant hf vllm-not-invariant \
    --backend-timeout "${BACKEND_TIMEOUT:-185}" --out "$OUT/generation_qwen3-moe-30b-a3b.json" > "$OUT/generation_qwen3-moe-30b-a3b.log" 2>&1 &
  ( CUDA_VISIBLE_DEVICES=1 python3 benchmarks/generation.py --shape nemotron-h-31b --backends vllm-not-invariant hf \
      --backend-timeout "${BACKEND_TIMEOUT:-185}" --out "$OUT/generation_nemotron-h-31b.json" > "$OUT/generation_nemotron-h-31b.log" 2>&1
    CUDA_VISIBLE_DEVICES=1 timeout "${TEACHER_TIMEOUT:-200}" python3 benchmarks/device/vllm_check.py --parts teacher --models ${TEACHER_MODELS:-base r768_merged} \
      --small-gpu-mem 0.3 --small-kv-gib 4 --out "$OUT/vllm_teacher.json" > "$OUT/vllm_teacher.log" 2>&1 ) &
  wait ;;
training)
  for pair in "0 qwen3-moe-30b-a3b" "1 nemotron-h-31b"; do
    set -- $pair
    CUDA_VISIBLE_DEVICES=$1 timeout "${TRAIN_TIMEOUT:-330}" python3 benchmarks/train_speed.py --shape "$2" --variants ours-dpo ours-dpo-8x6 \
      --steps 4 --pairs 240 --out "$OUT/train_dpo_$2.json" > "$OUT/train_dpo_$2.log" 2>&1 &
  done
  wait
  CUDA_VISIBLE_DEVICES=0 timeout 200 python3 benchmarks/device/vllm_check.py --parts teacher --small-gpu-mem 0.3 --small-kv-gib 4 \
    --out "$OUT/vllm_teacher.json" > "$OUT/vllm_teacher.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 timeout 200 python3 -m pytest -m gpu tests/test_train_fast.py -q -p no:cacheprovider > "$OUT/pytest_gpu.log" 2>&1 &
  wait ;;
*) echo "usage: $0 generation|training" >&2; exit 2 ;;
esac
nvidia-smi --query-gpu=index,memory.used --format=csv >> "$OUT/gpus_before_$1.csv" 2>&1
tail -n 12 "$OUT"/*.log
