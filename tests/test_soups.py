"LoRA soups: the uniform soup is the exact mean ΔW, layer by layer; PEFT's linear mix is not; the SVD variant reports its rank and error."
import json
from pathlib import Path

import pytest

torch = pytest.importorskip('torch')
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

from rsi_repro import soups

ROOT = Path(__file__).resolve().parents[1]
BASE = str(ROOT / 'data' / 'tiny_base')
TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj']


def random_adapter(out, seed, r=8, alpha=16, **kw):
    torch.manual_seed(seed)
    cfg = LoraConfig(r=r, lora_alpha=alpha, target_modules=TARGETS, init_lora_weights=False, **kw)
    get_peft_model(AutoModelForCausalLM.from_pretrained(BASE), cfg).save_pretrained(out)
    return out


@pytest.fixture(scope='module')
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp('soups')
    parents = {f"seed{s}": random_adapter(d / f"seed{s}", s) for s in (11, 12, 13)}
    return parents, soups.make_soups(BASE, parents, d / 'out')


def test_uniform_soup_is_the_mean_delta_layer_by_layer(built):
    parents, made = built
    deltas = [soups.adapter_deltas(p) for p in parents.values()]
    got = soups.adapter_deltas(made['uniform'])
    layers = json.loads((Path(BASE) / 'config.json').read_text())['num_hidden_layers']
    assert len(got) == layers * len(TARGETS)                               # every wrapped module of every layer
    for mod in got:
        want = sum(d[mod] for d in deltas) / 3                             # computed here, not by the library
        assert torch.allclose(got[mod], want, rtol=1e-5, atol=1e-7), mod


def test_peft_linear_mix_is_not_the_mean_delta(built):
    parents, made = built
    deltas = [soups.adapter_deltas(p) for p in parents.values()]
    got = soups.adapter_deltas(made['linear'])
    far = []
    for mod in got:
        want = sum(d[mod] for d in deltas) / 3
        far.append(float((got[mod] - want).norm() / want.norm()))
    assert min(far) > 0.1, min(far)                                         # every layer differs, substantially


def test_svd_soup_rank_and_reconstruction_error_are_reported(built):
    parents, made = built
    report = soups.soup_report(parents, made).set_index('soup')
    assert report.loc['svd', 'rank'] == 8 and report.loc['uniform', 'rank'] == 24
    assert bool(report.loc['uniform', 'exact_mean']) and not bool(report.loc['svd', 'exact_mean'])
    err = report.loc['svd', 'rel_error_mean']
    assert 0 < err < 1
    # the reported error is the Frobenius error of the best rank-8 approximation of the mean ΔW (Eckart–Young)
    deltas = [soups.adapter_deltas(p) for p in parents.values()]
    mod = next(iter(deltas[0]))
    mean = sum(d[mod] for d in deltas) / 3
    s = torch.linalg.svdvals(mean)
    best = float(s[8:].norm() / s.norm())
    assert abs(soups.layer_errors(parents, made).loc[mod, 'svd'] - best) < 1e-4


def test_soup_loads_as_an_adapter_and_names_its_parents(built, tmp_path):
    parents, made = built
    ev = soups.write_soup_evidence(made['uniform'], 'uniform', parents, BASE)
    assert [p['name'] for p in ev['parents']] == list(parents) and ev['r'] == 24 and ev['steps'] == 0
    net = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE), str(made['uniform'])).merge_and_unload()
    w = dict(net.named_parameters())['model.layers.2.mlp.down_proj.weight'].double()
    w0 = dict(AutoModelForCausalLM.from_pretrained(BASE).named_parameters())['model.layers.2.mlp.down_proj.weight'].double()
    deltas = [soups.adapter_deltas(p)['base_model.model.model.layers.2.mlp.down_proj'] for p in parents.values()]
    assert torch.allclose(w - w0, sum(deltas) / 3, atol=1e-6)


def test_parents_that_cannot_be_souped_are_refused(tmp_path):
    a = random_adapter(tmp_path / 'a', 1)
    with pytest.raises(ValueError, match="parent 'b' has r=4"):
        soups.check_parents({'a': a, 'b': random_adapter(tmp_path / 'b', 2, r=4, alpha=16)})
    with pytest.raises(ValueError, match='rsLoRA'):
        soups.check_parents({'a': a, 'c': random_adapter(tmp_path / 'c', 3, use_rslora=True)})
    with pytest.raises(KeyError, match='unknown soup method'):
        soups.soup_method('ties')


def test_degenerate_answers_are_flagged_by_name():
    import pandas as pd
    card = 'x' * 3 + ' ' + 'A forty character string, repeated here. ' * 25
    t = soups.degeneracy({'soup_svd': pd.DataFrame({'id': ['a', 'b'], 'response': ['Fine.', card]}),
                          'seed11': pd.DataFrame({'id': ['a', 'b'], 'response': ['Fine.', 'Also fine.']})}).set_index('checkpoint')
    assert t.loc['soup_svd', 'flag'] == 'DEGENERATE: soup_svd' and t.loc['soup_svd', 'degenerate'] == 1
    assert t.loc['soup_svd', 'repeats'] >= 24 and t.loc['seed11', 'flag'] == ''


def test_uniform_soup_is_a_warm_start_for_training(built):
    "The training code accepts the soup as a warm start (same rank: loaded as is; larger rank: grown), ΔW unchanged at step 0."
    from rsi_repro.config import Lora
    from rsi_repro.generate import ModelRef
    from rsi_repro.train import load_for_training
    parents, made = built
    soups.write_soup_evidence(made['uniform'], 'uniform', parents, BASE)
    want = soups.mean_deltas([soups.adapter_deltas(p) for p in parents.values()])
    for lora in (Lora(r=24, alpha=24), Lora(r=32, alpha=64)):
        net = load_for_training(ModelRef(base=BASE), lora, 'llama', warm_start=str(made['uniform']))
        assert any(p.requires_grad for n, p in net.named_parameters() if 'lora_' in n)
        mod = net.base_model.model.model.layers[1].self_attn.v_proj
        got = mod.get_delta_weight('default').double()
        assert torch.allclose(got, want['base_model.model.model.layers.1.self_attn.v_proj'], atol=1e-6), lora


def test_a_soup_is_a_checkpoint_a_stage_warm_starts_from(built, tmp_path):
    """The card's lineage holds a soup of stage-3 seeds. `soup_<method>` names a soup the soups stage wrote, so a stage or
    an arm can warm-start from it like from any adapter; the SVD soup keeps the parents' rank, which a rank-8 run takes."""
    import shutil
    from dataclasses import replace
    from rsi_repro.config import Lora, Optim, load_profile
    from rsi_repro.corpora import chat_messages, write_sft_mix
    from rsi_repro.generate import ModelRef, load_tokenizer
    from rsi_repro.io import read_jsonl
    from rsi_repro.layout import parent_of, resolve_checkpoint, soup_adapter
    from rsi_repro.train import train_sft
    prof = replace(load_profile(ROOT / 'configs' / 'tiny.yaml'), root=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="soup 'soup_svd' has no adapter"): resolve_checkpoint(prof, 'soup_svd')
    parents, made = built
    shutil.copytree(made['svd'], soup_adapter(prof.run_dir / 'soups', 'svd'))
    warm = resolve_checkpoint(prof, 'soup_svd')
    assert warm == soup_adapter(prof.run_dir / 'soups', 'svd') and parent_of(prof, 'soup_svd') == prof.soups.stage   # in the lineage it follows the stage it reseeds
    rows = read_jsonl(ROOT / 'data/corpora/tulu_sample.jsonl')[:4]
    mix = write_sft_mix([(r['id'], chat_messages(r, r['id'])) for r in rows], load_tokenizer(ModelRef(BASE)), 256, tmp_path / 'mix.npz')
    ev = train_sft(ModelRef(BASE), 'llama', mix.path, Lora(r=8, alpha=16), Optim(lr=1e-3, micro_batch=2, grad_accum=1, seq_len=256, seed=1, steps=1),
                   tmp_path / 'arm', tag='from-soup', warm_start=str(warm), report_to=[])
    assert ev['warm_start'] == str(warm) and ev['warm_start_identity'] and (tmp_path / 'arm' / 'adapter_config.json').exists()
