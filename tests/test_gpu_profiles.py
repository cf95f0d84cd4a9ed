"""The GPU profiles load and are what their comments say: gpu-smoke is the nemotron profile's code paths (its ranks,
target sets, merging, fitting, serving without batch invariance) on a small base of the nemotron base's architecture;
tiny-vllm is the tiny study served by vLLM."""
import json
from pathlib import Path

from rsi_repro.config import load_profile
from rsi_repro.generate import ModelRef, mamba_layers

ROOT = Path(__file__).resolve().parents[1]

def test_gpu_smoke_takes_the_nemotron_profiles_code_paths_on_a_nemotron_h_base():
    smoke, nemo = load_profile(ROOT / 'configs/gpu-smoke.yaml'), load_profile(ROOT / 'configs/nemotron.yaml', check_files=False)
    assert smoke.base.architecture == nemo.base.architecture == 'nemotron_h' and smoke.base.dtype == 'bfloat16'
    for s in ('sft', 'dpo', 'repair', 'rounds'):
        assert getattr(smoke, s).lora == getattr(nemo, s).lora                      # r=64 early, r=768 late, the same targets
    for s in ('sft', 'dpo', 'repair', 'rounds'):
        o = getattr(smoke, s).optim
        assert o.micro_batch_fit and o.length_grouping and o.lora_compute == 'bf16' and o.activation_checkpointing == 'auto'
        n = getattr(nemo, s).optim                                                 # as the nemotron profile cuts its steps
        assert (n.micro_batch_fit, n.length_grouping, n.lora_compute, n.activation_checkpointing) == (True, True, 'bf16', 'auto')
    assert smoke.serving.backend == 'vllm' and smoke.serving.merge_lora and not smoke.serving.vllm.batch_invariant
    assert [s.name for s in smoke.stages] == [s.name for s in nemo.stages]         # every stage the nemotron profile runs
    assert nemo.repair.executor == nemo.rounds.executor == 'slurm' and smoke.repair.executor == smoke.rounds.executor == 'local'   # one node, no Slurm
    assert smoke.compute.env['NCCL_NVLS_ENABLE'] == '0'
    cfg = json.loads((ROOT / 'data/nemotron_h_small/config.json').read_text())
    assert cfg['model_type'] == 'nemotron_h'
    assert mamba_layers(ModelRef(str(ROOT / 'data/nemotron_h_small'))) == 2        # Mamba-2 beside experts and attention

def test_tiny_vllm_is_the_tiny_study_served_by_vllm():
    tiny, served = load_profile(ROOT / 'configs/tiny.yaml'), load_profile(ROOT / 'configs/tiny-vllm.yaml')
    assert served.serving.backend == 'vllm' and served.serving.merge_lora      # float32: vLLM's LoRA kernels need a merge
    assert [s.name for s in served.stages] == [s.name for s in tiny.stages] and served.repair == tiny.repair
