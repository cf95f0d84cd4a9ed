"""Inputs for `benchmarks/multi_gpu.py` on GPUs: a random-initialised Nemotron-H of ~1.1 B parameters, an SFT mix, DPO pairs.

    python benchmarks/device/multi_gpu_inputs.py --work /tmp/rsi_multi            # base + mix + pairs
    python benchmarks/device/multi_gpu_inputs.py --work /tmp/rsi_multi --no-base  # mix + pairs only (tokenizer of data/tiny_base)

The base has the 30B-A3B base's layer kinds (Mamba-2, MoE with 32 routed experts top-6 and a shared expert, attention),
scaled down to 16 layers of width 2048 (built by `gpu_stages.build_base`), with the tiny base's tokenizer.
The SFT examples are multi-turn conversations of `--turns` consecutive exchanges of the tulu and smoltalk samples
(~320 tokens, near the card's ~330-token examples; the samples' single exchanges are ~107 tokens). The DPO pairs are
the ultrafeedback sample binarised as the pipeline does it. Writes base/, sft.npz, pairs.jsonl and inputs.json under --work.
"""
import argparse, json, sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / 'benchmarks'))
from rsi_repro.corpora import binarize, chat_messages, read_sft_mix, write_sft_mix
from rsi_repro.generate import ModelRef, load_tokenizer
from rsi_repro.io import read_jsonl, write_jsonl

KINDS = {'M': 'mamba', 'E': 'moe', '*': 'attention'}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--work', default='/tmp/rsi_multi')
    ap.add_argument('--hidden', type=int, default=2048)
    ap.add_argument('--layers', default='M E M * M E M E M * M E M E M E', help='M mamba, E moe, * attention')
    ap.add_argument('--turns', type=int, default=4, help='consecutive sample exchanges per SFT conversation')
    ap.add_argument('--seq-len', type=int, default=1024)
    ap.add_argument('--pairs', type=int, default=320)
    ap.add_argument('--no-base', action='store_true')
    a = ap.parse_args()
    work = Path(a.work); work.mkdir(parents=True, exist_ok=True)
    info = {}
    if not a.no_base:
        from gpu_stages import build_base
        layers = [KINDS[c] for c in a.layers.split()]
        info['model'] = {'architecture': 'nemotron_h', 'hidden': a.hidden, 'layers': layers, 'routed_experts': 32, 'experts_per_token': 6,
                         'parameters': build_base(work / 'base', a.hidden, layers)}
        import hashlib
        h = hashlib.sha256()
        for w in sorted((work / 'base').glob('*.safetensors')): h.update(w.read_bytes())
        info['model']['weights_sha256'] = h.hexdigest()     # the same seed builds the same weights on every machine
    tok = load_tokenizer(ModelRef(str(ROOT / 'data/tiny_base')))
    rows = read_jsonl(ROOT / 'data/corpora/tulu_sample.jsonl') + read_jsonl(ROOT / 'data/corpora/smoltalk_sample.jsonl')
    convs = []
    for k in range(0, len(rows) - a.turns + 1, a.turns):
        msgs = [m for i, r in enumerate(rows[k:k + a.turns]) for m in chat_messages(r, f"row {k + i}")]
        convs.append((f"conv{k // a.turns}", msgs))
    mix = write_sft_mix(convs, tok, a.seq_len, work / 'sft.npz')
    m = read_sft_mix(work / 'sft.npz')
    lens = np.array([len(x) for x in m['input_ids']])
    info['sft_mix'] = {'examples': int(len(lens)), 'mean_tokens': round(float(lens.mean()), 1), 'max_tokens': int(lens.max()),
                       'turns_per_example': a.turns, 'supervised_fraction': round(float(np.mean([np.mean(x) for x in m['assistant_masks']])), 3),
                       'dropped_overlong': len(mix.dropped_overlong), 'sha256': mix.sha256}
    pairs = [{'row': str(i), **binarize(r, f"row {i}").as_trl()} for i, r in enumerate(read_jsonl(ROOT / 'data/corpora/ultrafeedback_sample.jsonl')[:a.pairs])]
    write_jsonl(work / 'pairs.jsonl', pairs)
    info['dpo_pairs'] = {'pairs': len(pairs), 'source': 'data/corpora/ultrafeedback_sample.jsonl'}
    (work / 'inputs.json').write_text(json.dumps(info, indent=1))
    print(json.dumps(info))


if __name__ == '__main__':
    main()
