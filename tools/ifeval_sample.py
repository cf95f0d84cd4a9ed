"""A real model's IFEval answers from a finished run, as IFEval's input rows plus `response` (what `rsi-repro
ifeval-check` and lm-evaluation-harness's IFEval scorer both read): the sample tests/test_real_model.py scores both ways.

    python tools/ifeval_sample.py outputs/smollm2 tests/data/smollm2_ifeval_responses.jsonl            # the base, harness decode
    python tools/ifeval_sample.py outputs/smollm2 OUT.jsonl --checkpoint v6141 --set ifeval
    python tools/ifeval_sample.py outputs/smollm2 OUT.jsonl --eval-dir outputs/smollm2/eval_partial --profile configs/smollm2.yaml

Beside the JSONL it writes OUT.json: the run, the checkpoint and its identity, the decode, the prompt file's sha256 and
how many rows, so that the sample says where it came from.
"""
from __future__ import annotations
import argparse, json, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def sample(run_dir: Path, checkpoint: str = 'base', generation_set: str = 'ifeval_harness', eval_dir: Path | None = None,
           profile_path: str | None = None) -> tuple[list[dict], dict]:
    """(rows, provenance) of one checkpoint's answers to one IFEval generation set: of a finished run's eval stage, or of an
    evaluation folder made by hand (`eval_dir`, with the profile it was made with)."""
    from rsi_repro.config import load_profile
    from rsi_repro.instruments.ifeval_official import load_ifeval_prompts
    from rsi_repro.io import read_jsonl, sha256_file
    from rsi_repro.layout import generations_dir, result_paths
    from rsi_repro.pipeline import read_manifest
    eval_dir = eval_dir or run_dir / 'eval'
    manifest = read_manifest(eval_dir) or ({'params': {'profile_path': profile_path}} if profile_path else None)
    if manifest is None: raise SystemExit(f"{eval_dir}: no manifest (the eval stage has not finished): name the profile with --profile")
    meta = json.loads(result_paths(eval_dir, checkpoint, generation_set)['meta'].read_text())
    shards = sorted(generations_dir(eval_dir / checkpoint, meta['identity'], generation_set).glob('plan-*/shard-*.jsonl'))
    if not shards: raise SystemExit(f"{eval_dir / checkpoint}: no {generation_set} generations for identity {meta['identity']}")
    plans = {s.parent for s in shards}
    if len(plans) != 1: raise SystemExit(f"{eval_dir / checkpoint}: {len(plans)} plans of {generation_set}; expected one")
    plan = json.loads((next(iter(plans)) / 'plan.json').read_text())
    profile = load_profile(ROOT / manifest['params']['profile_path'])
    block = profile.evals.block(generation_set)
    source = getattr(block, 'prompts', None) or profile.evals.ifeval.prompts
    prompts = load_ifeval_prompts(source, profile.root).set_index('id')
    rows = []
    for r in (r for s in shards for r in read_jsonl(s)):
        p = prompts.loc[r['id']]
        rows.append({'key': int(r['id']), 'prompt': p['prompt'], 'instruction_id_list': list(p['instruction_id_list']),
                     'kwargs': list(p['kwargs']), 'response': r['response'], 'finish_reason': r['finish_reason']})
    info = {'run': run_dir.name, 'evaluation': eval_dir.name, 'profile': manifest['params']['profile_path'], 'checkpoint': checkpoint, 'identity': meta['identity'],
            'generation_set': generation_set, 'decode': plan['decode'], 'system_prompt': plan['system_prompt'],
            'template': plan.get('template', 'study'), 'backend': plan['backend'], 'prompts': str(source),
            'prompts_sha256': sha256_file(profile.resolve(source)), 'rows': len(rows)}
    return rows, info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('run_dir'); ap.add_argument('out')
    ap.add_argument('--checkpoint', default='base'); ap.add_argument('--set', default='ifeval_harness', choices=['ifeval', 'ifeval_harness'])
    ap.add_argument('--eval-dir', help="an evaluation folder made by hand (default: RUN_DIR/eval)"); ap.add_argument('--profile')
    a = ap.parse_args(argv)
    rows, info = sample(Path(a.run_dir), a.checkpoint, a.set, Path(a.eval_dir) if a.eval_dir else None, a.profile)
    out = Path(a.out); out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(''.join(json.dumps(r, ensure_ascii=False) + '\n' for r in rows))
    out.with_suffix('.json').write_text(json.dumps(info, indent=1) + '\n')
    print(f"{out}: {len(rows)} rows of {info['checkpoint']} ({info['generation_set']}) from {info['run']}")
    return 0


if __name__ == '__main__':
    sys.exit(main())
