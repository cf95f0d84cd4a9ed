"""What each rank runs under `benchmarks/multi_gpu.py`: the project's training entry points, then this rank's peak GPU memory.

    python benchmarks/device/rank_entry.py sft PROFILE --out DIR ...     # exactly `rsi-repro train-sft PROFILE --out DIR ...`
    python benchmarks/device/rank_entry.py dpo PROFILE --pairs PAIRS.jsonl --out DIR [--base B --steps N --micro-batch M
                                            --grad-accum G --lr LR --beta B --bf16]   # `rsi_repro.train.train_dpo` with the
                                                                                      # profile's dpo section and these overrides
Afterwards each rank writes DIR/peak_rank<RANK>.json: torch.cuda.max_memory_allocated / max_memory_reserved of its GPU
(nothing on CPU ranks), and with RSI_STEP_TIMES=1 DIR/step_times_rank<RANK>.json: the clock at the end of each optimiser step. Started by `accelerate launch` / `torchrun` exactly as `-m rsi_repro.cli` would be.
"""
import argparse, json, os, sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def out_dir(argv):
    return Path(argv[argv.index('--out') + 1])


def dpo(argv):
    from rsi_repro.config import ProfileError, load_profile
    from rsi_repro.eval_plan import model_ref
    from rsi_repro.train import train_dpo
    ap = argparse.ArgumentParser(prog='rank_entry.py dpo')
    ap.add_argument('profile'); ap.add_argument('--pairs', required=True); ap.add_argument('--out', required=True)
    ap.add_argument('--tag', default='train-dpo'); ap.add_argument('--base'); ap.add_argument('--steps', type=int)
    ap.add_argument('--micro-batch', type=int); ap.add_argument('--grad-accum', type=int); ap.add_argument('--lr', type=float)
    ap.add_argument('--beta', type=float, help="default: the profile's first grid cell"); ap.add_argument('--bf16', action='store_true')
    ap.add_argument('--report-to', default='none')
    a = ap.parse_args(argv)
    profile = load_profile(a.profile, check_files=False)
    if profile.dpo is None: raise ProfileError(profile.path, 'dpo', 'this profile has no such section')
    over = {k: v for k, v in (('micro_batch', a.micro_batch), ('grad_accum', a.grad_accum)) if v is not None}
    optim = replace(profile.dpo.optim, **over, **({'bf16': True} if a.bf16 else {}))
    ref = model_ref(profile)
    if a.base: ref = replace(ref, base=str(Path(a.base).resolve()))
    beta = a.beta if a.beta is not None else profile.dpo.grid[0].beta
    ev = train_dpo(ref, profile.base.architecture, a.pairs, profile.dpo.lora, optim, a.out, tag=a.tag, beta=beta,
                   nll_weight=profile.dpo.nll_weight, lr=a.lr, steps=a.steps, report_to=[] if a.report_to == 'none' else [a.report_to])
    if ev: print(f"rank_entry: {a.out}: {ev['steps']} DPO steps, {ev['training_tokens']} tokens, {ev['wall_seconds']} s, world size {ev['world_size']}")


STEP_TIMES = []


def time_steps():
    "Record the wall clock at the end of every optimiser step (instrumentation only: the trainer and its loss are unchanged)."
    import time
    import transformers.trainer as tt
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def on_step_end(self, args, state, control, **kw): STEP_TIMES.append(time.perf_counter())
    tt.DEFAULT_CALLBACKS.append(StepTimer)


def main():
    mode, argv = sys.argv[1], sys.argv[2:]
    if os.environ.get('RSI_STEP_TIMES') == '1': time_steps()
    if mode == 'sft':
        from rsi_repro.cli import main as cli
        rc = cli(['train-sft'] + argv)
        if rc: sys.exit(rc)
    elif mode == 'dpo': dpo(argv)
    else: sys.exit(f"rank_entry.py: unknown mode {mode!r} (sft or dpo)")
    import torch
    rank = int(os.environ.get('RANK', 0))
    if STEP_TIMES:
        out_dir(argv).mkdir(parents=True, exist_ok=True)
        (out_dir(argv) / f'step_times_rank{rank}.json').write_text(json.dumps(STEP_TIMES))
    if torch.cuda.is_available():
        dev = torch.cuda.current_device()
        peak = {'rank': rank, 'device': dev, 'max_allocated_gib': round(torch.cuda.max_memory_allocated(dev) / 2**30, 3),
                'max_reserved_gib': round(torch.cuda.max_memory_reserved(dev) / 2**30, 3)}
        out_dir(argv).mkdir(parents=True, exist_ok=True)
        (out_dir(argv) / f'peak_rank{rank}.json').write_text(json.dumps(peak))


if __name__ == '__main__':
    main()
