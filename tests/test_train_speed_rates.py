"""benchmarks/results/train_speed.json and generation_<shape>.json: their `rates` are derived from their runs (the library rows of
train_speed's `summary`, which is its `runs`), and the keys are the ones `rsi-repro estimate` asks for, so a hand edit of
either side, or a shape renamed on one side, fails here."""
import copy
import importlib.util
import json
import statistics
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from rsi_repro.config import load_profile
from rsi_repro.estimate import rate_keys, read_rates, shape_of

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'benchmarks' / 'results'
DOC = json.loads((RESULTS / 'train_speed.json').read_text())


def train_speed():
    "benchmarks/train_speed.py as a module (it imports torch only inside its functions)."
    spec = importlib.util.spec_from_file_location('train_speed', ROOT / 'benchmarks' / 'train_speed.py')
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod


def test_the_rates_are_the_library_rows_tokens_per_s():
    ts = train_speed()
    assert DOC['rates'] == ts.rates_from_summary(DOC['summary'])
    library = [r for r in DOC['summary'] if r['library'] and not r['tag']     # a tagged run departs from the library's own
               and r['device'] == ts.ESTIMATE_DEVICE]                          # and the bill is one card's
    tagged = [r for r in DOC['summary'] if r['library'] and r['tag']]
    assert any(r['tag'] == 'PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False' for r in tagged)
    assert not {r['tokens_per_s'] for r in tagged if r['date'] >= '2026-12-03'} & {v['value'] for v in DOC['rates'].values()}
    for key, rate in DOC['rates'].items():
        (stage, _, tag), name = key.split('.')[1].partition('-'), key.split('.', 2)[2]
        shape = [s for s, n in ts.ESTIMATE_SHAPES.items() if n == name]
        assert len(shape) == 1 and stage in ('sft', 'dpo', 'dpo_reference') and tag in ('', 'compile', 'liger', 'compile-pad16')
        kernels, _, pad = tag.partition('-')
        rows = [r for r in library if r['shape'] == shape[0] and r['stage'] == stage.replace('dpo_reference', 'dpo')
                and ts.row_kernels(r) == (kernels or 'none')                  # each rate: the fused layers it ran with
                and (r['settings'] or {}).get('pad_to_multiple_of', 1) == int(pad.removeprefix('pad') or 1)]   # and its padding
        rows = [r for r in rows if ts.commit_of(r) == ts.commit_of(rows[-1])]   # the last commit that measured it: repeated runs
        if stage == 'dpo_reference':                         # the reference pass the last DPO run timed apart
            whole = round(rows[-1]['reference_pairs'] * rows[-1]['mean_row_tokens'] / rows[-1]['reference_seconds'], 1)
            assert rate['value'] == rows[-1]['reference_tokens_per_s']
            if rows[-1].get('reference_timed_batches'):         # its batches timed: the median after the first, as steps are
                assert rows[-1]['reference_with_warmup_tokens_per_s'] == whole < rate['value'] and 'timed batches' in rate['what']
                assert rows[-1]['reference_steady'] is (rows[-1]['reference_timed_batches'] >= ts.STEADY_STEPS)   # 14 of 240 pairs: not
            else: assert rate['value'] == whole
            assert 'computed once for every arm' in rate['what']; continue
        assert rate['value'] == round(statistics.median(r['tokens_per_s'] for r in rows), 1) and rate['unit'] == 'tokens/s'
        if len(rows) > 1:                                     # each run's own rate and split beside the median
            assert f"the median of {len(rows)} runs measured at {ts.commit_of(rows[-1])}" in rate['what']
            assert all(f"{r['tokens_per_s']:,.1f} at {r['micro_batch']} x {r['grad_accum']}" in rate['what'] for r in rows)
        assert f"r={rows[-1]['lora_r']}" in rate['what']
        assert ('SFT-shaped' in rate['what'] and 'not DPO' in rate['what']) if stage == 'sft' else rate['what'].startswith('DPO')
    priced = [r for r in library if r['shape'] in ts.ESTIMATE_SHAPES]   # the e16 layout (an A/B on an 80 GB card) prices nothing
    assert {r['shape'] for r in DOC['summary'] if r['library']} - set(ts.ESTIMATE_SHAPES) == {'nemotron-h-31b-e16'}
    assert {(r['shape'], r['stage']) for r in priced} == {(s, t) for s in ('qwen3-moe-30b-a3b', 'nemotron-h-31b') for t in ('sft', 'dpo')}
    assert {k: v['value'] for k, v in DOC['rates'].items()} == {
        'train.sft.qwen3_moe-30b-a3b': 10327.2, 'train.sft.nemotron_h-30b-a3b': 13489.6,
        'train.sft-compile.qwen3_moe-30b-a3b': 19757.0, 'train.sft-compile.nemotron_h-30b-a3b': 11473.1,
        'train.sft-compile-pad16.nemotron_h-30b-a3b': 12946.9,    # the median of 6a949f4's 3 fresh processes: 13,166, 11,483, 12,947
        'train.sft-liger.qwen3_moe-30b-a3b': 11282.6,
        'train.dpo.qwen3_moe-30b-a3b': 6736.7, 'train.dpo.nemotron_h-30b-a3b': 10412.0,
        'train.dpo_reference.qwen3_moe-30b-a3b': 8752.8, 'train.dpo_reference.nemotron_h-30b-a3b': 36863.0}
    rows = ts.rate_rows(DOC['summary'])                     # every training rate: the median of 20 timed steps
    assert all(r['timed_steps'] >= ts.STEADY_STEPS for k in rows for r in rows[k])
    dpo = [r for r in priced if r['stage'] == 'dpo']      # DPO rates are the profile's dpo rank, as the stage fits and trains it
    assert {(r['variant'], r['micro_batch'], r['grad_accum'], r['activation_checkpointing'], r['lora_r']) for r in dpo} == {
        ('ours-dpo', 2, 24, True, 64), ('ours-dpo', 6, 8, False, 64), ('ours-dpo', 3, 16, False, 64), ('ours-dpo', 4, 12, False, 64)}   # the profile's split, then fitted ones
    assert rows['train.dpo.nemotron_h-30b-a3b'][-1]['settings']['shared_reference'] is True
    # a compile rate says which regions its run compiled, from the row's evidence
    assert rows['train.sft-compile.qwen3_moe-30b-a3b'][-1]['compile_regions'] == 'compile_decoder_layers'
    assert 'each decoder layer compiled whole' in DOC['rates']['train.sft-compile.qwen3_moe-30b-a3b']['what']
    assert rows['train.sft-compile.nemotron_h-30b-a3b'][-1]['compile_regions'] == 'compile_norms_and_activations'
    assert "RMSNorms and experts' activations" in DOC['rates']['train.sft-compile.nemotron_h-30b-a3b']['what']


def test_the_summary_is_the_runs():
    ts = train_speed()
    assert DOC['summary'] == ts.summarise(DOC)
    ours = [r for run in DOC['runs'] for r in run['results'] if ts.is_library(r['variant']) and 'error' not in r]
    assert [r['tokens_per_s'] for r in ours] == [r['tokens_per_s'] for r in DOC['summary'] if r['library']]


def test_a_hand_edit_on_either_side_is_seen():
    ts = train_speed()
    edited = copy.deepcopy(DOC)
    edited['rates']['train.sft.nemotron_h-30b-a3b']['value'] = 12000.0
    assert edited['rates'] != ts.rates_from_summary(edited['summary'])
    edited = copy.deepcopy(DOC)
    [r for r in edited['summary'] if r['library'] and r['shape'] == 'nemotron-h-31b' and r['stage'] == 'sft'
     and r['device'] == ts.ESTIMATE_DEVICE][-1]['tokens_per_s'] = 12000.0
    assert DOC['rates'] != ts.rates_from_summary(edited['summary']) and edited['summary'] != ts.summarise(edited)


def test_the_keys_are_the_ones_the_estimate_asks_for():
    nemotron = load_profile(ROOT / 'configs' / 'nemotron.yaml')
    # on a Qwen3-MoE base the profile's SFT stages would not pad (no Mamba kernels to keep to one length multiple)
    unpadded = replace(nemotron, **{s: replace(getattr(nemotron, s), optim=replace(getattr(nemotron, s).optim, pad_to_multiple_of=1))
                                    for s in ('sft', 'repair', 'rounds')})
    profiles = ((nemotron, shape_of(nemotron)), (unpadded, 'qwen3_moe-30b-a3b'))
    keys = [rate_keys(p, shape)[kind] for p, shape in profiles for kind in ('train.sft', 'train.dpo')]
    keys += [rate_keys(p, shape)['train.dpo_reference'] for p, shape in profiles]   # the reference pass
    assert set(keys) <= set(DOC['rates'])
    assert {keys[0], keys[2]} == {'train.sft-compile-pad16.nemotron_h-30b-a3b', 'train.sft-compile.qwen3_moe-30b-a3b'}   # kernels: compile, padding
    rates = read_rates(RESULTS)
    for key in keys:
        assert Path(rates[key].file).name == 'train_speed.json' and rates[key].path == f'rates.{key}'
        assert rates[key].value == DOC['rates'][key]['value']


def generation():
    spec = importlib.util.spec_from_file_location('generation', ROOT / 'benchmarks' / 'generation.py')
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod


def test_generation_rates_are_the_last_run_of_each_backend_and_batch():
    "generation_<shape>.json: each rate is its backend's last run at that batch size; vLLM keyed by the invariance it ran with."
    gen = generation()
    nemotron = load_profile(ROOT / 'configs' / 'nemotron.yaml')
    for shape, name in (('qwen3-moe-30b-a3b', 'qwen3_moe-30b-a3b'), ('nemotron-h-31b', 'nemotron_h-30b-a3b')):
        doc = json.loads((RESULTS / f'generation_{shape}.json').read_text())
        assert doc['rates'] == gen.shape_rates(doc)
        for entry in doc['backends'].values():
            kind = 'hf' if entry['backend'] == 'hf' else ('vllm-invariant' if entry.get('VLLM_BATCH_INVARIANT') == '1' else 'vllm')
            for bs in (64, 256):
                last = [r for r in entry['runs'] if r['batch'] == bs][-1]
                assert doc['rates'][f'generate.{kind}.b{bs}.{name}']['value'] == last['output_tokens_per_s']
                assert last['output_tokens'] == bs * doc['meta']['new_tokens']      # every row ran to its budget
        keys = rate_keys(nemotron, name)      # what the nemotron profile asks for at this shape is there
        assert {keys['generate.hf'], keys['generate.vllm']} <= set(doc['rates'])
    assert rate_keys(nemotron, 'x')['generate.vllm'] == 'generate.vllm.b256.x'      # the profile serves without batch invariance


def test_a_rate_is_the_median_of_the_runs_of_the_last_commit_that_measured_it():
    "Runs of an earlier commit (another library) are not pooled; a later commit's single run replaces them; a tagged run never counts."
    ts = train_speed()
    row = next(r for r in DOC['summary'] if r['library'] and r['variant'] == 'ours-compile' and r['shape'] == 'nemotron-h-31b')
    def run(commit, rate, tag=''): return {**row, 'note': f"{commit}; a run", 'tokens_per_s': rate, 'tag': tag}
    rates = ts.rates_from_summary([run('a', 20000.0), run('b', 9000.0), run('b', 12000.0), run('b', 10000.0), run('b', 30000.0, 'X=1')])
    assert rates['train.sft-compile.nemotron_h-30b-a3b']['value'] == 10000.0
    assert 'the median of 3 runs measured at b (tokens/s: 9,000.0 at 16 x 3, 12,000.0 at 16 x 3, 10,000.0 at 16 x 3)' in rates['train.sft-compile.nemotron_h-30b-a3b']['what']
    rates = ts.rates_from_summary([run('b', 9000.0), run('b', 12000.0), run('c', 11000.0)])
    assert rates['train.sft-compile.nemotron_h-30b-a3b']['value'] == 11000.0 and 'median' not in rates['train.sft-compile.nemotron_h-30b-a3b']['what']
    padded = {**run('c', 13000.0), 'variant': 'ours-compile-pad16', 'settings': {**row['settings'], 'pad_to_multiple_of': 16}}
    assert set(ts.rates_from_summary([run('c', 11000.0), padded])) == {'train.sft-compile.nemotron_h-30b-a3b', 'train.sft-compile-pad16.nemotron_h-30b-a3b'}


def test_every_row_reports_its_timed_steps_median_spread_and_slow_steps():
    "The summary says how many steps each rate rests on and whether that is steady (>= 20 timed steps, the median)."
    ts = train_speed()
    res = {'step_seconds': [9.0] + [1.0] * 19 + [2.5], 'step_tokens': [100] + [1000] * 19 + [1000]}   # warm-up, 20 timed
    st = ts.step_stats(res)
    assert (st['timed_steps'], st['steady'], st['median_tokens_per_s'], st['min_tokens_per_s'], st['max_tokens_per_s']) == (20, True, 1000.0, 400.0, 1000.0)
    assert st['slow_steps'] == [{'step': 20, 'seconds': 2.5}]                   # reported, and still counted in min
    assert ts.rate(res) == 1000.0 and ts.step_stats({**res, 'profiled_step': 20})['slow_steps'] == []
    assert ts.step_stats({'step_seconds': [1.0] * 4, 'step_tokens': [10] * 4})['steady'] is False
    assert 'first_half_median_tokens_per_s' not in st                         # 20 timed steps: no halves
    warming = {'step_seconds': [9.0] + [2.0] * 20 + [1.0] * 20, 'step_tokens': [100] + [1000] * 40}   # 40 timed, faster later
    st = ts.step_stats(warming)
    assert (st['first_half_median_tokens_per_s'], st['second_half_median_tokens_per_s'], st['median_tokens_per_s']) == (500.0, 1000.0, 750.0)
    for row in DOC['summary']:
        assert row['timed_steps'] >= 1 and row['min_tokens_per_s'] <= row['median_tokens_per_s'] <= row['max_tokens_per_s']
        assert row['steady'] == (row['timed_steps'] >= ts.STEADY_STEPS)
        assert ('second_half_median_tokens_per_s' in row) == (row['timed_steps'] >= 2 * ts.STEADY_STEPS)
        assert row['rate_of'] == (ts.RATE_OF if row['date'] >= '2026-12-02' else ts.OLD_RATE_OF)   # before the 20-step median: the old formula
    halves = [row for row in DOC['summary'] if 'second_half_median_tokens_per_s' in row]   # RESULTS: all but one sped up
    assert [(r['shape'], r['variant']) for r in halves if r['second_half_median_tokens_per_s'] < r['first_half_median_tokens_per_s']] \
        == [('nemotron-h-31b-e16', 'ours-dpo-compile-pad16')] and len(halves) == 16
    steady = [row['steady'] for row in DOC['summary'] if row['date'] >= '2026-12-02']
    assert all(steady) and len(steady) == 63                                   # every run since 2026-12-02: 20 timed steps or more
    assert not any(row['steady'] for row in DOC['summary'] if row['date'] < '2026-12-02')   # the 1-4-step runs before


def test_a_reference_pass_with_timed_batches_is_rated_as_steps_are():
    "Its batches' real tokens/s after the first (a warm-up), median; the whole pass's rate kept beside it."
    ts = train_speed()
    run = copy.deepcopy(next(r for r in reversed(DOC['runs']) if r['shape']['name'] == 'nemotron-h-31b'
                             and any(x['variant'] == 'ours-dpo' for x in r['results'])))
    res = next(x for x in run['results'] if x['variant'] == 'ours-dpo')
    res.update(reference_batch_size=6, reference_batches=[[6, 6000, 10.0], [6, 6000, 1.0], [6, 3000, 1.0], [4, 2000, 0.5]])
    row = [r for r in ts.summarise({'runs': [run]}) if r['variant'] == 'ours-dpo'][-1]
    assert (row['reference_tokens_per_s'], row['reference_timed_batches'], row['reference_min_max_tokens_per_s']) == (4000.0, 3, [3000.0, 6000.0])
    assert row['reference_with_warmup_tokens_per_s'] == round(row['reference_pairs'] * row['mean_row_tokens'] / row['reference_seconds'], 1)
    rate = ts.rates_from_summary([row])['train.dpo_reference.nemotron_h-30b-a3b']
    assert rate['value'] == 4000.0 and 'the median of its 3 timed batches' in rate['what'] and '6 a forward' in rate['what']
    # an arm paying for the pass alone: a token's seconds through both passes added
    res['tokens_per_s'] = 4000.0
    row = [r for r in ts.summarise({'runs': [run]}) if r['variant'] == 'ours-dpo'][-1]
    assert row['one_arm_with_reference_tokens_per_s'] == 2000.0
    assert row['profile_dpo_arms'] == 6 and row['profile_arm_with_reference_tokens_per_s'] == round(1 / (1 / 4000 + 1 / 24000), 1)


def test_dpo_with_compile_and_padding_sets_its_own_rate_and_a_candidate_sets_none():
    """`ours-dpo-compile-padN` is the library's train_dpo with optim.kernels compile and padding: its row prices
    `train.dpo-compile-padN.<shape>` (the key the estimate asks for when the profile's dpo section sets them), not the
    plain DPO rate; `ours-compile-layers-padN` (a candidate's regions) and `ours-compile-norms-padN` set no rate. Every
    rate says the LoRA rank it was measured at, which the estimate compares with each part's rank."""
    ts = train_speed()
    assert ts.is_library('ours-dpo-compile-pad16') and ts.is_library('ours-compile-pad16')
    assert not ts.is_library('ours-compile-layers-pad16') and not ts.is_library('ours-compile-norms-pad16')
    dpo = [r for r in DOC['summary'] if r['library'] and r['variant'] == 'ours-dpo' and r['shape'] == 'nemotron-h-31b'][-1]
    assert dpo['reference_tokens_per_s'] > 0                                     # it timed the shared reference pass too
    row = {**dpo, 'variant': 'ours-dpo-compile-pad16', 'note': 'zz; a run', 'tokens_per_s': 14000.0,
           'settings': {**dpo['settings'], 'kernels': 'compile', 'pad_to_multiple_of': 16}}
    rates = ts.rates_from_summary([dpo, row])
    assert rates['train.dpo-compile-pad16.nemotron_h-30b-a3b']['value'] == 14000.0
    assert rates['train.dpo.nemotron_h-30b-a3b']['value'] == dpo['tokens_per_s']          # the plain rate is untouched
    assert {v['lora_r'] for v in rates.values()} == {64}
    nemotron = load_profile(ROOT / 'configs' / 'nemotron.yaml')
    dpo_optim = replace(nemotron.dpo.optim, kernels='compile', pad_to_multiple_of=16)
    asked = rate_keys(replace(nemotron, dpo=replace(nemotron.dpo, optim=dpo_optim)), 'nemotron_h-30b-a3b')
    assert asked['train.dpo'] in rates and asked['train.dpo_reference'] in rates
    assert all(v['lora_r'] in (64, 768) for v in DOC['rates'].values())


def test_a_rate_at_another_rank_has_its_own_key_and_prices_that_rank(tmp_path):
    """An SFT run at r=64 (a `gpu_study.sh speed` job with `--r=64 --alpha=128`) sets `train.sft-compile-pad16-r64.<shape>`
    and leaves the card rank's rate alone. The estimate then prices the profile's r=64 SFT epochs at it, the r=768 stages
    (repair, rounds) at the card rank's rate, and names no other rank's rate for the epochs."""
    import shutil
    from rsi_repro.estimate import estimate, rank_key, rank_lines
    ts = train_speed()
    sft = [r for r in DOC['summary'] if r['library'] and r['variant'] == 'ours-compile-pad16' and r['shape'] == 'nemotron-h-31b'
           and r['device'] == ts.ESTIMATE_DEVICE][-1]
    key, fast = 'train.sft-compile-pad16.nemotron_h-30b-a3b', {**sft, 'lora_r': 64, 'tokens_per_s': 20000.0}
    rates = ts.rates_from_summary([sft, fast])
    assert rates[key]['value'] == sft['tokens_per_s'] and rates[key]['lora_r'] == 768
    assert rates[rank_key(key, 64)]['value'] == 20000.0 and rates[rank_key(key, 64)]['lora_r'] == 64 and 'r=64' in rates[rank_key(key, 64)]['what']
    folder = tmp_path / 'results'; shutil.copytree(RESULTS, folder)
    doc = json.loads((folder / 'train_speed.json').read_text())
    doc['rates'][rank_key(key, 64)] = rates[rank_key(key, 64)]
    (folder / 'train_speed.json').write_text(json.dumps(doc))
    est = estimate(load_profile(ROOT / 'configs' / 'nemotron.yaml'), folder)
    trained = [l for l in est.lines if l.work.kind == 'train.sft']
    epochs, card_rank = [l for l in trained if l.work.stage == 'sft'], [l for l in trained if l.work.stage != 'sft']
    assert len(epochs) == 3 and {l.work.rank for l in epochs} == {64} and {l.work.rank for l in card_rank} == {768}
    assert all(l.rate_key == rank_key(key, 64) and l.hours['vllm'] == l.tokens / 20000.0 / 3600 for l in epochs)
    assert all(l.rate_key == key and l.hours['vllm'] == l.tokens / doc['rates'][key]['value'] / 3600 for l in card_rank)
    assert not any(line.startswith('  sft ') for line in rank_lines(est)) and rank_key(key, 64) in est.rates
    from rsi_repro.estimate import format_estimate
    assert f"(r=64)                 {rank_key(key, 64)}: 20,000.0 tokens/s" in format_estimate(est)      # listed with the rates


def test_only_the_estimates_card_sets_a_rate():
    """The estimate is one machine's bill: a library row of an estimate shape measured on another card (the 30B layout on
    an H100, memory-bound at 3 x 16) is in the summary and sets no rate; the same row on the estimate's card does."""
    ts = train_speed()
    h100 = [r for r in DOC['summary'] if r['library'] and r['shape'] == 'nemotron-h-31b' and r['device'] != ts.ESTIMATE_DEVICE]
    assert [(r['variant'], r['lora_r'], r['micro_batch'], r['grad_accum']) for r in h100] == [('ours-compile-pad16', 64, 3, 16)]
    key = 'train.sft-compile-pad16-r64.nemotron_h-30b-a3b'
    assert key not in DOC['rates'] and key not in ts.rates_from_summary(h100)
    assert ts.rates_from_summary([{**h100[0], 'device': ts.ESTIMATE_DEVICE}])[key]['value'] == h100[0]['tokens_per_s']
    assert all(r['device'] == ts.ESTIMATE_DEVICE for rows in ts.rate_rows(DOC['summary']).values() for r in rows)


def test_a_dpo_step_without_the_reference_forward_is_counted_as_such():
    """MFU counts the reference forward only where the timed steps run it: TRL's DPOTrainer by default, not the library's
    shared pass nor TRL's `precompute_ref_log_probs` (its pass in the trainer's set-up)."""
    ts = train_speed()
    rows = {r['variant']: r for r in DOC['summary'] if r['shape'] == 'nemotron-h-31b-e16' and r['stage'] == 'dpo'}
    every, pre, ours = rows['trl-dpo-4x12'], rows['trl-dpo-precompute-4x12'], rows['ours-dpo-compile-pad16']
    assert not ts.reference_apart(every) and ts.reference_apart(pre) and ts.reference_apart(ours)
    assert pre['gflops_per_token'] == ours['gflops_per_token'] < every['gflops_per_token']
    assert ts.flops_beside({**pre, 'settings': {**pre['settings'], 'precompute_ref_log_probs': False}})['gflops_per_token'] == every['gflops_per_token']


def test_a_decode_with_the_mamba_state_in_bfloat16_is_priced_apart():
    """generation.py's `vllm-ssm-bf16` entry (the engine given serving.vllm.mamba_ssm_cache_dtype: bfloat16) sets
    `generate.vllm-ssm-bf16.<batch>.<shape>`, the key a profile that sets it asks for, and leaves the float32 rate alone."""
    gen = generation()
    doc = copy.deepcopy(json.loads((RESULTS / 'generation_nemotron-h-31b.json').read_text()))
    plain = next(e for e in doc['backends'].values() if e['backend'] == 'vllm-not-invariant')
    doc['backends']['vllm-ssm-bf16'] = {**plain, 'backend': 'vllm-ssm-bf16', 'rate': {'256': 12345.6},
                                        'engine_args': {**plain['engine_args'], 'mamba_ssm_cache_dtype': 'bfloat16'}}
    rates = gen.shape_rates(doc)
    assert rates['generate.vllm-ssm-bf16.b256.nemotron_h-30b-a3b']['value'] == 12345.6
    assert "the Mamba layers' state in bfloat16" in rates['generate.vllm-ssm-bf16.b256.nemotron_h-30b-a3b']['what']
    assert rates['generate.vllm.b256.nemotron_h-30b-a3b'] == doc['rates']['generate.vllm.b256.nemotron_h-30b-a3b']
    nemotron = load_profile(ROOT / 'configs' / 'nemotron.yaml')
    bf16 = replace(nemotron, serving=replace(nemotron.serving, vllm=replace(nemotron.serving.vllm, mamba_ssm_cache_dtype='bfloat16')))
    assert rate_keys(bf16, 'nemotron_h-30b-a3b')['generate.vllm'] in rates
    assert gen.shape_serving(SimpleNamespace(backend='vllm-ssm-bf16', prompt_tokens=200, new_tokens=128, batches=[256])).vllm.mamba_ssm_cache_dtype == 'bfloat16'
