"""What a resumable training checkpoint costs: seconds per save and bytes on disk, for the card's stage-3/4 adapter (LoRA
r=768, alpha 1536) on a 30B layout, through the library's own `train_sft` and its checkpoints (`optim.checkpoint_steps`,
the marker written last, the last `checkpoints_kept` kept), and what that adds at each of the nemotron profile's intervals.

    python benchmarks/checkpoint_cost.py --shape nemotron-h-31b --steps 9 --every 2 --out benchmarks/results/checkpoint_cost.json

A save's cost is set by what it writes (the adapter, AdamW's two moments for every LoRA parameter, the scheduler and RNG
states) and by the disk, not by the training step's speed: the run trains one example of ~330 tokens a step (micro-batch
1, no fitting), so a 30B layout fits one 80 GB card even without the Mamba kernels, and the saves are those of a stage at
the card's rank. The model is the shape's published config with random bf16 weights built on the GPU (benchmarks/shapes.py).
A save is timed from the end of its optimiser step (device synchronised) to the start of the next step: transformers'
checkpoint, the library's marker and the removal of the oldest checkpoint beyond `checkpoints_kept`. The step seconds the
overhead is read against are the shape's latest library rate in benchmarks/results/train_speed.json (its card named).
"""
import argparse, json, math, statistics, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / 'benchmarks'))
from shapes import SHAPE_WORDS, build_config  # noqa: E402
from train_speed import device, patched_loading, sync, synthetic_rows, write_mix  # noqa: E402


def folder_bytes(p: Path) -> int: return sum(f.stat().st_size for f in p.rglob('*') if f.is_file())


def save_timer():
    "A trainer callback: per optimiser step, the seconds from its end to the next step's start, and whether it saved."
    from transformers import TrainerCallback
    class SaveTimer(TrainerCallback):
        def __init__(self): self.gaps, self.ended, self.saved = [], None, False
        def on_step_end(self, args, state, control, **kw): sync(); self.ended, self.saved = time.perf_counter(), False
        def on_save(self, args, state, control, **kw): self.saved = True
        def on_step_begin(self, args, state, control, **kw):
            if self.ended is not None: self.gaps.append((state.global_step, self.saved, time.perf_counter() - self.ended))
        def on_train_end(self, args, state, control, **kw):
            if self.ended is not None: self.gaps.append((state.global_step, self.saved, time.perf_counter() - self.ended))
    return SaveTimer()


def library_step_seconds(shape: str, effective_batch: int = 48) -> dict | None:
    "The shape's latest library training rate (train_speed.json `rates`), as seconds per optimiser step of the card's batch."
    doc = json.loads((ROOT / 'benchmarks/results/train_speed.json').read_text())
    rows = [r for r in doc['summary'] if r['shape'] == shape and r['variant'].startswith('ours') and r.get('tokens_per_s')
            and not r['variant'].startswith('ours-dpo') and 'mean_row_tokens' in r]
    if not rows: return None
    r = rows[-1]
    return {'variant': r['variant'], 'device': r['device'], 'date': r['date'], 'tokens_per_s': r['tokens_per_s'],
            'step_seconds': round(effective_batch * r['mean_row_tokens'] / r['tokens_per_s'], 3)}


def profile_intervals() -> dict:
    "Each nemotron training section's checkpoint interval and LoRA rank."
    from rsi_repro.config import load_profile
    p = load_profile(ROOT / 'configs/nemotron.yaml', check_files=False)
    return {name: {'every_steps': s.optim.checkpoint_steps, 'every_minutes': s.optim.checkpoint_minutes, 'lora_r': s.lora.r}
            for name in ('sft', 'dpo', 'repair', 'rounds') if (s := getattr(p, name, None)) is not None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--shape', default='nemotron-h-31b'); ap.add_argument('--steps', type=int, default=9)
    ap.add_argument('--every', type=int, default=2, help='checkpoint_steps of the run'); ap.add_argument('--kept', type=int, default=2)
    ap.add_argument('--r', type=int, default=768); ap.add_argument('--alpha', type=int, default=1536)
    ap.add_argument('--work', default='/tmp/rsi_checkpoint_cost'); ap.add_argument('--out', required=True)
    a = ap.parse_args()
    import torch
    from transformers import AutoTokenizer
    from rsi_repro.config import Lora, Optim
    from rsi_repro.generate import ModelRef
    from rsi_repro.train import train_sft
    work = Path(a.work); work.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(ROOT / 'data/tiny_base')
    arch, config = build_config(a.shape, tok)
    folder = work / a.shape; folder.mkdir(exist_ok=True); config.save_pretrained(folder); tok.save_pretrained(folder)
    ids, masks = synthetic_rows(a.steps + 4, 0); mix = work / 'mix.npz'; write_mix(mix, ids, masks)
    optim = Optim(lr=1.6e-5, micro_batch=1, grad_accum=1, seq_len=2048, seed=0, steps=a.steps, warmup=0.02, bf16=device() == 'cuda',
                  lora_compute='bf16' if device() == 'cuda' else 'fp32', checkpoint_steps=a.every, checkpoints_kept=a.kept)
    out_dir, timer, sizes = work / 'adapter', save_timer(), []
    from transformers import TrainerCallback
    class Size(TrainerCallback):        # the newest checkpoint's bytes, once its marker is written (the step after its save)
        def on_step_begin(self, args, state, control, **kw):
            done = sorted(out_dir.glob('checkpoint-*/.complete'), key=lambda p: int(p.parent.name.split('-')[1]))
            if done and (not sizes or sizes[-1][0] != done[-1].parent.name): sizes.append((done[-1].parent.name, folder_bytes(done[-1].parent)))
    import shutil; shutil.rmtree(out_dir, ignore_errors=True)
    t0 = time.perf_counter()
    with patched_loading(folder, config):
        ev = train_sft(ModelRef(str(folder), dtype='bfloat16' if device() == 'cuda' else 'float32'), arch, mix,
                       Lora(r=a.r, alpha=a.alpha), optim, out_dir, tag='checkpoint-cost', report_to=[], callbacks=[timer, Size()])
    wall = time.perf_counter() - t0
    saves = [g for _, s, g in timer.gaps if s]
    others = [g for _, s, g in timer.gaps if not s]
    per_save = statistics.median(saves) - (statistics.median(others) if others else 0.0)
    from safetensors import safe_open
    with safe_open(str(out_dir / 'adapter_model.safetensors'), 'pt') as f: trainable = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    step = library_step_seconds(a.shape)
    intervals = profile_intervals()
    overhead = {name: {**iv, 'seconds_per_checkpoint': round(per_save, 2),
                       'fraction_of_training': round(per_save / (iv['every_steps'] * step['step_seconds']), 4)}
                for name, iv in intervals.items() if iv['every_steps'] and iv['lora_r'] == a.r and step}
    result = {'shape': a.shape, 'shape_words': SHAPE_WORDS.get(a.shape, a.shape), 'lora': {'r': a.r, 'alpha': a.alpha},
              'device': torch.cuda.get_device_name() if device() == 'cuda' else 'cpu', 'date': time.strftime('%Y-%m-%d'),
              'steps': a.steps, 'every_steps': a.every, 'checkpoints_kept': a.kept, 'trainable_parameters': trainable,
              'save_gaps_seconds': [round(g, 3) for g in saves], 'step_gaps_seconds_without_save': [round(g, 3) for g in others],
              'seconds_per_checkpoint': round(per_save, 2), 'checkpoint_bytes': sizes[-1][1] if sizes else None,
              'checkpoint_gib': round(sizes[-1][1] / 2**30, 2) if sizes else None, 'wall_seconds': round(wall, 1),
              'library_step': step, 'at_the_nemotron_intervals': overhead, 'argv': sys.argv,
              'versions': {'torch': torch.__version__, **{m: __import__(m).__version__ for m in ('transformers', 'peft')}}}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    doc = json.loads(Path(a.out).read_text()) if Path(a.out).exists() else {'what': __doc__.split('\n\n')[0], 'runs': []}
    doc['runs'].append(result); Path(a.out).write_text(json.dumps(doc, indent=1) + '\n')
    print(json.dumps({k: v for k, v in result.items() if k not in ('argv', 'versions')}, indent=1))


if __name__ == '__main__':
    main()
