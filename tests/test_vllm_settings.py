"The vLLM serving settings fail closed, and the engine never asks for more positions than the base has (no vLLM needed)."
from pathlib import Path

import pytest

from rsi_repro.config import ProfileError, Serving, VLLMSettings, from_dict
from rsi_repro.generate import ModelRef, vllm_engine_args

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize('bad, problem', [({'gpu_memory_utilization': 1.5}, 'gpu_memory_utilization: must be in (0, 1]'),
                                          ({'gpu_memory_utilization': 0}, 'gpu_memory_utilization: must be in (0, 1]'),
                                          ({'kv_cache_gib': 0}, 'kv_cache_gib: must be > 0 GiB'),
                                          ({'enforce_eager': 'yes'}, 'enforce_eager: expected bool'),
                                          ({'max_num_seqs': 0}, 'max_num_seqs: must be > 0')])
def test_bad_vllm_settings_are_named(bad, problem):
    with pytest.raises(ProfileError, match=problem.replace('(', r'\(').replace(']', r'\]')):
        from_dict(Serving, {'vllm': bad}, 'p.yaml', 'serving')


def test_max_model_len_is_capped_at_the_bases_positions():
    tiny = ModelRef(str(ROOT / 'data/tiny_base'))          # max_position_embeddings 1024
    kw = vllm_engine_args(tiny, Serving(max_input_tokens=32768, max_new_tokens=2048, vllm=VLLMSettings(kv_cache_gib=12, enforce_eager=True)))
    assert kw['max_model_len'] == 1024 and kw['enforce_eager'] is True and kw['kv_cache_memory_bytes'] == 12 * 2**30
    assert vllm_engine_args(tiny, Serving(max_input_tokens=256, max_new_tokens=64))['max_model_len'] == 320
