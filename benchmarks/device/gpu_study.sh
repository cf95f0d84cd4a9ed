#!/usr/bin/env bash
# The study's pipeline on the GPU machine. The wheels travel first, as one compressed install in pieces
# (tools/gpu_ship/pack_site.py: one piece per call, moved to /tmp/ship there; the last call runs `pack_site.py unpack`,
# which puts vLLM and the pipeline's wheels in /tmp/site). Carry .triton_cache.tgz and .flashinfer_cache.tgz (from `caches`) to skip the first
# engine's kernel compiles. Results and logs under $OUT. On the CPU side, `bash tools/gpu_ship/prepare_ship.sh` builds
# the pieces and .kernel_wheels (a new checkout has neither).
#
#   bash benchmarks/device/gpu_study.sh wheels   # or: install the carried .pipeline_wheels alone into /tmp/site; list the machine's packages
#   bash benchmarks/device/gpu_study.sh base     # build data/nemotron_h_small on the GPU when absent; a tar of it to $OUT
#   bash benchmarks/device/gpu_study.sh smoke    # configs/gpu-smoke.yaml from a clean folder, then a rerun that skips all
#   bash benchmarks/device/gpu_study.sh resume   # kill gpu-smoke's eval part-way, resume, compare with the finished rows
#   bash benchmarks/device/gpu_study.sh killrun  # gpu-smoke from a clean folder SIGKILLed once an SFT checkpoint is complete, the
#                                                # rerun (resumes the SFT, finishes), a rerun that skips all, then the SFT again
#                                                # uninterrupted to compare adapters and losses (gpu_pipeline.py killrun --compare)
#   bash benchmarks/device/gpu_study.sh ckptcost # seconds and bytes of a training checkpoint at r=768 on the Nemotron-H 30B layout
#                                                # (benchmarks/checkpoint_cost.py; ~60 GiB of GPU memory: alone on the GPU)
#   bash benchmarks/device/gpu_study.sh tests    # pytest -m gpu (alone: beside the smollm2 lane on an 80 GB card its engines
#                                                # found too little free memory to start, 2026-12-05)
#   bash benchmarks/device/gpu_study.sh decode   # the real model's evaluation decode under several engine layouts (decode_engines.py)
#   bash benchmarks/device/gpu_study.sh moeconfig  # the 30B layout's vLLM decode with the default fused-MoE config, then the H100's tuned one
#   bash benchmarks/device/gpu_study.sh ssmstate # the 30B layout's vLLM decode with the Mamba state in float32, then bfloat16
#   bash benchmarks/device/gpu_study.sh moetune  # the fused-MoE config tuned on this GPU for the 30B layout's decode (moe_tune.py),
#                                                # then its vLLM decode with the default config and with the tuned ones
#   bash benchmarks/device/gpu_study.sh enginestart  # where the first vLLM engine's start goes (engine_start.py: cold, then warm)
#   bash benchmarks/device/gpu_study.sh tiny     # the tiny profile with vLLM serving (configs/tiny-vllm.yaml)
#   bash benchmarks/device/gpu_study.sh estimate # rsi-repro estimate of the nemotron profile, with the gpu-smoke run's lengths
#   bash benchmarks/device/gpu_study.sh speed    # train_speed.py over 20 timed steps on the card's shapes, ours beside stock
#   bash benchmarks/device/gpu_study.sh smollm2  # configs/smollm2.yaml (the real model) from a clean folder, then a rerun; the
#                                                # run's result files (no weights, no notebooks) as smollm2_run.tgz
#   bash benchmarks/device/gpu_study.sh smollm2_files  # those files as they are now (a run still going: what it has written)
#
#   bash benchmarks/device/gpu_study.sh caches   # what the first engine compiled here: the Triton kernels (triton_cache.tgz)
#                                                # and FlashInfer's JIT-built sampling ops with vLLM's model-inspection cache
#                                                # (flashinfer_cache.tgz: the sampling ops took 83 s of the first start); carry
#                                                # them back as .triton_cache.tgz and .flashinfer_cache.tgz
# A device call lasts at most 10 minutes: `start LANE ...` runs each lane (steps joined by commas, e.g. smoke,resume) in
# the background in a session of its own, the lanes side by side on the one GPU (results in /tmp/study_out), and
# `wait` (in later calls, back to back) waits up to $WAIT seconds for every lane, then copies the results to $OUT and
# shows each lane's log's end.
set -u
case "${1:-}" in
start) shift; mkdir -p /tmp/study_out /tmp/study.lanes        # a later start adds lanes beside those still running
       # the wheels were installed without bytecode: compile it once on all cores, not in every lane's first import
       [ -d /tmp/site ] && [ ! -f /tmp/site/.compiled ] && python3 -m compileall -q -j 0 /tmp/site > /dev/null 2>&1; touch /tmp/site/.compiled
       for lane in "$@"; do
         OUT=/tmp/study_out setsid nohup bash -c "bash '$0' ${lane//,/ } ; touch /tmp/study.lanes/$lane.done" > "/tmp/study.$lane.log" 2>&1 < /dev/null &
         echo "$lane" >> /tmp/study.lanes/all; echo "started in the background: ${lane//,/ }"; sleep 5   # one kernel spec install at a time
       done; exit 0 ;;
wait)  [ -f /tmp/study.lanes/all ] || { echo "no lanes were started on this machine (a fresh one: the last was released); nothing to wait for" >&2; exit 3; }
       lanes=$(wc -l < /tmp/study.lanes/all)
       for _ in $(seq 1 $(( ${WAIT:-540} / 5 ))); do [ "$(ls /tmp/study.lanes/*.done 2>/dev/null | wc -l)" -ge "$lanes" ] && break; sleep 5; done
       # what the real model's run has written so far comes back with every wait: a lease may end before the run does
       [ -d outputs/smollm2 ] && OUT=/tmp/study_out bash "$0" smollm2_files > /dev/null 2>&1
       mkdir -p "${OUT:-/tmp/out}"; tar -czf "${OUT:-/tmp/out}/study.tgz" -C /tmp/study_out . 2>/dev/null   # one file: $OUT returns 8
       # a file comes back only under 16 MiB: a larger study.tgz comes back in pieces (cat study.tgz.part-* > study.tgz)
       if [ "$(stat -c %s "${OUT:-/tmp/out}/study.tgz")" -gt 15728640 ]; then
         split -b 15M "${OUT:-/tmp/out}/study.tgz" "${OUT:-/tmp/out}/study.tgz.part-" && rm "${OUT:-/tmp/out}/study.tgz"; fi
       for c in triton_cache flashinfer_cache inductor_cache; do [ -f /tmp/$c.tgz ] && cp /tmp/$c.tgz "${OUT:-/tmp/out}/"; done
       # each finished stage of the real model's run, with its seconds (the lanes' logs below end mid-stage)
       [ -f outputs/smollm2/run_times.jsonl ] && grep -h '"stage"' outputs/smollm2/run_times.jsonl | sed 's/^{"run_began": "[^"]*", /  /'
       while read -r lane; do
         [ -f "/tmp/study.lanes/$lane.done" ] && echo "== $lane: finished" || echo "== $lane: still running"
         grep -v "^\[IPKernelApp\]" "/tmp/study.$lane.log" | tail -n ${TAIL:-15}
       done < /tmp/study.lanes/all; exit 0 ;;
esac
export PYTHONPATH=/tmp/vllm_site:/tmp/site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export JUPYTER_PATH=/tmp/site/share/jupyter     # nbconvert's templates, installed with the wheels under --target
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1   # no NVLink multicast on shared hosts
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -f .triton_cache.tgz ] && [ ! -d ~/.triton/cache ] && mkdir -p ~/.triton && tar -xzf .triton_cache.tgz -C ~/.triton
[ -f .flashinfer_cache.tgz ] && [ ! -d ~/.cache/flashinfer ] && mkdir -p ~/.cache && tar -xzf .flashinfer_cache.tgz -C ~/.cache
[ -f .inductor_cache.tgz ] && [ ! -d /tmp/torchinductor_${USER:-root} ] && tar -xzf .inductor_cache.tgz -C /tmp
# the kernels extra (liger-kernel, for optim.kernels: liger and the trl-* speed variants): carry .kernel_wheels (pip download
# --no-deps 'liger-kernel>=0.8.5,<0.9' -d .kernel_wheels); it installs apart from /tmp/site, which it does not change
[ -d .kernel_wheels ] && [ ! -d /tmp/kernel_site ] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/kernel_site .kernel_wheels/*.whl
export PYTHONPATH=$PYTHONPATH:/tmp/kernel_site
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
  smoke) kernel; python3 benchmarks/gpu_pipeline.py run configs/gpu-smoke.yaml --out "$OUT/gpu_pipeline.json" 2>&1 | tee "$OUT/smoke.log" | grep -v "^\[IPKernelApp\]"
         cp outputs/gpu-smoke/report/summary.json "$OUT/smoke_summary.json" 2>/dev/null ;;
  resume) kernel; python3 benchmarks/gpu_pipeline.py resume configs/gpu-smoke.yaml --stage eval --kill-at-shards "${KILL_AT_SHARDS:-3}" --out "$OUT/gpu_pipeline.json" > "$OUT/resume.log" 2>&1; tail -n 25 "$OUT/resume.log" ;;
  killrun) kernel; python3 benchmarks/gpu_pipeline.py killrun configs/gpu-smoke.yaml --stage sft --compare --log "$OUT/killrun_rerun.log" \
             --out "$OUT/gpu_pipeline_killrun.json" > "$OUT/killrun.log" 2>&1; tail -n 40 "$OUT/killrun.log" | grep -v "^\[IPKernelApp\]" ;;
  moeconfig) # the 30B layout's decode (generation.py, vLLM, random weights) with vLLM's default fused-MoE kernel config, then
             # with the config vLLM's wheel ships for E=128,N=1856 on the H100. The wheel has none for that shape on an H200 in
             # bf16 (vLLM warns "Using default MoE config" there): on an H200 the second run reads the H100's (the same GH100
             # chip) from VLLM_TUNED_CONFIG_FOLDER; on an H100 the first run hides the shipped one for its length
     gpu=$(python3 -c "import torch; print(torch.cuda.get_device_name().replace(' ', '_'))")
     configs=/tmp/site/vllm/model_executor/layers/fused_moe/configs; h100="$configs/E=128,N=1856,device_name=NVIDIA_H100_80GB_HBM3.json"
     own="$configs/E=128,N=1856,device_name=$gpu.json"; tuned=/tmp/moe_configs; mkdir -p $tuned
     for v in default tuned; do
       unset VLLM_TUNED_CONFIG_FOLDER
       if [ $v = default ] && [ -f "$own" ]; then mv "$own" "$own.hidden"; fi
       if [ $v = tuned ]; then [ -f "$own.hidden" ] && mv "$own.hidden" "$own"
         [ -f "$own" ] || { cp "$h100" "$tuned/$(basename "$own")"; export VLLM_TUNED_CONFIG_FOLDER=$tuned; }; fi
       python3 benchmarks/generation.py --shape nemotron-h-31b --backends vllm-not-invariant \
         --batches 64 256 --repeats 3 --backend-timeout 420 --out "$OUT/generation_nemotron-h-31b_moe_$v.json" > "$OUT/moe_$v.log" 2>&1
       echo "== $v on $gpu"; grep -h "MoE config\|fused_moe.py" "$OUT/moe_$v.log" | cut -c1-240 | sort -u | head -n 4; tail -n 4 "$OUT/moe_$v.log"
     done
     [ -f "$own.hidden" ] && mv "$own.hidden" "$own" ;;
  ssmstate) # the 30B layout's decode (generation.py, vLLM, random weights; REPEATS runs a size, default 3) with the Mamba layers' state in vLLM's float32
            # (the profile's `auto`) and in bfloat16 (serving.vllm.mamba_ssm_cache_dtype), back to back: at
            # batch 256 the float32 state is 25.1 of the 32.0 GB a step of this engine moves (generation_hbm.json; committed
            # from an H200, its file joins flops.py's GENERATION_FILES, which counts each run's state at its own dtype)
            # vLLM's default fused-MoE config in both engines, as on the H200 (which has no file of its own): the file the wheel
            # ships for the H100 is hidden for the run, as moeconfig's default run does (the 2026-12-07 H100 run used it)
     gpu=$(python3 -c "import torch; print(torch.cuda.get_device_name().replace(' ', '_'))")
     own="/tmp/site/vllm/model_executor/layers/fused_moe/configs/E=128,N=1856,device_name=$gpu.json"
     [ -f "$own" ] && mv "$own" "$own.hidden"
     python3 benchmarks/generation.py --shape nemotron-h-31b --backends vllm-not-invariant vllm-ssm-bf16 --batches 64 256 --repeats "${REPEATS:-3}" \
       --backend-timeout 420 --out "$OUT/generation_nemotron-h-31b_ssm_state.json" > "$OUT/ssm_state.log" 2>&1
     [ -f "$own.hidden" ] && mv "$own.hidden" "$own"
     echo "== on $gpu"; grep -h "mamba_ssm_cache_dtype\|tok/s\|for MoE layer\|Using default MoE config" "$OUT/ssm_state.log" | cut -c1-240 | tail -n 18 ;;
  moetune) # vLLM's fused-MoE kernel config tuned on this GPU for the 30B layout at its decode sizes (moe_tune.py: M = 64 and
           # 256 tokens, each timed with two routings of the tokens: `uniform`, a trained router's spread, and `engine`, every
           # token to the same 6 experts, as the dummy-weight engine of generation.py routes them), then the layout's decode
           # (generation.py, as in moeconfig) back to back with vLLM's default config (on an H100 the file vLLM ships for this
           # shape hidden for the run; on an H200 there is none), with the engine-tuned file and with the uniform-tuned file
           # (VLLM_TUNED_CONFIG_FOLDER; MOETUNE_RUNS picks the runs, MOETUNE_ARGS adds moe_tune.py arguments). Each engine's
           # MoE config line from its log says which config it used.
     gpu=$(python3 -c "import torch; print(torch.cuda.get_device_name().replace(' ', '_'))")
     short=$(echo "$gpu" | grep -o 'H[0-9]00' | head -n 1 | tr H h); short=${short:-$gpu}
     own="/tmp/site/vllm/model_executor/layers/fused_moe/configs/E=128,N=1856,device_name=$gpu.json"
     python3 benchmarks/device/moe_tune.py --out-dir "$OUT/moetune" ${MOETUNE_ARGS:-} > "$OUT/moetune.log" 2>&1; tail -n 10 "$OUT/moetune.log"
     for v in ${MOETUNE_RUNS:-default tuned_engine tuned}; do
       unset VLLM_TUNED_CONFIG_FOLDER
       case $v in
         default) [ -f "$own" ] && mv "$own" "$own.hidden" ;;
         tuned) export VLLM_TUNED_CONFIG_FOLDER=$OUT/moetune/moe_tuned ;;
         tuned_engine) export VLLM_TUNED_CONFIG_FOLDER=$OUT/moetune/moe_tuned_engine ;;
       esac
       if [ -n "${VLLM_TUNED_CONFIG_FOLDER:-}" ] && ! ls "$VLLM_TUNED_CONFIG_FOLDER"/*.json > /dev/null 2>&1; then
         echo "== $v on $gpu: no config file in $VLLM_TUNED_CONFIG_FOLDER (the tuner failed?); skipped"; continue; fi
       log="$OUT/moe_${v}_$short.log"
       python3 benchmarks/generation.py --shape nemotron-h-31b --backends vllm-not-invariant --batches 64 256 --repeats 3 \
         --backend-timeout 420 --out "$OUT/generation_nemotron-h-31b_moe_${v}_$short.json" > "$log" 2>&1
       [ -f "$own.hidden" ] && mv "$own.hidden" "$own"
       echo "== $v on $gpu (VLLM_TUNED_CONFIG_FOLDER=${VLLM_TUNED_CONFIG_FOLDER:-unset})"
       grep -h "Using configuration from\|Using default MoE config" "$log" | cut -c1-300 | sort -u | head -n 4
       grep -h "tok/s" "$log" | tail -n 6
     done; unset VLLM_TUNED_CONFIG_FOLDER ;;
  ckptcost) python3 benchmarks/checkpoint_cost.py --shape nemotron-h-31b --steps 9 --every 2 --out "$OUT/checkpoint_cost.json" > "$OUT/ckptcost.log" 2>&1
            tail -n 30 "$OUT/ckptcost.log"; df -h /tmp | tail -n 1 ;;
  decode) # the evaluation's decode on the real model: engines x KV cache x batch limit, side by side (DECODE_VARIANTS), with
          # the GPU's utilisation sampled every second (decode_gpu.csv: a GPU busy and its memory busy tell a bandwidth-bound decode)
          kernel; rsi run configs/smollm2.yaml --only pools > "$OUT/decode.log" 2>&1
          nvidia-smi --query-gpu=timestamp,utilization.gpu,utilization.memory,memory.used,power.draw --format=csv -l 1 > "$OUT/decode_gpu.csv" 2>/dev/null & smi=$!
          python3 benchmarks/device/decode_engines.py --variants ${DECODE_VARIANTS:-3x10:512 3x20:1024 1x48:1024 6x6:512} \
            --out "$OUT/decode_engines.json" >> "$OUT/decode.log" 2>&1; kill $smi 2>/dev/null; tail -n 12 "$OUT/decode.log" ;;
  tests) # GPU_TESTS: the test files (default both); -v so that a lease ending mid-suite still shows which tests passed
         PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python3 -m pytest -m gpu -v -rA --durations=0 -p no:cacheprovider ${GPU_TESTS:-tests/test_gpu.py tests/test_train_fast.py} > "$OUT/pytest_gpu.log" 2>&1; tail -n 15 "$OUT/pytest_gpu.log" ;;
  enginestart) # the gpu-smoke study's first engine started twice, each in a new process, stacks sampled every second:
         # cold (no compile caches: a new machine), then warm (the caches the first left); engine_start.json names the seconds
         # ENGINE_STARTS="cold": only the first (a new machine's start, to see what it says while it compiles)
         python3 benchmarks/device/engine_start.py --starts ${ENGINE_STARTS:-cold warm plain} --out "$OUT/engine_start.json" > "$OUT/engine_start.log" 2>&1
         grep "^==\|^   " "$OUT/engine_start.log" | head -n 50 ;;
  tiny) kernel; python3 benchmarks/gpu_pipeline.py run configs/tiny-vllm.yaml --out "$OUT/gpu_pipeline_tiny.json" > "$OUT/tiny.log" 2>&1; tail -n 25 "$OUT/tiny.log"
        cp outputs/tiny-vllm/report/summary.json "$OUT/tiny_vllm_summary.json" 2>/dev/null
        python3 -c "
import json
for r in json.load(open('outputs/tiny-vllm/report/summary.json'))['ladder']:
    print(r['step'], r['instrument'], r['n'], round(r['rate_parent'], 3), round(r['rate'], 3), r['fixed'], r['lost'], '%.3g' % r['p'])" ;;
  estimate) rsi estimate configs/nemotron.yaml --run outputs/gpu-smoke > "$OUT/estimate_run.txt" 2>&1; tail -n 5 "$OUT/estimate_run.txt" ;;
  smollm2) kernel; python3 benchmarks/gpu_pipeline.py run configs/smollm2.yaml --out "$OUT/gpu_pipeline_smollm2.json" > "$OUT/smollm2.log" 2>&1
           tail -n 25 "$OUT/smollm2.log" | grep -v "^\[IPKernelApp\]"
           bash "$0" smollm2_files ;;
  smollm2_files)   # what the run has written so far (also while it still runs): results, logs, timings; no weights
           tar -czf "$OUT/smollm2_run.tgz" --exclude='*.safetensors' --exclude='*.bin' --exclude='*.npz' --exclude='*.ipynb' \
             --exclude='outputs/smollm2/base' --exclude='merged-*' --exclude='samples_draw*' --exclude='shard-*.jsonl' --exclude='outputs/smollm2/report/site' outputs/smollm2
           ls -la "$OUT/smollm2_run.tgz" ;;
  speed) # training rates over 20 timed steps, the library beside the stock loop in one process per shape; DPO as the stage
         # trains an arm (fitted split, the shared reference timed apart). Nemotron-H wants the Mamba kernels: a call
         # carrying .mamba_wheels installs them with `pip install --no-index --no-deps --target /tmp/mamba_site
         # .mamba_wheels/*.whl`, apart from /tmp/site so that a study lane running meanwhile keeps its code paths.
         # Beside stock PEFT: TRL's SFTTrainer without Liger (trl-plain-) and with its kernels, and the library with
         # optim.kernels: liger, in a process of their own (Liger patches the architecture for the whole process); Liger
         # has no kernels for Nemotron-H (its trl-8x6 row records the refusal).
         # `ours-indexed` beside `ours`: the experts' routed rows moved by plain indexing, as before train.routed_rows;
         # `ours-compile`: optim.kernels: compile. STEPS (default 21: 20 timed after the warm-up) sets each variant's steps. SPEED_JOBS (jobs separated by ';', each a shape, its variants and any train_speed.py options as --name=value) runs
         # a part of the list, in its order. Without the shipped site, this lane needs only trl, datasets, multiprocess,
         # kernels and dill (which the site ships; datasets reads its version at import) in /tmp/site: the .pipeline_wheels
         # that prepare_ship.sh builds is 140 MiB (the real model's GGUF among them), over what one call carries beside the
         # tree (~39 MiB of it), so carry a folder of those five wheels (~5 MiB) in one call and .mamba_wheels (~25 MiB) in another.
         # Since 2026-12-07 the tracked tree is ~41 MB and .mamba_wheels no longer fits beside it; this lane reads neither
         # data/tiny_base/model.safetensors (the tokenizer only) nor data/nemotron_h_small/model.safetensors (24 MB
         # together): moved aside on the CPU side for the call (and back after), all three wheel folders travel in one call.
         jobs=${SPEED_JOBS:-"qwen3-moe-30b-a3b ours-indexed ours ours-compile trl-plain-16x3-ckpt stock-16x3-ckpt;qwen3-moe-30b-a3b ours-liger trl-16x3 trl-16x3-ckpt;nemotron-h-31b ours-indexed ours ours-compile trl-plain-8x6 stock-8x6;nemotron-h-31b trl-8x6;nemotron-h-31b ours-dpo"}
         # A job may begin with VAR=value words (e.g. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False): its environment,
         # also its rows' tag. Unsloth's variants (unsloth-MxG[-ckpt]) want .unsloth_wheels/slim (unsloth, unsloth_zoo and a
         # bitsandbytes slimmed to its CUDA 13 library, built by tools/gpu_ship/unsloth_wheels.py, installed --no-deps:
         # their metadata caps trl and datasets below the pipeline's pins), on the path of their own jobs only, offline.
         # Beside .mamba_wheels they pass the carry limit: carry them in a later call on the same machine (/tmp/mamba_site stays),
         # before an Unsloth job starts (they install then). The GPU's clocks, power and temperature are
         # sampled every 2 s while the lane runs (clocks_HHMMSS.csv, one file per lane run: a later call on the same machine keeps the earlier file), so that a slow stretch can be told from a throttled card.
         nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active,memory.used \
           --format=csv -l 2 > "$OUT/clocks_$(date +%H%M%S).csv" 2>/dev/null & clocks=$!
         IFS=';' read -ra joblist <<< "$jobs"
         # Unsloth's wheels install when the lane starts too: a later call that does not carry them removes the folder
         # from the machine's copy of the tree before a later job of this lane would install them (2026-12-07)
         [[ "$jobs" == *unsloth-* ]] && [ -d .unsloth_wheels/slim ] && [ ! -d /tmp/unsloth_site ] && \
           python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/unsloth_site .unsloth_wheels/slim/*.whl
         for job in "${joblist[@]}"; do
           set -- $job; envs=()
           while [[ "${1:-}" == *=* ]]; do envs+=("$1"); shift; done
           shape=$1; shift
           opts=(); variants=()      # words beginning with -- are train_speed.py's options (e.g. --r=64 --alpha=128; --steps=41 over STEPS)
           for w in "$@"; do if [[ "$w" == --* ]]; then opts+=("$w"); else variants+=("$w"); fi; done; set -- ${variants[@]+"${variants[@]}"}
           path=/tmp/mamba_site:$PYTHONPATH
           # installed when its job starts, not when the lane does: a later call may carry .unsloth_wheels meanwhile
           [[ "$*" == *unsloth-* ]] && [ -d .unsloth_wheels/slim ] && [ ! -d /tmp/unsloth_site ] && \
             python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/unsloth_site .unsloth_wheels/slim/*.whl
           if [[ "$*" == *unsloth-* ]] && [ ! -d /tmp/unsloth_site ]; then
             echo "$(date +%T) skipped: $shape $* needs Unsloth, and no call of this machine carried .unsloth_wheels" | tee -a "$OUT/speed_jobs.txt"; continue; fi
           [[ "$*" == *unsloth-* ]] && { path=/tmp/unsloth_site:$path
             envs+=(HF_HUB_OFFLINE=1 UNSLOTH_DISABLE_STATISTICS=1 UNSLOTH_COMPILE_LOCATION=/tmp/unsloth_compiled_cache); }
           log="$OUT/speed_${shape}_${1}_$(date +%H%M%S).log"     # timed: a later call's job of the same shape keeps its own log
           echo "$(date +%T) ${envs[*]} $shape $* ${opts[*]+${opts[*]}}" >> "$OUT/speed_jobs.txt"
           env PYTHONPATH="$path" "${envs[@]}" python3 benchmarks/train_speed.py --shape "$shape" --variants "$@" --steps "${STEPS:-21}" ${opts[@]+"${opts[@]}"} --append \
             --out "$OUT/train_speed.json" --tag "$(printf '%s ' "${envs[@]}" | grep -o 'PYTORCH_CUDA_ALLOC_CONF=[^ ]*' || true)" > "$log" 2>&1; tail -n 4 "$log"
         done; kill $clocks 2>/dev/null ;;
  caches) tar -czf /tmp/triton_cache.tgz -C ~/.triton cache && ls -la /tmp/triton_cache.tgz   # `wait` returns them beside study.tgz
          tar -czf /tmp/flashinfer_cache.tgz -C ~/.cache flashinfer vllm && ls -la /tmp/flashinfer_cache.tgz
          [ -d /tmp/torchinductor_${USER:-root} ] && tar -czf /tmp/inductor_cache.tgz -C /tmp torchinductor_${USER:-root} && ls -la /tmp/inductor_cache.tgz ;;
  *) echo "usage: $0 wheels|base|smoke|resume|killrun|moeconfig|moetune|ckptcost|tests|enginestart|tiny|estimate|speed|smollm2|smollm2_files|caches ..." >&2; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv
