"""Padding a run's micro-batches carry, by the order its rows are drawn in: the library's `StepGroupedSampler` (rows
grouped by length within each optimiser step, `optim.length_grouping_steps: 1`, or over N steps), beside a plain
random order (the trainers' default) and transformers' `group_by_length` sampler (`get_length_grouped_indices`, the
stock alternative: mega-batches of up to 50 micro-batches sorted by length). No model and no GPU: the padded tokens
of a micro-batch are its rows times its longest row rounded up to `--pad` (the nemotron profile's 16), the real
tokens its rows' sum, over `--epochs` epochs of each order.

    python benchmarks/padding.py --out benchmarks/results/padding.json

Rows: the synthetic rows `train_speed.py` trains on (log-normal lengths, mean ~330 tokens), and the tiny profile's
SFT rows in tulu-3's and smoltalk's schemas in `data/corpora` (question-and-answer rows written from Python's
docstrings, not samples of either corpus) through the study's chat template with the tiny base's tokenizer (as an SFT
mix stores them; seq_len 2048). The padding is the share of a micro-batch's tokens that are padding, over the run: the
compute a step spends on nothing, which a tokens/s that counts real tokens does not count.
"""
import argparse, importlib.util, json, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def synthetic_lengths(n: int = 480, seed: int = 0) -> list[int]:
    "The row lengths of train_speed.py's synthetic rows (its default --rows and --seed)."
    spec = importlib.util.spec_from_file_location('train_speed', ROOT / 'benchmarks' / 'train_speed.py')
    ts = importlib.util.module_from_spec(spec); spec.loader.exec_module(ts)
    ids, _ = ts.synthetic_rows(n, seed)
    return [len(x) for x in ids]


def corpus_lengths(name: str, seq_len: int = 2048) -> list[int]:
    "Tokens per row of a corpus sample as an SFT mix stores it (the study's chat template, the tiny base's tokenizer)."
    import numpy as np
    from rsi_repro.corpora import chat_messages, write_sft_mix
    from rsi_repro.generate import ModelRef, load_tokenizer
    from rsi_repro.io import read_jsonl
    tok = load_tokenizer(ModelRef(str(ROOT / 'data/tiny_base')))
    rows = read_jsonl(ROOT / 'data/corpora' / f'{name}.jsonl')
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / 'mix.npz'
        named = [(str(r.get('id', f'{name}:{i}')), r) for i, r in enumerate(rows)]
        write_sft_mix([(rid, chat_messages(r, rid)) for rid, r in named], tok, seq_len, path)
        return np.diff(np.load(path)['offsets']).tolist()


def orders(lengths, micro_batch: int, effective: int, seed: int, epochs: int, steps: list[int]) -> dict[str, list[list[int]]]:
    "Each order's rows, epoch by epoch: random, transformers' group_by_length, the library's grouping within and over steps."
    import torch
    from transformers.trainer_pt_utils import get_length_grouped_indices
    from rsi_repro.train import StepGroupedSampler
    out = {'random': [StepGroupedSampler(lengths, effective, seed, group=False).order(e) for e in range(epochs)],
           'group_by_length': [get_length_grouped_indices(lengths, micro_batch, generator=torch.Generator().manual_seed(seed + e))
                               for e in range(epochs)]}
    for n in steps:
        s = StepGroupedSampler(lengths, effective, seed, steps_per_group=n)
        out[f'steps_{n}'] = [s.order(e) for e in range(epochs)]
    return out


def order_words(order: str) -> str:
    "An order's key in words."
    if order.startswith('steps_'):
        n = int(order.removeprefix('steps_')); return f"library, grouped over {n} step{'s' if n > 1 else ''}"
    return {'random': 'random', 'group_by_length': 'transformers group_by_length'}[order]


def padding_fraction(lengths, epoch_orders, micro_batch: int, effective: int, pad: int) -> float:
    """Padding over the run: every step's rows cut into micro-batches in order (an epoch's short last step too), each padded
    to its longest row rounded up to a multiple of `pad`."""
    up = lambda n: -(-n // pad) * pad
    real = padded = 0
    for order in epoch_orders:
        for s in range(0, len(order), effective):
            step = order[s:s + effective]
            for k in range(0, len(step), micro_batch):
                mb = [lengths[i] for i in step[k:k + micro_batch]]
                real += sum(mb); padded += len(mb) * up(max(mb))
    return 1 - real / padded


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--splits', nargs='+', default=['8x6', '16x3', '24x2'], help='micro-batch x grad-accum (effective batch 48)')
    ap.add_argument('--steps', type=int, nargs='+', default=[1, 2, 4, 8, 16], help='the library\'s length_grouping_steps to show')
    ap.add_argument('--pad', type=int, default=16); ap.add_argument('--epochs', type=int, default=3); ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--sources', nargs='+', default=['synthetic', 'tulu_sample', 'smoltalk_sample'])
    ap.add_argument('--out', default=str(ROOT / 'benchmarks/results/padding.json'))
    a = ap.parse_args()
    t0 = time.perf_counter()
    doc = {'what': __doc__.split('\n\n')[0].replace('\n', ' '), 'date': time.strftime('%Y-%m-%d'), 'argv': sys.argv,
           'pad_to_multiple_of': a.pad, 'epochs': a.epochs, 'seed': a.seed, 'sources': {}}
    for name in a.sources:
        lengths = synthetic_lengths() if name == 'synthetic' else corpus_lengths(name)
        src = doc['sources'][name] = {'rows': len(lengths), 'mean_tokens': round(sum(lengths) / len(lengths), 1),
                                      'max_tokens': max(lengths), 'results': []}
        for split in a.splits:
            m, g = map(int, split.split('x'))
            for order, eps in orders(lengths, m, m * g, a.seed, a.epochs, a.steps).items():
                src['results'].append({'order': order, 'split': split, 'padding_fraction': round(padding_fraction(lengths, eps, m, m * g, a.pad), 4)})
        print(f"\n{name}: {len(lengths)} rows, mean {src['mean_tokens']} tokens, longest {src['max_tokens']}; padding over {a.epochs} epochs, "
              f"micro-batches padded to a multiple of {a.pad}")
        print(f"{'order':<36} " + ' '.join(f'{s:>8}' for s in a.splits))
        for order in dict.fromkeys(r['order'] for r in src['results']):
            fr = {r['split']: r['padding_fraction'] for r in src['results'] if r['order'] == order}
            print(f"{order_words(order):<36} " + ' '.join(f"{fr[s]:>8.1%}" for s in a.splits))
    doc['seconds'] = round(time.perf_counter() - t0, 1)
    Path(a.out).write_text(json.dumps(doc, indent=1) + '\n')


if __name__ == '__main__':
    main()
