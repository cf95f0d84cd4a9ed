"""The nemotron profile's price, summed the way the README's prose quotes it, from `rsi-repro estimate --json`:
benchmarks/results/estimate_nemotron.json, the file the README's figures about the estimate are written from
(`tools/doc_figures.py`). `tests/test_doc_figures.py` checks that the committed file is what this gives today, so the
prose cannot drift from the rates or the code.

    python tools/estimate_summary.py          # write the file
    python tools/estimate_summary.py --check  # exit 1 when the committed file is not what the estimate gives today
"""
from __future__ import annotations
import json, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILE = 'configs/nemotron.yaml'
OUT = ROOT / 'benchmarks' / 'results' / 'estimate_nemotron.json'


def estimate() -> dict:
    "The estimate's JSON for the profile, as the command writes it."
    with tempfile.TemporaryDirectory() as d:
        done = subprocess.run([sys.executable, '-m', 'rsi_repro.cli', 'estimate', PROFILE, '--json', f'{d}/e.json'], cwd=ROOT,
                              capture_output=True, text=True)
        if done.returncode: sys.exit(f"rsi-repro estimate {PROFILE} failed ({done.returncode}):\n{done.stderr.strip()}")
        return json.loads(Path(d, 'e.json').read_text())


def _sum(lines, field='tokens', engine=None) -> float:
    return sum((l['hours'][engine] if engine else l[field]) or 0 for l in lines)


def summary(e: dict) -> dict:
    "Totals, rates and the sums the prose quotes, each named for what it is."
    gen = [l for l in e['lines'] if l['kind'] == 'generate']
    rounds_gen = [l for l in gen if l['stage'] == 'rounds']
    train = [l for l in e['lines'] if l['kind'].startswith('train.')]
    stage1 = [l for l in train if l['stage'] == 'sft']
    sized = [l for l in train if l['kind'] == 'train.sft' and l['stage'] in ('repair', 'rounds', 'soups')]
    ref = [l for l in train if l['kind'] == 'train.dpo_reference']
    arms = [l for l in train if l['kind'] == 'train.dpo']
    rates = {kind: e['rates'][key]['value'] for kind, key in e['keys'].items()}
    return {
        'what': f"rsi-repro estimate {PROFILE} --json, summed as the README quotes it (tools/estimate_summary.py)",
        'totals_gpu_hours': {'hf': e['totals']['hf'], 'vllm': e['totals']['vllm']}, 'cpu_hours': e['totals']['cpu'],
        'rate_values': rates,   # not 'rates': the estimate reads every results file's 'rates' as measurements
        'generation': {'new_tokens': _sum(gen), 'hf_hours': _sum(gen, engine='hf'), 'vllm_hours': _sum(gen, engine='vllm')},
        'round_sampling': {'new_tokens': _sum(rounds_gen), 'hf_hours': _sum(rounds_gen, engine='hf'),
                           'vllm_hours': _sum(rounds_gen, engine='vllm')},
        'stand_in_answer_tokens': e['lengths']['h6']['tokens'],
        'training_hours': _sum(train, engine='vllm'),
        'stage1_hours': _sum(stage1, engine='vllm'),
        'sized_stages': {'tokens': _sum(sized), 'hours': _sum(sized, engine='vllm')},
        'dpo_reference': {'pairs': ref[0]['count'], 'hours': ref[0]['hours']['vllm']},
        'dpo_arm': {'arms': len(arms), 'pair_tokens': arms[0]['tokens'], 'hours': arms[0]['hours']['vllm']},
    }


if __name__ == '__main__':
    made = json.dumps(summary(estimate()), indent=1) + '\n'
    if '--check' in sys.argv:
        if not OUT.exists() or OUT.read_text() != made:
            sys.exit(f"{OUT.relative_to(ROOT)} is not what the estimate gives today: run python tools/estimate_summary.py")
        print(f"{OUT.relative_to(ROOT)} is what the estimate gives")
    else:
        OUT.write_text(made); print(f"wrote {OUT.relative_to(ROOT)}")
