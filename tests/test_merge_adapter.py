"""vLLM serves an r=768 adapter merged into its base first: the merged checkpoint gives the adapter's logits, is written
whole or not at all (a merge killed half-way leaves a `.partial` folder that is never loaded), and is made once per
adapter. Tiny base, CPU."""
import json
from pathlib import Path

import torch

from rsi_repro.generate import ModelRef, load_model, merge_adapter

ROOT = Path(__file__).resolve().parents[1]
BASE = str(ROOT / 'data/tiny_base')


def adapter(folder: Path) -> str:
    "A LoRA adapter on the tiny base whose B matrices are not zero, so it changes the logits."
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    net = get_peft_model(AutoModelForCausalLM.from_pretrained(BASE), LoraConfig(r=4, lora_alpha=8, target_modules=['q_proj', 'v_proj']))
    with torch.no_grad():
        for n, p in net.named_parameters():
            if 'lora_B' in n: p.normal_(0, 0.5)
    net.save_pretrained(folder)
    cfg = json.loads((folder / 'adapter_config.json').read_text())
    cfg['base_model_name_or_path'] = BASE
    (folder / 'adapter_config.json').write_text(json.dumps(cfg))
    return str(folder)


def test_a_merged_adapter_gives_its_logits_and_is_written_whole_once(tmp_path):
    ref = ModelRef(BASE, adapter=adapter(tmp_path / 'adapter'), dtype='float32')
    work = tmp_path / 'work'
    ids = torch.tensor([[5, 17, 42, 9, 3]])
    merged = merge_adapter(ref, work)
    out = Path(merged.base)
    assert (out / 'config.json').exists() and not list(work.glob('*.partial'))
    with torch.no_grad():
        want, got, base = (load_model(m)(ids).logits for m in (ref, merged, ModelRef(BASE, dtype='float32')))
    assert torch.allclose(got, want, atol=1e-4) and not torch.allclose(base, want, atol=1e-2)   # the adapter's answers, not the base's
    stamp = (out / 'config.json').stat().st_mtime_ns
    assert merge_adapter(ref, work) == merged and (out / 'config.json').stat().st_mtime_ns == stamp      # made once
    # a merge killed half-way: a partial folder, and (from an older merge) the folder without its config
    import shutil
    shutil.rmtree(out); out.mkdir(); (out / 'model.safetensors').write_bytes(b'half')
    partial = out.with_name(out.name + '.partial'); partial.mkdir(); (partial / 'config.json').write_text('{}')
    assert merge_adapter(ref, work) == merged and not partial.exists()
    with torch.no_grad(): assert torch.allclose(load_model(merged)(ids).logits, want, atol=1e-4)
