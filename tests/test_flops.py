"""The FLOP count behind every MFU figure (benchmarks/flops.py): its matrices are the models' own (their parameter
counts are the built models' 30.5 B and 31.6 B), and each term of the formula moves as the formula says."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'benchmarks'))
from flops import SPEC_PEAK, matrices, mfu, training_flops_per_token  # noqa: E402
from shapes import NEMOTRON_H_30B_A3B, QWEN3_MOE_30B_A3B, SHAPE_WORDS  # noqa: E402

from rsi_repro.train import LORA_TARGETS

SHAPES = [(QWEN3_MOE_30B_A3B, 'qwen3_moe', 'qwen3-moe-30b-a3b'), (NEMOTRON_H_30B_A3B, 'nemotron_h', 'nemotron-h-31b')]


@pytest.mark.parametrize('cfg,arch,name', SHAPES)
def test_the_matrices_are_the_models_parameters(cfg, arch, name):
    "Every matrix of every expert plus the embedding is the built model's count (the words the benchmarks print), to 0.1 B."
    total = sum(i * o * k for _, i, o, k in matrices(cfg, arch, all_experts=True)) + cfg['vocab_size'] * cfg['hidden_size']
    assert f"{total / 1e9:.1f} B parameters" in SHAPE_WORDS[name]
    active = sum(i * o * k for _, i, o, k in matrices(cfg, arch)) + cfg['vocab_size'] * cfg['hidden_size']
    assert 3.0e9 < active < 3.7e9                                       # "A3B": about 3 B parameters per token


def test_the_lora_matrices_are_the_ones_peft_wrapped():
    "r=768 on the profile's targets: the trainable parameters the benchmark runs recorded (the fused experts are not wrapped)."
    import json
    runs = json.loads((Path(__file__).resolve().parents[1] / 'benchmarks/results/train_speed.json').read_text())['runs']
    recorded = {(run['shape']['architecture'], r['trainable_parameters']) for run in runs for r in run['results'] if r.get('trainable_parameters')}
    for cfg, arch, _ in SHAPES:
        lora = sum(768 * (i + o) * k for n, i, o, k in matrices(cfg, arch) if n in LORA_TARGETS[arch])
        assert (arch, lora) in recorded


@pytest.mark.parametrize('cfg,arch,name', SHAPES)
def test_each_term_moves_as_the_formula_says(cfg, arch, name):
    f = lambda **kw: training_flops_per_token(cfg, arch, **{**dict(mean_row_tokens=330, lora_r=768, targets=LORA_TARGETS[arch], checkpointing=False), **kw})
    plain = f()
    assert plain['flops_per_token'] == pytest.approx(2 * plain['frozen_forward'] + 3 * plain['lora_forward'] + 3 * plain['core_forward'])
    assert f(checkpointing=True)['flops_per_token'] == pytest.approx(plain['flops_per_token'] + plain['forward'])
    assert f(reference_forward=True)['flops_per_token'] == pytest.approx(plain['flops_per_token'] + plain['frozen_forward'] + plain['core_forward'])
    assert f(lora_r=0)['lora_forward'] == 0 and f(lora_r=384)['lora_forward'] == pytest.approx(plain['lora_forward'] / 2)
    assert f(targets=())['lora_forward'] == 0
    longer = f(mean_row_tokens=660)
    assert longer['frozen_forward'] == plain['frozen_forward'] and longer['core_forward'] > plain['core_forward']
    assert mfu(10_000, plain['flops_per_token'], SPEC_PEAK['NVIDIA H200']) == pytest.approx(10_000 * plain['flops_per_token'] / 989.4e12)


def test_a_measured_peak_in_the_file_is_read_against_every_row_of_its_device():
    """A `peak` run in train_speed.json is read against every row of its device, beside the spec's peak (the last run of
    a device counts: here one played at 800 TFLOP/s); rows of another device carry neither."""
    import copy, json
    from train_speed import with_summary_and_rates
    doc = json.loads((Path(__file__).resolve().parents[1] / 'benchmarks/results/train_speed.json').read_text())
    peaks = [(run['meta']['device'], r['peak_tflops']) for run in doc['runs'] for r in run['results'] if r['variant'] == 'peak']
    probed = [r for r in doc['summary'] if r['device'] == peaks[-1][0]]
    assert probed and all(r['mfu_of_measured_peak'] == pytest.approx(r['mfu_of_spec_peak'] * 989.4 / peaks[-1][1], abs=2e-3)
                          for r in probed)                                       # the H200's probe, read against its rows
    others = [r for r in doc['summary'] if r['device'] != peaks[-1][0]]          # the H100's rows: no probe ran there
    assert others and all('mfu_of_measured_peak' not in r and r['mfu_of_spec_peak'] > 0 for r in others)
    doc = copy.deepcopy(doc)
    other = copy.deepcopy(doc['runs'][0]); other['meta']['device'] = 'NVIDIA H100'
    doc['runs'] += [other, {'meta': {**doc['runs'][0]['meta'], 'device': 'NVIDIA H200'}, 'shape': doc['runs'][0]['shape'],
                            'results': [{'variant': 'peak', 'peak_tflops': 800.0}]}]
    rows = with_summary_and_rates(doc)['summary']
    h200 = [r for r in rows if r['device'] == 'NVIDIA H200']
    assert h200 and all(r['mfu_of_measured_peak'] == pytest.approx(r['tokens_per_s'] * r['gflops_per_token'] * 1e9 / 800e12, abs=2e-3)
                    and r['mfu_of_measured_peak'] == pytest.approx(r['mfu_of_spec_peak'] * 989.4 / 800, abs=2e-3) for r in h200)
    assert all(r['mfu_of_measured_peak'] > r['mfu_of_spec_peak'] for r in h200 if r['mfu_of_spec_peak'] > 0.01)
    assert all('mfu_of_measured_peak' not in r and 'mfu_of_spec_peak' not in r for r in rows if r['device'] == 'NVIDIA H100')


def test_decode_bytes_bound_what_every_measured_rate_moves():
    """The decode byte count (benchmarks/flops.py): the routed experts a batch reads lie between k (every token the same)
    and all of them; with every expert read, the weights are the whole model's; no measured rate moves more than the
    GPU's bandwidth with the fewest bytes any routing needs; generation_hbm.json is the table the committed runs give."""
    import json
    from flops import GENERATION_FILES, decode_bytes_per_step, expected_distinct, generation_table
    assert expected_distinct(128, 8, 1) == pytest.approx(8) and expected_distinct(128, 8, 10_000) == pytest.approx(128)
    for cfg, arch, _ in SHAPES:
        shared, uniform = (decode_bytes_per_step(cfg, arch, 256, 264, r) for r in ('shared', 'uniform'))
        assert shared['weights'] < uniform['weights'] and shared['kv_cache'] == uniform['kv_cache'] > 0
        everything = sum(i * o * k for n, i, o, k in matrices(cfg, arch, all_experts=True)) * 2
        assert decode_bytes_per_step(cfg, arch, 100_000, 264)['weights'] == pytest.approx(everything, rel=1e-6)
        assert (uniform['mamba_state'] > 0) == (arch == 'nemotron_h')
    results = Path(__file__).resolve().parents[1] / 'benchmarks/results'
    rows = generation_table({f: json.loads((results / f).read_text()) for f in GENERATION_FILES})
    assert rows and all(r['shared']['hbm_fraction_of_spec'] <= 1 for r in rows)
    assert json.loads((results / 'generation_hbm.json').read_text())['rows'] == rows


def test_a_runs_mamba_state_is_counted_at_the_dtype_its_engine_kept_it_in():
    """An engine given serving.vllm.mamba_ssm_cache_dtype: bfloat16 moves its Mamba state at two bytes an element, the
    weights and KV cache as before; a dtype vLLM has not, or a GPU without a bandwidth figure, is refused by name."""
    import copy, json
    from flops import STATE_BYTES, decode_bytes_per_step, generation_table
    from shapes import SHAPES as BY_NAME
    doc = json.loads((Path(__file__).resolve().parents[1] / 'benchmarks/results/generation_nemotron-h-31b.json').read_text())
    run = doc['backends']['vllm-not-invariant']
    bf16 = copy.deepcopy(run); bf16['engine_args']['mamba_ssm_cache_dtype'] = 'bfloat16'
    doc = {**doc, 'backends': {'vllm-not-invariant': run, 'vllm-ssm-bf16': bf16}}
    rows = {(r['backend'], r['batch']): r for r in generation_table({'f.json': doc})}
    f32, b16 = rows['vllm-not-invariant', 256], rows['vllm-ssm-bf16', 256]
    assert (f32['mamba_state_dtype'], b16['mamba_state_dtype']) == ('auto', 'bfloat16') and f32['file'] == 'f.json'
    arch, cfg = BY_NAME['nemotron-h-31b']
    context = doc['meta']['prompt_tokens'] + doc['meta']['new_tokens'] / 2
    expected = decode_bytes_per_step(cfg, arch, 256, context, 'shared', state_bytes=STATE_BYTES['bfloat16'])
    assert b16['shared']['gb_mamba_state'] == round(expected['mamba_state'] / 1e9, 2) < f32['shared']['gb_mamba_state']
    assert b16['shared']['gb_weights'] == f32['shared']['gb_weights'] and b16['shared']['gb_kv_cache'] == f32['shared']['gb_kv_cache']
    bad = copy.deepcopy(bf16); bad['engine_args']['mamba_ssm_cache_dtype'] = 'fp8'
    with pytest.raises(ValueError, match=r"vllm-ssm-bf16: mamba_ssm_cache_dtype 'fp8'"):
        generation_table({'f.json': {**doc, 'backends': {'vllm-ssm-bf16': bad}}})
    with pytest.raises(ValueError, match=r"'NVIDIA A100-SXM4-80GB': no HBM bandwidth"):
        generation_table({'f.json': {**doc, 'meta': {**doc['meta'], 'device': 'NVIDIA A100-SXM4-80GB'}}})
