"""The markdown tables of benchmarks/RESULTS.md's multi-GPU section, printed from a `multi_gpu.py` results JSON.

    python benchmarks/device/multi_gpu_tables.py benchmarks/results/multi_gpu_2.json
"""
import json, sys

NAMES = {'single': 'single GPU', 'ddp-2': 'DDP, 2 GPUs', 'fsdp2-2': 'FSDP2, 2 GPUs', 'ddp-2-repeat': 'DDP, 2 GPUs (repeat)'}


def f(x, nd=1):
    return '–' if x is None else f"{x:,.{nd}f}"


def main(path):
    res = json.load(open(path))
    for stage in ('sft', 'dpo'):
        V = res.get(stage, {})
        if not V: continue
        rng = next((r['full_steps_timed'] for r in V.values() if r.get('full_steps_timed')), None)
        print(f"\n**{stage.upper()}** (full steps timed: {rng[0]}–{rng[1]})\n")
        print('| variant | machine | micro-batch × grad-accum × GPUs | tokens (trainer) | train s | tokens/s, whole run | tokens/s, full steps '
              '| speed-up (full steps) | scaling efficiency | peak allocated GiB per GPU (reserved) |')
        print('|---|---:|---|---:|---:|---:|---:|---:|---:|---|')
        for n, r in V.items():
            if not r.get('ok'): continue
            peaks = ', '.join(f"{p['max_allocated_gib']:.2f} ({p['max_reserved_gib']:.1f})" for p in r['peak_memory_gib'])
            print(f"| {NAMES.get(n, n)} | {r['run']} | {r['micro_batch']} × {r['grad_accum']} × {r['world_size']} | {r['trainer_tokens']:,} | "
                  f"{r['train_seconds']:.1f} | {f(r['trainer_tokens_per_s'])} | {f(r.get('full_step_tokens_per_s'))} | "
                  f"{f(r.get('full_step_speedup_vs_single'), 3)} | {f(r.get('full_step_scaling_efficiency'), 3)} | {peaks} |")
        names = [n for n, r in V.items() if r.get('ok')]
        print(f"\n| step | " + ' | '.join(f"loss, {NAMES.get(n, n)}" for n in names) + ' | tokens | ' +
              ' | '.join(f"s, {NAMES.get(n, n)}" for n in names) + ' |')
        print('|---:|' + '---:|' * (2 * len(names) + 1))
        for i in range(max(len(V[n]['losses']) for n in names)):
            sec = lambda n: f"{V[n]['step_seconds'][i - 1]:.2f}" if i >= 1 and i - 1 < len(V[n].get('step_seconds', [])) else '–'
            print(f"| {i + 1} | " + ' | '.join(f"{V[n]['losses'][i]:.4f}" for n in names) + f" | {V['single']['step_tokens'][i]:,} | "
                  + ' | '.join(sec(n) for n in names) + ' |')
        print('\n| variant | max abs. loss difference vs single | mean | vs the first DDP run (same settings) | '
              'grad-norm step 1 | adapter loads (card snippet) | LoRA weights = saved file | max logit change by the adapter |')
        print('|---|---:|---:|---|---:|---|---|---:|')
        for n in names:
            r = V[n]; ad = r['adapter']
            rep = (f"{r['max_abs_loss_diff_vs_first_run']:.4f} / {r['mean_abs_loss_diff_vs_first_run']:.4f}"
                   if 'max_abs_loss_diff_vs_first_run' in r else '–')
            print(f"| {NAMES.get(n, n)} | {f(r.get('max_abs_loss_diff_vs_single'), 4)} | {f(r.get('mean_abs_loss_diff_vs_single'), 4)} | {rep} | "
                  f"{r['grad_norms'][0]:.4f} | {'yes' if ad.get('loads') else 'NO'} | {'yes' if ad.get('weights_equal_file') else 'no'} | "
                  f"{f(ad.get('max_abs_logit_change_by_adapter'), 3)} |")
        if stage == 'dpo':
            print('\n| step | ' + ' | '.join(f"reward margin, {NAMES.get(n, n)}" for n in names) + ' |')
            print('|---:|' + '---:|' * len(names))
            for i in range(len(V['single']['reward_margins'])):
                print(f"| {i + 1} | " + ' | '.join(f"{V[n]['reward_margins'][i]:.4f}" for n in names) + ' |')
        imb = [(n, r['padded_token_imbalance']) for n, r in V.items() if r.get('padded_token_imbalance')]
        if imb:
            x = imb[0][1]
            print(f"\nPadded-token imbalance per step (busier rank / mean of ranks), {stage}: min {min(x):.3f}, mean {sum(x) / len(x):.3f}, "
                  f"max {max(x):.3f} (rebuilt per-step tokens equal the trainer's: "
                  f"{all(V[n].get('rebuilt_step_tokens_match') for n in names)})")


if __name__ == '__main__':
    main(sys.argv[1])
