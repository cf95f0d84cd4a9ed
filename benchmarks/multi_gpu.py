"""The SFT entry point under one process, DDP and FSDP2 at the same effective batch: loss curves and tokens/s.

    python benchmarks/multi_gpu.py --profile configs/nemotron.yaml --section sft --base BASE --mix MIX.npz --gpus 2
    python benchmarks/multi_gpu.py --profile configs/tiny.yaml --section sft --mix MIX.npz --cpu     # 2 gloo processes (torchrun)

Each variant runs `rsi-repro train-sft` (through `accelerate launch` for the distributed ones) with
micro-batch x grad-accum x processes equal to the single-process run's effective batch, so the losses are comparable
step by step. Prints a table and writes the JSON to --out.
"""
import argparse, json, os, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(cmd, env=None):
    t0 = time.time()
    p = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if p.returncode != 0:
        return {'ok': False, 'seconds': round(time.time() - t0, 1), 'error': (p.stdout + p.stderr)[-3000:]}
    return {'ok': True, 'seconds': round(time.time() - t0, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--profile', required=True); ap.add_argument('--section', default='sft')
    ap.add_argument('--base'); ap.add_argument('--mix', required=True)
    ap.add_argument('--steps', type=int, default=30); ap.add_argument('--micro-batch', type=int, default=4)
    ap.add_argument('--grad-accum', type=int, default=4, help='of the single-process run')
    ap.add_argument('--gpus', type=int, default=1); ap.add_argument('--cpu', action='store_true')
    ap.add_argument('--work', default='/tmp/rsi_multi'); ap.add_argument('--out', default=str(ROOT / 'benchmarks/results/multi_gpu.json'))
    a = ap.parse_args()
    work = Path(a.work); work.mkdir(parents=True, exist_ok=True)
    common = ['-m', 'rsi_repro.cli', 'train-sft', a.profile, '--section', a.section, '--mix', a.mix, '--steps', str(a.steps),
              '--micro-batch', str(a.micro_batch), '--report-to', 'none'] + (['--base', a.base] if a.base else []) + ([] if a.cpu else ['--bf16'])
    n = 2 if a.cpu else a.gpus
    if a.grad_accum % n: sys.exit(f"--grad-accum {a.grad_accum} is not divisible by {n} processes")
    acc = lambda cfg: [sys.executable, '-m', 'accelerate.commands.launch', '--config_file', str(ROOT / 'configs/accelerate' / cfg),
                       '--num_processes', str(n)]
    variants = {'single': [sys.executable] + common + ['--grad-accum', str(a.grad_accum)]}
    if a.cpu:   # torchrun starts the processes; the Trainer picks gloo on CPU
        variants['ddp-gloo-2'] = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node', str(n)] + common + \
                                 ['--grad-accum', str(a.grad_accum // n)]
    else:
        variants[f'ddp-{n}'] = acc('ddp.yaml') + common + ['--grad-accum', str(a.grad_accum // n)]
        variants[f'fsdp2-{n}'] = acc('fsdp2.yaml') + common + ['--grad-accum', str(a.grad_accum // n)]
    results = {}
    for name, cmd in variants.items():
        out = work / name
        r = run(cmd + ['--out', str(out), '--tag', name], env={'TQDM_DISABLE': '1', 'TRANSFORMERS_VERBOSITY': 'error'})
        if r['ok']:
            ev = json.loads((out / 'training_evidence.json').read_text())
            log = [x for x in json.loads((out / 'log_history.json').read_text()) if 'loss' in x]
            r.update(world_size=ev['world_size'], effective_batch=ev['effective_batch'], training_tokens=ev['training_tokens'],
                     train_seconds=ev['wall_seconds'], tokens_per_s=round(ev['training_tokens'] / ev['wall_seconds'], 1),
                     losses=[round(x['loss'], 4) for x in log])
            cfg_ok = (out / 'adapter_config.json').exists()
            if cfg_ok:   # the adapter saved by rank 0 loads as the seed card's snippet shows
                from transformers import AutoModelForCausalLM
                from peft import PeftModel
                base = a.base or str(ROOT / 'data/tiny_base')
                PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype='auto'), str(out))
            r['adapter_loads'] = cfg_ok
        results[name] = r
    ref = results['single'].get('losses')
    for name, r in results.items():
        if r.get('losses') and ref:
            d = [abs(x - y) for x, y in zip(r['losses'], ref)]
            r['max_abs_loss_diff_vs_single'] = round(max(d), 4); r['mean_abs_loss_diff_vs_single'] = round(sum(d) / len(d), 4)
    print(f"{'variant':<12} {'ok':<5} {'world':>5} {'eff.batch':>9} {'tokens/s':>9} {'loss first':>10} {'loss last':>9} {'max |dloss|':>11}")
    for name, r in results.items():
        L = r.get('losses') or [float('nan')]
        print(f"{name:<12} {str(r['ok']):<5} {r.get('world_size', '-'):>5} {r.get('effective_batch', '-'):>9} {r.get('tokens_per_s', '-'):>9} "
              f"{L[0]:>10} {L[-1]:>9} {r.get('max_abs_loss_diff_vs_single', '-'):>11}")
        if not r['ok']: print(r['error'][-1500:])
    Path(a.out).parent.mkdir(parents=True, exist_ok=True); Path(a.out).write_text(json.dumps(results, indent=1))


if __name__ == '__main__':
    main()
