"""`rsi-repro estimate`: tokens follow the profile's sizes and the mean lengths, hours follow the rates, every rate names its
file, and a missing rate stops the command with the keys it lacks."""
import contextlib
import io
import json
import shutil
import uuid
from pathlib import Path

import pytest

from rsi_repro.cli import main
from rsi_repro.config import load_profile
from rsi_repro.estimate import RATE_LOCATIONS, rate_keys, read_rates

ROOT = Path(__file__).resolve().parents[1]
NEMOTRON = ROOT / 'configs' / 'nemotron.yaml'
RESULTS = ROOT / 'benchmarks' / 'results'
ROW_RATES = ('cpu.corpus_load_cold', 'cpu.banding', 'cpu.binarising')


def cli(*argv):
    "(exit code, stdout, stderr) of `rsi-repro ARGV`."
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err): code = main(list(map(str, argv)))
    return code, out.getvalue(), err.getvalue()


def write_rates(folder: Path, values: dict, name: str = 'rates.json') -> Path:
    "A results file declaring `values` ({key: value}) in its `rates` section."
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps({'rates': {k: {'value': v, 'unit': 'rows per CPU second' if k in ROW_RATES else 'tokens/s',
                                                         'what': 'test', **({'lora_r': 768 if '.sft' in k else 64} if k.startswith('train.') else {})}
                                       for k, v in values.items()}}))
    return folder


def all_rates(value: float = 1000.0) -> dict:
    "Every rate the nemotron profile needs at its own shape, all `value`."
    return {k: value for k in rate_keys(load_profile(NEMOTRON), 'nemotron_h-30b-a3b').values()}


@pytest.fixture
def profiles():
    "Write a profile that extends nemotron.yaml with overrides, inside the project (its files resolve from the root)."
    d = ROOT / 'outputs' / '_test_profiles'; d.mkdir(parents=True, exist_ok=True)
    made = []
    def make(body: str) -> Path:
        p = d / f"estimate-{uuid.uuid4().hex[:8]}.yaml"
        p.write_text(f"extends: ../../configs/nemotron.yaml\n{body}"); made.append(p)
        return p
    yield make
    for p in made: p.unlink(missing_ok=True)


def estimate_json(tmp_path, profile, *extra) -> dict:
    out = tmp_path / f"est-{uuid.uuid4().hex[:6]}.json"
    code, _, err = cli('estimate', profile, '--json', out, *extra)
    assert code == 0, err
    return json.loads(out.read_text())


def tokens(j, stage, kind, part=None):
    return sum(l['tokens'] for l in j['lines'] if l['stage'] == stage and l['kind'] == kind and part in (None, l['part']))


def hours(j, stage, kind, col):
    return sum(l['hours'][col] for l in j['lines'] if l['stage'] == stage and l['kind'] == kind)


def test_every_known_rate_location_resolves_in_the_results_folder():
    rates = read_rates(RESULTS)   # raises if a results file no longer has a number where RATE_LOCATIONS says
    for key, (name, path, _, _, _) in RATE_LOCATIONS.items():
        if (RESULTS / name).exists():
            assert rates[key].value > 0 and Path(rates[key].file).name == name and rates[key].path == path


def test_a_missing_rate_stops_the_command_and_names_every_missing_key(tmp_path):
    rates = write_rates(tmp_path / 'r', {k: v for k, v in all_rates().items() if not k.startswith('train.')})
    code, out, err = cli('estimate', NEMOTRON, '--rates', rates)
    assert code == 2 and out == ''
    assert 'no measured rate for 3 kind(s) of work in ' + str(rates) in err
    assert 'train.dpo.nemotron_h-30b-a3b' in err and 'train.sft-compile-pad16.nemotron_h-30b-a3b' in err and 'train.dpo_reference.nemotron_h-30b-a3b' in err


def test_partial_marks_the_missing_cells_and_totals(tmp_path):
    rates = write_rates(tmp_path / 'r', {k: v for k, v in all_rates().items() if k != 'train.dpo.nemotron_h-30b-a3b'})
    code, out, _ = cli('estimate', NEMOTRON, '--rates', rates, '--partial')
    assert code == 0
    gen, train, total = [l.split() for l in out.splitlines() if l.startswith('total ')][:3]
    assert gen[:2] == ['total', 'generation'] and 'no rate' not in ' '.join(gen)
    assert train[:2] == ['total', 'training'] and train[-4:] == ['no', 'rate', 'no', 'rate']
    assert total[-4:] == ['no', 'rate', 'no', 'rate'] and 'Incomplete: no rate for train.dpo.nemotron_h-30b-a3b' in out


def test_a_complete_estimate_names_each_rate_file_and_sums_to_its_totals(tmp_path):
    rates = write_rates(tmp_path / 'r', all_rates())
    j = estimate_json(tmp_path, NEMOTRON, '--rates', rates)
    assert j['missing'] == [] and j['rate_shape'] == j['base_shape'] == 'nemotron_h-30b-a3b'
    assert {Path(r['file']).name for r in j['rates'].values()} == {'rates.json'}
    for col in ('hf', 'vllm', 'cpu'):
        assert j['totals'][col] == pytest.approx(sum(l['hours'][col] for l in j['lines'] if col in l['hours']))
    # every generated and trained token at 1,000 tokens/s
    gpu = sum(l['tokens'] for l in j['lines'] if l['kind'] == 'generate' or l['kind'].startswith('train.'))
    assert j['totals']['hf'] == pytest.approx(gpu / 1000 / 3600)


def test_doubling_a_pool_doubles_that_stages_sampling_and_nothing_else(tmp_path, profiles):
    rates = write_rates(tmp_path / 'r', all_rates())
    base = estimate_json(tmp_path, NEMOTRON, '--rates', rates)
    big = estimate_json(tmp_path, profiles("pools: {rounds: {r5: 4000, r6: 16000}}\n"), '--rates', rates)
    assert tokens(big, 'rounds', 'generate') == 2 * tokens(base, 'rounds', 'generate') == 2 * 8000 * 8 * 2 * 285.4
    assert hours(big, 'rounds', 'generate', 'vllm') == pytest.approx(2 * hours(base, 'rounds', 'generate', 'vllm'))
    for stage in ('repair', 'eval', 'eval_arms', 'soups'):
        assert tokens(big, stage, 'generate') == tokens(base, stage, 'generate')


def test_steps_k_and_bands_scale_what_they_should(tmp_path, profiles):
    rates = write_rates(tmp_path / 'r', all_rates())
    base = estimate_json(tmp_path, NEMOTRON, '--rates', rates)
    steps = estimate_json(tmp_path, profiles("repair: {optim: {steps: 438}}\n"), '--rates', rates)
    assert tokens(steps, 'repair', 'train.sft') == 2 * tokens(base, 'repair', 'train.sft') == 438 * 48 * 6.3e6 / (400 * 48)
    assert tokens(steps, 'soups', 'train.sft') == 2 * tokens(base, 'soups', 'train.sft')   # the seeds rerun stage 3's recipe
    k = estimate_json(tmp_path, profiles("repair: {sampling: {k: 16}}\n"), '--rates', rates)
    assert tokens(k, 'repair', 'generate', 'sampling r5') == 2 * tokens(base, 'repair', 'generate', 'sampling r5')
    dpo = estimate_json(tmp_path, profiles("dpo: {corpus: {bands: [{start: 0, stop: 30000}]}}\n"), '--rates', rates)
    assert tokens(dpo, 'dpo', 'train.dpo') == tokens(base, 'dpo', 'train.dpo') / 2


def test_halving_a_rate_doubles_its_hours_and_only_those(tmp_path):
    fast = estimate_json(tmp_path, NEMOTRON, '--rates', write_rates(tmp_path / 'a', all_rates()))
    slow = estimate_json(tmp_path, NEMOTRON, '--rates', write_rates(tmp_path / 'b', {**all_rates(), 'train.sft-compile-pad16.nemotron_h-30b-a3b': 500.0}))
    assert hours(slow, 'sft', 'train.sft', 'hf') == pytest.approx(2 * hours(fast, 'sft', 'train.sft', 'hf'))
    assert hours(slow, 'dpo', 'train.dpo', 'hf') == pytest.approx(hours(fast, 'dpo', 'train.dpo', 'hf'))
    assert hours(slow, 'eval', 'generate', 'vllm') == pytest.approx(hours(fast, 'eval', 'generate', 'vllm'))


def test_a_runs_generated_rows_and_evidence_set_the_lengths(tmp_path):
    run = tmp_path / 'run'
    shard = run / 'eval' / 'base' / 'generations' / 'id0' / 'h6' / 'plan-0'; shard.mkdir(parents=True)
    (shard / 'shard-00000.jsonl').write_text(''.join(json.dumps({'id': str(i), 'new_tokens': t}) + '\n' for i, t in enumerate([50, 150])))
    ev = run / 'sft' / 'epoch0' / 'adapter'; ev.mkdir(parents=True)
    (ev / 'training_evidence.json').write_text(json.dumps({'tag': 'sft-epoch0', 'steps': 10, 'effective_batch': 4,
                                                          'training_tokens': 24_000, 'seed': 1, 'dataset_sha256': 'x'}))
    rates = write_rates(tmp_path / 'r', all_rates())
    j = estimate_json(tmp_path, NEMOTRON, '--rates', rates, '--run', run)
    assert j['lengths']['h6']['tokens'] == 100.0 and str(run) in j['lengths']['h6']['source']
    assert j['lengths']['sft_example'] == {'tokens': 600.0, 'source': j['lengths']['sft_example']['source'], 'bound': False}
    h6 = [l for l in j['lines'] if l['stage'] == 'eval' and l['what'].startswith('h6 ')]
    assert [l["tokens"] for l in h6] == [1600 * 100.0] * 7          # evals.checkpoints: the lineage with its soup, and v749
    assert tokens(j, 'sft', 'train.sft') == 3 * 240_000 * 600.0
    # a length given by hand wins over the run's
    j2 = estimate_json(tmp_path, NEMOTRON, '--rates', rates, '--run', run, '--mean-tokens', 'h6=10')
    assert j2['lengths']['h6'] == {'tokens': 10.0, 'source': 'given on the command line', 'bound': False}


def test_a_new_results_file_is_picked_up_by_its_keys(tmp_path):
    folder = tmp_path / 'results'
    shutil.copytree(RESULTS, folder)
    q = 'qwen3_moe-30b-a3b'
    speed = json.loads((folder / 'train_speed.json').read_text())      # as if train_speed.py had not measured DPO at this shape:
    for k in (f'train.dpo.{q}', f'train.dpo_reference.{q}'): speed['rates'].pop(k)     # another file supplies them
    (folder / 'train_speed.json').write_text(json.dumps(speed))
    write_rates(folder, {f'train.dpo.{q}': 2000.0, f'train.dpo_reference.{q}': 4000.0}, name='train_fast.json')
    # the profile pads its micro-batches to a multiple of 16 for the Mamba kernels; Qwen3-MoE trains padding-free, unpadded
    sft = ('--rate', f'train.sft=train.sft-compile.{q}')
    j = estimate_json(tmp_path, NEMOTRON, '--rates', folder, '--shape', q, *sft)
    assert j['missing'] == [] and j['rate_shape'] == q and j['base_shape'] == 'nemotron_h-30b-a3b'
    assert Path(j['rates'][f'train.dpo.{q}']['file']).name == 'train_fast.json'
    assert Path(j['rates'][f'train.sft-compile.{q}']['file']).name == 'train_speed.json' \
        and j['rates'][f'train.sft-compile.{q}']['value'] == speed['rates'][f'train.sft-compile.{q}']['value']      # the file's own rate, not another's
    assert Path(j['rates'][f'generate.vllm.b256.{q}']['file']).name == 'generation_qwen3-moe-30b-a3b.json'
    assert j['rates'][f'generate.vllm.b256.{q}']['value'] == 7048.8      # batch invariance off, as the nemotron profile serves
    assert {Path(j['rates'][k]['file']).name for k in j['rates'] if k.startswith('cpu.')} == {'corpora.json'}
    # a key declared a second time, here one corpora.json already declares, is refused with both files named
    write_rates(folder, {'cpu.banding': 1.0}, name='again.json')
    code, _, err = cli('estimate', NEMOTRON, '--rates', folder, '--shape', q)
    assert code == 2 and "'cpu.banding' is given twice" in err and 'again.json' in err and 'corpora.json' in err
    (folder / 'again.json').unlink()
    # and so is a training rate train_speed.json already declares
    write_rates(folder, {f'train.sft.{q}': 4884.0}, name='train_fast2.json')
    code, _, err = cli('estimate', NEMOTRON, '--rates', folder, '--shape', q)
    assert code == 2 and f"'train.sft.{q}' is given twice" in err and 'train_fast2.json' in err and 'train_speed.json' in err
    (folder / 'train_fast2.json').unlink()
    assert hours(j, 'rounds', 'generate', 'vllm') == pytest.approx(8000 * 8 * 2 * 285.4 / 7048.8 / 3600)
    code, out, _ = cli('estimate', NEMOTRON, '--rates', folder, '--shape', q, *sft)
    assert code == 0 and 'a stand-in, not the base' in out and 'train_fast.json: rates.train.dpo.qwen3_moe-30b-a3b' in out
    assert 'train_speed.json: rates.train.sft-compile.qwen3_moe-30b-a3b' in out   # the profile's kernels: compile, by --rate


def test_a_rate_in_the_wrong_unit_is_refused(tmp_path):
    rates = all_rates()
    folder = write_rates(tmp_path / 'r', rates)
    data = json.loads((folder / 'rates.json').read_text()); data['rates']['cpu.banding']['unit'] = 'tokens/s'
    (folder / 'rates.json').write_text(json.dumps(data))
    code, _, err = cli('estimate', NEMOTRON, '--rates', folder)
    assert code == 2 and "rate 'cpu.banding'" in err and 'needs one of rows per CPU second' in err
    # a unit that merely contains the right word is not per second: 'tokens/min' would price at sixty times the rate
    data['rates']['cpu.banding']['unit'] = 'rows per CPU second'; data['rates']['cpu.mix_tokenise']['unit'] = 'tokens/min'
    (folder / 'rates.json').write_text(json.dumps(data))
    code, _, err = cli('estimate', NEMOTRON, '--rates', folder)
    assert code == 2 and "rate 'cpu.mix_tokenise'" in err and "is in 'tokens/min'" in err


def bounded(cell: str) -> bool: return cell.startswith('<=')


def test_a_rate_measured_at_a_larger_rank_bounds_the_hours_even_at_measured_lengths(tmp_path):
    "SFT at r=64 priced at an r=768 rate is an upper bound whatever the lengths; an arm above the rate's rank bounds nothing."
    folder = write_rates(tmp_path / 'r', all_rates())          # SFT rates at r=768, DPO at r=64
    j = estimate_json(tmp_path, NEMOTRON, '--rates', folder, '--mean-tokens', 'sft_example=500', '--mean-tokens', 'dpo_pair=1000')
    sft = [l for l in j['lines'] if l['stage'] == 'sft' and l['kind'] == 'train.sft']
    arms = {l['part']: l for l in j['lines'] if l['kind'] == 'train.dpo'}
    assert sft and all(l['over'] and not l['bound'] and not l['under'] for l in sft)    # tokens exact, hours an upper bound
    assert arms['r128_s4']['under'] and not arms['r128_s4']['over'] and not arms['b005_lr5e-7']['over']
    code, out, _ = cli('estimate', NEMOTRON, '--rates', folder, '--mean-tokens', 'sft_example=500', '--mean-tokens', 'dpo_pair=1000')
    gpu_table = out.split('Priced at a rate measured at another LoRA rank')[0]
    rows = [r.split() for r in gpu_table.splitlines() if r.startswith('sft ') and 'epoch' in r]
    # the tokens are the given lengths' (no bound); the hours of every epoch carry '<=' on both backends' columns
    assert code == 0 and len(rows) == 3 and all(not bounded(r[3]) and bounded(r[4]) and bounded(r[5]) for r in rows), rows


def test_cpu_work_that_no_bound_holds_for_leaves_the_cpu_total_unbounded(tmp_path):
    "A cold load's rows are at least those counted, and tokenising reads rows uncut: neither is an upper bound, so the total is not."
    j = estimate_json(tmp_path, NEMOTRON, '--rates', write_rates(tmp_path / 'r', all_rates()))
    cpu = [l for l in j['lines'] if l['kind'].startswith('cpu.')]
    loads = [l for l in cpu if l['kind'] == 'cpu.corpus_load_cold']
    uncut = [l for l in cpu if l['kind'] in ('cpu.decontam_tokenise', 'cpu.decontam_scan') and l['length'] in ('sft_example', 'dpo_pair')]
    assert loads and uncut and not any(l['bound'] for l in loads + uncut) and all(l['unbounded'] for l in loads + uncut)
    code, out, _ = cli('estimate', NEMOTRON, '--rates', write_rates(tmp_path / 'r', all_rates()))
    cpu_table = out.split('CPU work, one core')[1].split('Rates (from')[0]
    total = next(r for r in cpu_table.splitlines() if r.startswith('total'))
    assert code == 0 and not bounded(total.split()[1]), total
    assert 'no bound: sft load (cpu.corpus_load_cold), dpo load (cpu.corpus_load_cold): a lower bound' in cpu_table, cpu_table
    assert 'rows are tokenised whole, also those longer than seq_len' in cpu_table


def test_a_rate_chosen_by_hand_is_printed_as_a_stand_in(tmp_path):
    own = {k: v for k, v in all_rates().items() if not k.startswith('generate.')}
    q = 'qwen3_moe-30b-a3b'
    folder = write_rates(tmp_path / 'r', {**own, f'generate.hf.b64.{q}': 100.0, f'generate.vllm.b256.{q}': 2000.0})
    picks = ('--rate', f'generate.hf=generate.hf.b64.{q}', '--rate', f'generate.vllm=generate.vllm.b256.{q}')
    code, out, _ = cli('estimate', NEMOTRON, '--rates', folder, *picks)
    assert code == 0
    head = out.splitlines()[:5]
    assert head[1] == 'GPU work at the rates measured for shape nemotron_h-30b-a3b.'
    assert head[2] == (f"Stand-in chosen by --rate: generate.hf priced at generate.hf.b64.{q}, not at "
                       "generate.hf.b64.nemotron_h-30b-a3b (the rate this work asks for).")
    assert head[3].startswith(f"Stand-in chosen by --rate: generate.vllm priced at generate.vllm.b256.{q}")
    assert f"generate.hf.b64.{q} (stand-in, --rate): 100.0 tokens/s" in out
    assert 'train.sft-compile-pad16.nemotron_h-30b-a3b: 1,000.0 tokens/s' in out and 'train.sft-compile-pad16.nemotron_h-30b-a3b (stand-in' not in out
    j = estimate_json(tmp_path, NEMOTRON, '--rates', folder, *picks)
    assert j['stand_ins'] == {'generate.hf': 'generate.hf.b64.nemotron_h-30b-a3b', 'generate.vllm': 'generate.vllm.b256.nemotron_h-30b-a3b'}
    assert estimate_json(tmp_path, NEMOTRON, '--rates', write_rates(tmp_path / 'all', all_rates()))['stand_ins'] == {}


def test_measure_replaces_the_bounds_with_the_local_corpora_lengths(tmp_path):
    d = ROOT / 'outputs' / '_test_profiles'; d.mkdir(parents=True, exist_ok=True)
    tiny, gone = d / f"measure-{uuid.uuid4().hex[:8]}.yaml", d / f"measure-{uuid.uuid4().hex[:8]}.yaml"
    # math's count without a run; decoding at batch 64, the batch the HF rate was measured at (the estimate prices no other)
    tiny.write_text("extends: ../../configs/tiny.yaml\nserving: {batch_size: 64}\nevals:\n  math: {n: 10}\n")
    gone.write_text(f"extends: {tiny.name}\ndpo:\n  corpus: {{name: ultrafeedback, source: data/corpora/gone.jsonl, bands: [{{start: 0, stop: 256}}]}}\n")
    try:
        flags = ('--shape', 'nemotron_h-30b-a3b', '--partial')
        bound = estimate_json(tmp_path, tiny, *flags)
        j = estimate_json(tmp_path, tiny, *flags, '--measure', '20')
        for unit, limit in (('sft_example', 256), ('dpo_pair', 512)):
            assert bound['lengths'][unit] == {'tokens': float(limit), 'source': bound['lengths'][unit]['source'], 'bound': True}
            L = j['lengths'][unit]
            assert L['bound'] is False and L['source'].startswith('measured by --measure: ') and 0 < L['tokens'] < limit
        assert '40 rows (tulu3 20' in j['lengths']['sft_example']['source'] and '20 rows (ultrafeedback 20' in j['lengths']['dpo_pair']['source']
        assert tokens(j, 'sft', 'train.sft') == 2 * 600 * j['lengths']['sft_example']['tokens']
        assert tokens(bound, 'sft', 'train.sft') == 2 * 600 * 256
        assert j['totals']['hf'] < bound['totals']['hf']
        code, out, _ = cli('estimate', tiny, *flags, '--measure', '5')
        assert code == 0 and 'measured by --measure: dpo_pair, sft_example; still upper bounds: none' in out
        code, out, err = cli('estimate', gone, *flags, '--measure', '5')
        line, = err.strip().splitlines()          # the profile's own check names the corpus's file (measure_lengths too, given such a profile)
        assert code != 0 and 'dpo.corpus.source' in line and 'data/corpora/gone.jsonl' in line
    finally:
        for p in (tiny, gone): p.unlink(missing_ok=True)


def test_a_run_whose_training_evidence_is_broken_is_refused_naming_the_file(tmp_path):
    from rsi_repro.layout import EVIDENCE
    run = tmp_path / 'run'; (run / 'sft').mkdir(parents=True)
    rates = write_rates(tmp_path / 'r', all_rates())
    for text in ('{"steps": 3,', '{"steps": 3, "training_tokens": 900, "tag": "sft"}', '["not", "evidence"]', b'{"tag": "\xff"}'):
        if isinstance(text, bytes): (run / 'sft' / EVIDENCE).write_bytes(text); text = None
        if text is not None: (run / 'sft' / EVIDENCE).write_text(text)
        code, _, err = cli('estimate', NEMOTRON, '--rates', rates, '--run', run)
        assert code == 2 and f"{run / 'sft' / EVIDENCE}: not training evidence the estimate can read" in err, err


def test_a_mean_length_capped_at_max_new_tokens_is_an_upper_bound(tmp_path):
    "A set whose mean is above max_new_tokens is priced at the cap: every completion is at most that, so its line carries '<='."
    j = estimate_json(tmp_path, NEMOTRON, '--rates', write_rates(tmp_path / 'r', all_rates()), '--mean-tokens', 'h6=100000')
    h6 = [l for l in j['lines'] if l['kind'] == 'generate' and l['length'] == 'h6']
    probe2 = [l for l in j['lines'] if l['kind'] == 'generate' and l['length'] == 'probe2']
    assert h6 and all(l['bound'] and l['tokens'] == l['count'] * l['cap'] for l in h6)
    assert probe2 and not any(l['bound'] for l in probe2)        # the card's stand-in, under the cap: a mean, not a bound
