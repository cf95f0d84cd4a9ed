"""LoRA training speed at the card's stage-4 shape on one GPU: the library's `train_sft` with its fast settings against a
stock PyTorch + PEFT loop, in the same process, on the same random-initialised model shape and the same rows.

    python benchmarks/train_speed.py --shape qwen3-moe-30b-a3b --variants stock-2x24-ckpt stock-16x3 ours --out benchmarks/results/train_speed.json
    python benchmarks/train_speed.py --shape nemotron-h-31b --variants kernel-check stock-16x3 ours --append ...

Shapes are the published configs (Qwen/Qwen3-30B-A3B; the Nemotron-H 30B-A3B layout: 52 layers, 23 Mamba-2, 23 MoE with
128 experts top-6 and a shared expert, 6 attention), built from the config with random weights in bf16 on the GPU (no
checkpoint is read). The rows are synthetic: token ids drawn at random, lengths log-normal with a mean of ~330 tokens
(the card's stage 4: 6.3 M tokens over 400 steps of 48 examples) and a spread that gives random micro-batches of 8 the
~27 % padding measured on the stage mixes, the first 25-55 % of each row a prompt that carries no loss. LoRA r=768, alpha=1536 on the profile's target set for the architecture; AdamW; effective batch 48.

Variants (each on a freshly built model; the GPU's peak memory is reset before each):
- `stock-MxG[-ckpt]`: a plain loop (model(labels=...), loss.backward(), clip 1.0, AdamW, bf16 autocast, PEFT's fp32
  adapter, rows in random order) at micro-batch M x grad-accum G, with activation checkpointing if `-ckpt`:
  `stock-2x24-ckpt` is the profile's old split, `stock-16x3` the fastest stock split seen before;
- `ours`: `rsi_repro.train.train_sft` with micro_batch_fit, activation_checkpointing auto, lora_compute bf16 and
  padding_free (attention-only architectures) or length_grouping (Nemotron-H), exactly as a stage calls it;
  `ours-liger` the same with `optim.kernels: liger` (Liger's RMSNorm and rotary kernels in the base's layers);
  `ours-compile` with `kernels: compile` (the base's regions through torch.compile: whole decoder layers on Qwen3-MoE,
  whole attention and MoE layers and the Mamba layers' norms on Nemotron-H, `train.COMPILE_REGIONS`);
  `ours-compile-norms[-padN]` the norms and activations alone on every architecture, the regions before whole layers (a
  baseline; it sets no rate); `ours-compile-layers-padN` Nemotron-H's attention and MoE layers whole and its Mamba
  layers' norms (`train_setup.compile_layers_but_mamba`; since 2026-12-07 the registry's own, so the same as
  `ours-compile-padN` there; it sets no rate: its rows measured the regions while they were a candidate);
  `ours-compile-padN` with `optim.pad_to_multiple_of: N` (each micro-batch's length rounded up to a multiple of N);
  `ours-indexed` the same with the experts' routed rows moved by plain indexing, as before `train.routed_rows`;
- `trl-MxG[-ckpt]`: TRL's SFTTrainer as a user sets it up, PEFT LoRA, bf16, with Liger's kernels (`use_liger_kernel`),
  at micro-batch M x grad-accum G (refused where Liger has no kernels for the architecture: Nemotron-H);
  `trl-plain-MxG[-ckpt]` the same without them;
- `unsloth-MxG[-ckpt]`: Unsloth's LoRA SFT (`FastLanguageModel`, its SFTTrainer and kernels, `use_gradient_checkpointing=
  'unsloth'` with `-ckpt`) on the same targets, rows and split; Unsloth patches transformers, PEFT and TRL for the
  whole process and must be imported before them, so its variants run in a process of their own;
- `trl-dpo-MxG[-ckpt]`: TRL's DPOTrainer as a user sets it up for the dpo stage's loss (PEFT LoRA at the profile's dpo
  rank, its beta, lr, NLL weight and seq_len) on the same pairs as `ours-dpo`, its reference the base with the adapter
  off inside every step (TRL's default for a PEFT model); `trl-dpo-precompute-MxG[-ckpt]` with TRL's
  `precompute_ref_log_probs`, the reference pass before the timed steps as the library's shared reference is;
- `unsloth-dpo-MxG[-ckpt]`: Unsloth's model and its rewrite of TRL's DPOTrainer with `trl-dpo`'s settings, in a process
  of its own as `unsloth-` variants are;
- `peak`: the GPU's bf16 matrix-product rate (n x n products, n = 4096, 8192, 16384), the peak every row's MFU is also
  read against once the file holds one;
- `kernel-check` (Nemotron-H): loss and gradients of a small Nemotron-H through the Mamba kernels against
  transformers' PyTorch path, when the kernels are installed.
Step times are taken with the device synchronised; the first step of every variant is a warm-up and is not counted.
The library's rows also count, per optimiser step, the segments its caching allocator asked the driver for
(`step_device_allocs`), so that a slow stretch can be told apart from a cache still growing.
tokens/s counts real (non-pad) tokens. Prints a table; writes JSON (--out), merged into an existing file with --append.
Each summary row carries its model FLOPs per token (benchmarks/flops.py states the formula) and its rates as a fraction of
the device's bf16 peak (MFU): the vendor's dense figure, and the measured one where the file holds a `peak` run.

The file's `summary` holds one row per measurement, rebuilt from its `runs` on every write, and its `rates` section
the rates `rsi-repro estimate` reads by key: `train.sft.<shape>` for each measured shape, the library's own rate (the
last `ours` row of that shape; a later run of the library supersedes an earlier one), keyed by the shape names the
estimate gives the bases (`ESTIMATE_SHAPES`), and `train.dpo.<shape>` from the last `ours-dpo` row: `train_dpo` with the
nemotron profile's dpo settings on synthetic preference pairs (`ours-dpo-MxG[-ckpt]` tries another split;
`ours-dpo-compile-padN` the same settings with optim.kernels compile and optim.pad_to_multiple_of N, for
`train.dpo-compile-padN.<shape>`). `--rates-only` rewrites `summary` and `rates` of an existing
file from its runs without measuring anything:

    python benchmarks/train_speed.py --rates-only --out benchmarks/results/train_speed.json
"""
import argparse, contextlib, gc, json, math, os, statistics, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / 'benchmarks'))
from shapes import ESTIMATE_DEVICE, ESTIMATE_SHAPES, SHAPE_WORDS, SHAPES, build_config  # noqa: E402
from flops import SPEC_PEAK, mfu, training_flops_per_token  # noqa: E402


def device():
    import torch
    return 'cuda' if torch.cuda.is_available() else 'cpu'


@contextlib.contextmanager
def indexed_rows():
    "The mixture-of-experts layers' routed rows moved by plain indexing (an accumulating scatter backward), as before `routed_rows`."
    import rsi_repro.train_setup as T
    class Indexed:
        @staticmethod
        def apply(x, index, inverse, copies): return x[index]
    saved = T._ROUTED_ROWS.get('fn'); T._ROUTED_ROWS['fn'] = Indexed
    try: yield
    finally:
        T._ROUTED_ROWS.pop('fn', None)
        if saved is not None: T._ROUTED_ROWS['fn'] = saved


@contextlib.contextmanager
def compiled_norms():
    """`optim.kernels: compile` with the small regions on every architecture, each RMSNorm and experts activation alone, as
    the library compiled them before whole decoder layers (`train.COMPILE_REGIONS`): the same-run baseline for that choice."""
    import rsi_repro.train_setup as T
    saved = dict(T.COMPILE_REGIONS)
    T.COMPILE_REGIONS.update({k: T.compile_norms_and_activations for k in saved})
    try: yield
    finally: T.COMPILE_REGIONS.clear(); T.COMPILE_REGIONS.update(saved)


@contextlib.contextmanager
def compiled_layers_but_mamba():
    """`optim.kernels: compile` with Nemotron-H's attention and MoE layers compiled whole and its Mamba layers' norms
    (`train_setup.compile_layers_but_mamba`), whatever the registry holds: the candidate's rows, before the registry took
    it (2026-12-07), set no rate."""
    import rsi_repro.train_setup as T
    saved = T.COMPILE_REGIONS.get('nemotron_h')
    T.COMPILE_REGIONS['nemotron_h'] = T.compile_layers_but_mamba
    try: yield
    finally: T.COMPILE_REGIONS['nemotron_h'] = saved


def sync():
    import torch
    if torch.cuda.is_available(): torch.cuda.synchronize()


def step_seconds_callback(seconds: list):
    "A trainer callback appending each optimiser step's seconds to `seconds`, the device synchronised at both ends."
    from transformers import TrainerCallback
    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw): sync(); self.t0 = time.perf_counter()
        def on_step_end(self, args, state, control, **kw): sync(); seconds.append(time.perf_counter() - self.t0)
    return Timer()


def checkpointing_argument() -> str:
    "The name this transformers gives the training arguments' activation checkpointing switch."
    from transformers import TrainingArguments
    return 'activation_checkpointing' if 'activation_checkpointing' in TrainingArguments.__dataclass_fields__ else 'gradient_checkpointing'


def random_model(config):
    "The config's model with random weights, bf16, built on the GPU (the library loads it by path; see `patched_loading`)."
    import copy, torch
    from transformers import AutoModelForCausalLM
    config = copy.deepcopy(config)      # the trainers and attention settings write into a model's config
    with torch.device(device()):
        return AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if device() == 'cuda' else torch.float32)


@contextlib.contextmanager
def patched_loading(folder: Path, config):
    "`from_pretrained(folder)` builds the config's random model on the GPU instead of reading weights (there are none)."
    from transformers import AutoModelForCausalLM
    real = AutoModelForCausalLM.from_pretrained.__func__
    def fake(cls, name, *a, **k):
        return random_model(config) if Path(name) == folder else real(cls, name, *a, **k)
    AutoModelForCausalLM.from_pretrained = classmethod(fake)
    try: yield
    finally: AutoModelForCausalLM.from_pretrained = classmethod(real)


def synthetic_rows(n: int, seed: int, mean: float = 330, sigma: float = 0.23, lo: int = 48, hi: int = 2048, vocab=(2, 2000)):
    """Token ids and assistant masks: log-normal lengths with the given mean, the first 25-55 % of each row a prompt.
    sigma 0.23 makes random micro-batches of 8 carry ~27 % padding, as measured on the stage mixes (issue 17)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    mu = math.log(mean) - sigma ** 2 / 2
    lengths = np.clip(rng.lognormal(mu, sigma, n).round().astype(int), lo, hi)
    ids, masks = [], []
    for L in lengths:
        p = int(L * rng.uniform(0.25, 0.55))
        ids.append(rng.integers(*vocab, L).tolist()); masks.append([0] * p + [1] * (L - p))
    return ids, masks


def write_mix(path: Path, ids, masks):
    import numpy as np
    from rsi_repro.corpora import _write_npz
    offsets = np.cumsum([0] + [len(x) for x in ids])
    _write_npz(path, {'input_ids': np.asarray([t for x in ids for t in x], np.int32),
                      'assistant_masks': np.asarray([t for x in masks for t in x], np.uint8),
                      'offsets': offsets.astype(np.int64), 'ids': np.asarray([f'row{i}' for i in range(len(ids))])})


def free():
    import torch
    gc.collect()
    if torch.cuda.is_available(): torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()


def device_allocs():
    """How many segments this process's caching allocator has asked the driver for so far (`num_device_alloc`), or None
    without CUDA: a step that allocates new segments pays the driver's time, which a process with a warm cache does not."""
    import torch
    return torch.cuda.memory_stats().get('num_device_alloc') if torch.cuda.is_available() else None


def peak():
    import torch
    if not torch.cuda.is_available(): return {'peak_gib': None}
    return {'peak_gib': round(torch.cuda.max_memory_allocated() / 2**30, 2), 'peak_reserved_gib': round(torch.cuda.max_memory_reserved() / 2**30, 2)}


def stock_loop(config, arch, ids, masks, targets, r, alpha, micro_batch, grad_accum, checkpointing, steps, seed, lr=1.6e-5):
    "A plain loop: PEFT LoRA (fp32 adapter), bf16 autocast, HF's own loss over the step's supervised tokens, clip 1.0, AdamW."
    import torch
    from peft import LoraConfig, get_peft_model
    free()
    model = random_model(config)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={'use_reentrant': False}); model.enable_input_require_grads()
    torch.manual_seed(seed)
    net = get_peft_model(model, LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=list(targets), task_type='CAUSAL_LM'))
    net.train()
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    perm = torch.randperm(len(ids), generator=torch.Generator().manual_seed(seed)).tolist()
    E = micro_batch * grad_accum
    seconds, tokens, padded = [], [], []
    for step in range(steps):
        rows = [perm[(step * E + i) % len(perm)] for i in range(E)]
        n_sup = sum(sum(masks[i][1:]) for i in rows)
        sync(); t0 = time.perf_counter()
        real = pad = 0
        for k in range(grad_accum):
            mb = rows[k * micro_batch:(k + 1) * micro_batch]
            L = max(len(ids[i]) for i in mb)
            inp = torch.full((len(mb), L), config.pad_token_id, dtype=torch.long)
            att = torch.zeros((len(mb), L), dtype=torch.long); lab = torch.full((len(mb), L), -100, dtype=torch.long)
            for j, i in enumerate(mb):
                n = len(ids[i]); inp[j, :n] = torch.tensor(ids[i]); att[j, :n] = 1
                lab[j, :n] = torch.where(torch.tensor(masks[i]) == 1, torch.tensor(ids[i]), -100)
            real += int(att.sum()); pad += inp.numel()
            d = device()
            with torch.autocast(d, dtype=torch.bfloat16, enabled=d == 'cuda'):
                loss = net(input_ids=inp.to(d), attention_mask=att.to(d), labels=lab.to(d), num_items_in_batch=n_sup).loss
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step(); opt.zero_grad(set_to_none=True)
        sync(); seconds.append(time.perf_counter() - t0); tokens.append(real); padded.append(pad)
        print(f"  stock mb {micro_batch} x {grad_accum}{' ckpt' if checkpointing else ''}: step {step + 1}/{steps} {seconds[-1]:.2f} s "
              f"{real / seconds[-1]:,.0f} tok/s", flush=True)
    out = {'micro_batch': micro_batch, 'grad_accum': grad_accum, 'activation_checkpointing': checkpointing,
           'step_seconds': [round(s, 3) for s in seconds], 'step_tokens': tokens, 'step_padded_tokens': padded,
           'parameters': sum(p.numel() for p in net.parameters()), 'trainable_parameters': sum(p.numel() for p in params), **peak()}
    del net, model, opt, params; free()
    return out


def ours(folder: Path, config, arch, mix: Path, r, alpha, steps, seed, eff=48, profile_dir=None, kernels='none', pad=1, grouping_steps=1):
    """The library's own train_sft with the fast settings, as a stage calls it (`kernels`, `pad`, `grouping_steps`: its
    optim.kernels, optim.pad_to_multiple_of and, where it groups by length, optim.length_grouping_steps)."""
    import torch
    from transformers import TrainerCallback
    from rsi_repro.config import Lora, Optim
    from rsi_repro.generate import ModelRef
    from rsi_repro.train import train_sft
    fast = dict(micro_batch_fit=True, activation_checkpointing='auto', lora_compute='bf16', kernels=kernels, pad_to_multiple_of=pad)
    fast.update(length_grouping=True, length_grouping_steps=grouping_steps) if arch == 'nemotron_h' else fast.update(padding_free=True)
    optim = Optim(lr=1.6e-5, micro_batch=2, grad_accum=eff // 2, seq_len=2048, seed=seed, steps=steps, warmup=0.02, bf16=True, **fast)
    dtype = 'bfloat16' if device() == 'cuda' else 'float32'

    class Peak(TrainerCallback):          # the run's own peak, after the fit's probes
        def on_train_begin(self, args, state, control, **kw): sync(); free()
    class DeviceAllocs(TrainerCallback):  # segments the caching allocator asked the driver for in each optimiser step
        def __init__(self): self.counts, self.last = [], None
        def on_step_begin(self, args, state, control, **kw): self.last = device_allocs()
        def on_step_end(self, args, state, control, **kw):
            now = device_allocs()
            if now is not None and self.last is not None: self.counts.append(now - self.last)
    allocs = DeviceAllocs()
    cbs = [Peak(), allocs]
    if profile_dir:
        class Profile(TrainerCallback):   # one optimiser step (the third) under torch.profiler
            def on_step_begin(self, args, state, control, **kw):
                if state.global_step == 2:
                    self.p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA])
                    self.p.__enter__()
            def on_step_end(self, args, state, control, **kw):
                if state.global_step == 3 and hasattr(self, 'p'):
                    sync(); self.p.__exit__(None, None, None)
                    Path(profile_dir).mkdir(parents=True, exist_ok=True)
                    (Path(profile_dir) / f'profile_{arch}.txt').write_text(
                        self.p.key_averages().table(sort_by='cuda_time_total', row_limit=45, max_name_column_width=70))
        cbs.append(Profile())
    free()
    out_dir = Path('/tmp/rsi_train_speed') / f'ours_{arch}_{kernels}'
    t0 = time.perf_counter()
    with patched_loading(folder, config):
        ev = train_sft(ModelRef(str(folder), dtype=dtype), arch, mix, Lora(r=r, alpha=alpha), optim, out_dir, tag='speed',
                       report_to=[], callbacks=cbs)
    total = time.perf_counter() - t0
    log = [x for x in json.loads((out_dir / 'log_history.json').read_text()) if 'loss' in x]
    cum = [x['num_tokens'] for x in log]
    tokens = [cum[0]] + [b - a for a, b in zip(cum, cum[1:])]
    res = {'micro_batch': ev['micro_batch'], 'grad_accum': ev['grad_accum'], 'activation_checkpointing': ev['activation_checkpointing'],
           'settings': {k: v for k, v in ev['optim_settings'].items() if k in ('micro_batch', 'grad_accum', 'bf16', 'activation_checkpointing',
                        'micro_batch_fit', 'length_grouping', 'padding_free', 'lora_compute', 'kernels', 'pad_to_multiple_of')},
           **({k: ev[k] for k in ('kernel_modules', 'compile_regions') if k in ev}),
           'step_seconds': ev['step_seconds'], 'step_tokens': tokens, 'training_tokens': ev['training_tokens'],
           'padded_tokens': ev['padded_tokens'], 'fit': ev.get('fit'), 'wall_seconds_with_fit_and_save': round(total, 1),
           'losses': [round(x['loss'], 4) for x in log], **peak(), **({'memory': ev['memory']} if 'memory' in ev else {}),
           **({'step_device_allocs': allocs.counts} if allocs.counts else {})}
    if profile_dir: res['profiled_step'] = 2
    free()
    return res


def trl_sft(config, tok, arch, ids, masks, targets, r, alpha, micro_batch, grad_accum, checkpointing, steps, seed, liger=True, lr=1.6e-5):
    """TRL's SFTTrainer as a user sets it up: PEFT LoRA (fp32 adapter), bf16, the rows' assistant masks as the loss mask,
    and with `liger` Liger's kernels as TRL applies them (`use_liger_kernel`: RMSNorm, rotary and the SwiGLU experts;
    TRL's own fused LM head computes the loss). Liger patches the architecture's modules for the whole process: a
    variant measured after it in the same process would run its kernels too, so Liger variants run in a process of
    their own. Step seconds with the device synchronised, real tokens from TRL's own
    `num_tokens`; padded tokens counted at the collator over the run (the loader draws one micro-batch ahead)."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer
    if liger:
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
        if config.model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
            raise ValueError(f"liger-kernel has no kernels for {config.model_type}: TRL would train without them")
    free()
    model = random_model(config)
    seconds, padded = [], [0]
    ckpt = checkpointing_argument()
    args = SFTConfig(output_dir=f'/tmp/rsi_train_speed/trl_{arch}', per_device_train_batch_size=micro_batch, gradient_accumulation_steps=grad_accum,
                     bf16=device() == 'cuda', max_steps=steps, learning_rate=lr, lr_scheduler_type='constant', max_grad_norm=1.0,
                     logging_steps=1, save_strategy='no', report_to=[], seed=seed, max_length=2048, dataloader_num_workers=0,
                     use_liger_kernel=liger, disable_tqdm=True, **{ckpt: checkpointing})
    peft_config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=list(targets), task_type='CAUSAL_LM')
    data = Dataset.from_dict({'input_ids': ids, 'assistant_masks': masks})
    trainer = SFTTrainer(model=model, args=args, train_dataset=data, peft_config=peft_config, processing_class=tok, callbacks=[step_seconds_callback(seconds)])
    collate = trainer.data_collator
    def counting(features):
        batch = collate(features); padded[0] += batch['input_ids'].numel(); return batch
    trainer.data_collator = counting
    trainer.train()
    log = [x for x in trainer.state.log_history if 'loss' in x]
    cum = [x['num_tokens'] for x in log]
    out = {'micro_batch': micro_batch, 'grad_accum': grad_accum, 'activation_checkpointing': checkpointing,
           'settings': {'use_liger_kernel': liger, 'liger_kernel_config': args.liger_kernel_config},
           'step_seconds': [round(x, 4) for x in seconds], 'step_tokens': [cum[0]] + [b - a for a, b in zip(cum, cum[1:])],
           'training_tokens': cum[-1], 'padded_tokens': padded[0], 'losses': [round(x['loss'], 4) for x in log], **peak()}
    del trainer, model; free()
    return out


def unsloth_peft_model(folder, config, targets, r, alpha, checkpointing, seed):
    """Unsloth's 16-bit LoRA model as its docs set it up (`FastLanguageModel.from_pretrained` of the shape's folder, built at
    random by `patched_loading`, then `get_peft_model` on `targets` with no dropout and `use_gradient_checkpointing='unsloth'`
    with `checkpointing`), checked to adapt the same modules plain PEFT does: (model, what it loaded and adapted).
    `unsloth_sft` says why each argument is what it is and what is refused."""
    import sys
    if 'unsloth' not in sys.modules:
        raise ValueError("unsloth must be imported before transformers/peft/trl in this process (main() does for unsloth-* variants)")
    import torch
    import unsloth  # noqa: F401
    from unsloth import FastLanguageModel
    if device() != 'cuda': raise ValueError("Unsloth trains on a GPU (its kernels are Triton's)")
    if config.model_type not in ('qwen3_moe', 'nemotron_h'):
        raise ValueError(f"unsloth variant only set up for qwen3_moe and nemotron_h, not {config.model_type}")
    free()
    loads = []
    with patched_loading(folder, config):
        from transformers import AutoModelForCausalLM
        faked = AutoModelForCausalLM.from_pretrained.__func__
        def seen(cls, name, *a, **k):      # what Unsloth asks the loader for (the random model ignores the extras)
            loads.append({'name': str(name), **{x: str(k[x]) for x in ('attn_implementation', 'dtype', 'torch_dtype', 'device_map') if x in k}})
            return faked(cls, name, *a, **k)
        AutoModelForCausalLM.from_pretrained = classmethod(seen)
        t0 = time.perf_counter()
        model, _ = FastLanguageModel.from_pretrained(model_name=str(folder), max_seq_length=2048, dtype=torch.bfloat16,
                                                     load_in_4bit=False, load_in_8bit=False, load_in_16bit=True,
                                                     full_finetuning=False, local_files_only=True, random_state=seed,
                                                     use_gradient_checkpointing='unsloth' if checkpointing else False)
    if not loads or loads[0]['name'] != str(folder):
        raise ValueError(f"Unsloth did not load {folder} through AutoModelForCausalLM.from_pretrained: {loads}")
    model = FastLanguageModel.get_peft_model(model, r=r, lora_alpha=alpha, lora_dropout=0.0, bias='none', target_modules=list(targets),
                                             target_parameters=[], use_gradient_checkpointing='unsloth' if checkpointing else False,
                                             random_state=seed, use_rslora=False, loftq_config=None)
    load_seconds = time.perf_counter() - t0
    adapted = sorted({n.rsplit('.', 1)[0].split('.lora_A')[0] for n, _ in model.named_parameters() if '.lora_A.' in n})
    leaves = sorted({n.rsplit('.', 1)[-1] for n in adapted})
    if not set(leaves) <= set(targets) or any('experts.' in n and 'shared' not in n for n in adapted):
        raise ValueError(f"Unsloth adapted {leaves} (experts: {[n for n in adapted if 'experts' in n][:3]}), not the targets {targets}")
    return model, {'adapted_leaves': leaves, 'loaded_with': loads[0], 'load_and_peft_seconds': round(load_seconds, 1)}


def unsloth_sft(folder, config, tok, arch, ids, masks, targets, r, alpha, micro_batch, grad_accum, checkpointing, steps, seed, lr=1.6e-5,
                optim='adamw_torch_fused'):
    """Unsloth's LoRA SFT as its docs set it up for a 16-bit base: `FastLanguageModel.from_pretrained` (load_in_4bit
    False, load_in_16bit, bf16) of the shape's folder (built at random by `patched_loading`: Unsloth loads through
    `AutoModelForCausalLM.from_pretrained`), `FastLanguageModel.get_peft_model` on the same targets, r and alpha, no
    dropout, `use_gradient_checkpointing='unsloth'` with `checkpointing` (else False), and TRL's SFTTrainer, which
    Unsloth replaces with its own at import (its fused loss, its padding-free batching where it chooses it). `optim`:
    TRL's default, as `trl_sft` runs; Unsloth's SFTConfig would otherwise switch to 'adamw_8bit' (bitsandbytes). Same rows,
    assistant masks, split, optimiser settings and timing as `trl_sft`; real tokens counted at the collator
    (Unsloth's trainer logs no `num_tokens`), padded tokens there too (the loader draws one micro-batch ahead).

    Refused (ValueError): no GPU; Unsloth not imported in this process before the call (main() must import it
    before transformers, else its patches are partly missing); a model type other than the two studied here (both go
    through Unsloth's generic `FastModel` path; nemotron_h has its own branch in it); an adapter other than plain
    PEFT's on the same targets. On that last point: transformers 5 keeps the routed experts as 3-D Parameters, which
    PEFT's `target_modules` never reach (the other variants adapt attention, Mamba in_proj and the shared expert only).
    Given `up_proj`/`down_proj`, Unsloth would add them as `target_parameters` (rank r per expert: at r=768 and 128
    experts ~20 B more trainable parameters on Nemotron-H), a different and far larger adapter; `target_parameters=[]`
    keeps the same one, and the function checks that the adapted modules are the ones plain PEFT picks."""
    import sys
    if 'unsloth' not in sys.modules:
        raise ValueError("unsloth must be imported before transformers/peft/trl in this process (main() does for unsloth-* variants)")
    import unsloth  # noqa: F401
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer
    model, loaded = unsloth_peft_model(folder, config, targets, r, alpha, checkpointing, seed)
    seconds, padded, real = [], [], []   # real and padded tokens per micro-batch, in the order the loader drew them
    # no gradient_checkpointing here: Unsloth takes it from get_peft_model (TRL's default True would be overridden)
    args = SFTConfig(output_dir=f'/tmp/rsi_train_speed/unsloth_{arch}', per_device_train_batch_size=micro_batch,
                     gradient_accumulation_steps=grad_accum, bf16=True, max_steps=steps, learning_rate=lr, lr_scheduler_type='constant',
                     max_grad_norm=1.0, logging_steps=1, save_strategy='no', report_to=[], seed=seed, max_length=2048,
                     dataloader_num_workers=0, disable_tqdm=True, dataset_num_proc=1, optim=optim)
    data = Dataset.from_dict({'input_ids': ids, 'assistant_masks': masks})
    trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tok, callbacks=[step_seconds_callback(seconds)])
    collate = trainer.data_collator
    def counting(features):   # Unsloth's trainer logs no `num_tokens`: count here (padding-free rows come as one (1, N) row)
        batch = collate(features); padded.append(batch['input_ids'].numel())
        real.append(int(batch['attention_mask'].sum()) if 'attention_mask' in batch else batch['input_ids'].numel()); return batch
    trainer.data_collator = counting
    trainer.train()
    log = [x for x in trainer.state.log_history if 'loss' in x]
    n = len(seconds) * grad_accum         # the loader's look-ahead lies past the end
    step_tokens = [sum(real[k * grad_accum:(k + 1) * grad_accum]) for k in range(len(seconds))]
    params = [p for p in model.parameters() if p.requires_grad]
    out = {'micro_batch': micro_batch, 'grad_accum': grad_accum, 'activation_checkpointing': checkpointing,
           'settings': {'unsloth': unsloth.__version__, 'use_gradient_checkpointing': 'unsloth' if checkpointing else False,
                        'padding_free': bool(getattr(trainer.args, 'padding_free', False)), 'packing': bool(getattr(trainer.args, 'packing', False)),
                        'optim': str(trainer.args.optim), 'adapted_leaves': loaded['adapted_leaves'], 'loaded_with': loaded['loaded_with'],
                        'unsloth_sft_trainer': bool(getattr(SFTTrainer, '_unsloth_auto_packing_wrapped', False))},
           'step_seconds': [round(x, 4) for x in seconds], 'step_tokens': step_tokens,
           'training_tokens': sum(step_tokens), 'padded_tokens': sum(padded[:n]), 'losses': [round(x['loss'], 4) for x in log],
           'trainable_parameters': sum(p.numel() for p in params), 'load_and_peft_seconds': loaded['load_and_peft_seconds'], **peak()}
    del trainer, model, params; free()
    return out


def unsloth_dpo(folder, config, arch, pairs: Path, micro_batch, grad_accum, checkpointing, steps, seed):
    """Unsloth's DPO as its docs set it up: `unsloth_peft_model` at the nemotron profile's dpo rank, alpha and targets,
    then TRL's DPOTrainer, which Unsloth rewrites at import (`PatchFastRL`), with the same DPOConfig as `trl_dpo`
    (the profile's beta, lr, NLL weight and seq_len; the reference the base with the adapter off inside every step),
    on the same pairs under the study's chat template. Real tokens from TRL's `num_tokens`, which Unsloth's DPO trainer
    logs as TRL's does (an epoch's last step has fewer micro-batches than `grad_accum`, so the collator's counts cannot be
    grouped into steps by a fixed number), padded tokens at the collator; refused as `unsloth_sft` is."""
    import sys
    if 'unsloth' not in sys.modules:
        raise ValueError("unsloth must be imported before transformers/peft/trl in this process (main() does for unsloth-* variants)")
    import unsloth  # noqa: F401
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer
    from rsi_repro.backends import load_tokenizer
    from rsi_repro.config import load_profile
    from rsi_repro.generate import ModelRef
    from rsi_repro.io import read_jsonl
    from rsi_repro.train import lora_targets
    cfg = load_profile(ROOT / 'configs/nemotron.yaml').dpo
    arm = cfg.grid[0]
    tok = load_tokenizer(ModelRef(str(folder)))
    model, loaded = unsloth_peft_model(folder, config, lora_targets(cfg.lora, arch), cfg.lora.r, cfg.lora.alpha, checkpointing, seed)
    seconds, padded = [], [0]
    args = DPOConfig(output_dir=f'/tmp/rsi_train_speed/unsloth_dpo_{arch}', per_device_train_batch_size=micro_batch,
                     gradient_accumulation_steps=grad_accum, bf16=True, max_steps=steps, learning_rate=arm.lr,
                     lr_scheduler_type='constant', max_grad_norm=1.0, logging_steps=1, save_strategy='no', report_to=[], seed=seed,
                     max_length=cfg.optim.seq_len, beta=arm.beta, loss_type=['sigmoid', 'sft'], loss_weights=[1.0, cfg.nll_weight],
                     dataloader_num_workers=0, disable_tqdm=True, dataset_num_proc=1, optim='adamw_torch_fused')
    data = Dataset.from_list([{k: p[k] for k in ('prompt', 'chosen', 'rejected')} for p in read_jsonl(pairs)])
    trainer = DPOTrainer(model=model, args=args, train_dataset=data, processing_class=tok, callbacks=[step_seconds_callback(seconds)])
    collate = trainer.data_collator
    def counting(features):
        batch = collate(features); padded[0] += batch['input_ids'].numel(); return batch
    trainer.data_collator = counting
    trainer.train()
    log = [x for x in trainer.state.log_history if 'loss' in x]
    if any('num_tokens' not in x for x in log): raise ValueError(f"{type(trainer).__name__} logged no num_tokens: its real tokens are unknown")
    cum = [x['num_tokens'] for x in log]
    step_tokens = [cum[0]] + [b - a for a, b in zip(cum, cum[1:])]
    out = {'stage': 'dpo', 'micro_batch': micro_batch, 'grad_accum': grad_accum, 'activation_checkpointing': checkpointing,
           'settings': {'unsloth': unsloth.__version__, 'use_gradient_checkpointing': 'unsloth' if checkpointing else False,
                        'precompute_ref_log_probs': False, 'shared_reference': False, 'loss_type': ['sigmoid', 'sft'],
                        'seq_len': cfg.optim.seq_len, 'trainer': type(trainer).__name__, **loaded},
           'lora': {'r': cfg.lora.r, 'alpha': cfg.lora.alpha}, 'beta': arm.beta, 'nll_weight': cfg.nll_weight,
           'step_seconds': [round(x, 4) for x in seconds], 'step_tokens': step_tokens, 'training_tokens': cum[-1],
           'padded_tokens': padded[0], 'losses': [round(x['loss'], 4) for x in log], **peak()}
    del trainer, model; free()
    return out


def kernel_check(arch):
    "A small Nemotron-H, loss and gradients through the Mamba kernels against transformers' PyTorch fallback (same weights)."
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.models.nemotron_h import NemotronHConfig, modeling_nemotron_h as M
    names = ['causal_conv1d_fn', 'causal_conv1d_update', 'mamba2_split_conv1d_scan_combined', 'mamba2_selective_state_update', 'mamba2_chunk_scan']
    def impl(f): return {n: c.cell_contents for n, c in zip(f.__code__.co_freevars, f.__closure__ or [])}
    status = {n: getattr(impl(getattr(M, n)).get('implementation'), '__module__', None) for n in names}
    kernels = all(impl(getattr(M, n)).get('is_new_implementation') for n in names)
    out = {'implementations': status, 'kernels': kernels}
    if not kernels: return out
    cfg = NemotronHConfig(vocab_size=1000, hidden_size=256, layers_block_type=['mamba', 'moe', 'attention', 'mamba'], num_attention_heads=8,
                          num_key_value_heads=2, head_dim=32, intermediate_size=512, mamba_num_heads=8, mamba_head_dim=64, ssm_state_size=64,
                          n_groups=2, n_routed_experts=8, n_shared_experts=1, moe_intermediate_size=128, moe_shared_expert_intermediate_size=256,
                          num_experts_per_tok=2, chunk_size=64, use_cache=False)
    torch.manual_seed(0)
    with torch.device('cuda'): model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.train()
    ids = torch.randint(0, 1000, (4, 300), device='cuda')   # 300 tokens: several chunks of 64
    def run():
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss; loss.backward()
        return loss.item(), {n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None}
    lk, gk = run()
    saved = {n: getattr(M, n) for n in names}
    try:
        for n in names: setattr(M, n, impl(saved[n])['torch_function'])
        lt, gt = run()
    finally:
        for n, f in saved.items(): setattr(M, n, f)
    rel = {n: ((gk[n] - gt[n]).norm() / gt[n].norm().clamp(min=1e-12)).item() for n in gt}
    worst = max(rel, key=rel.get)
    out.update(loss_kernels=round(lk, 5), loss_torch=round(lt, 5), grad_rel_err_median=round(sorted(rel.values())[len(rel) // 2], 5),
               grad_rel_err_max=round(rel[worst], 5), grad_rel_err_max_param=worst, bf16=True)
    return out


def synthetic_pairs(path: Path, n: int, seed: int, tok, prompt=150, chosen=300, rejected=250, sigma=0.23):
    """Preference pairs in the stage's format (conversational prompt, chosen, rejected), texts decoded from random token ids
    of log-normal lengths with these means: of the order of ultrafeedback's pairs, not measured on them."""
    import numpy as np
    rng = np.random.default_rng(seed)
    def text(mean):
        L = int(np.clip(rng.lognormal(math.log(mean) - sigma ** 2 / 2, sigma), 16, 1500))
        return tok.decode(rng.integers(2, 2000, L).tolist(), skip_special_tokens=True)
    rows = [{'prompt': [{'role': 'user', 'content': text(prompt)}], 'chosen': [{'role': 'assistant', 'content': text(chosen)}],
             'rejected': [{'role': 'assistant', 'content': text(rejected)}]} for _ in range(n)]
    path.write_text(''.join(json.dumps(r) + '\n' for r in rows))
    return {'pairs': n, 'mean_tokens_asked': {'prompt': prompt, 'chosen': chosen, 'rejected': rejected}}


def ours_dpo(folder: Path, config, arch, pairs: Path, steps, seed, split=None, reference_batch=None, kernels=None, pad=None, grouping_steps=None):
    """The library's own train_dpo as the dpo stage calls it, with the nemotron profile's dpo settings (LoRA, split,
    checkpointing, seq_len, beta of its first grid arm, NLL weight), reading the pairs' reference log-probabilities from
    the file the stage computes once for all its arms (`dpo_reference`, timed apart: `reference_seconds`); `split`
    (M, G, ckpt) replaces the profile's split, `kernels` and `pad` its optim.kernels and optim.pad_to_multiple_of."""
    from dataclasses import replace
    from rsi_repro.config import load_profile
    from rsi_repro.generate import ModelRef
    from rsi_repro.train import dpo_reference, reference_path, train_dpo
    cfg = load_profile(ROOT / 'configs/nemotron.yaml').dpo
    optim = replace(cfg.optim, steps=steps, epochs=None, seed=seed)
    if split: optim = replace(optim, micro_batch=split[0], grad_accum=split[1], activation_checkpointing=split[2], micro_batch_fit=False)
    if kernels is not None: optim = replace(optim, kernels=kernels)
    if pad is not None: optim = replace(optim, pad_to_multiple_of=pad)
    if grouping_steps is not None: optim = replace(optim, length_grouping_steps=grouping_steps)
    out_dir = Path('/tmp/rsi_train_speed') / f'dpo_{arch}'
    model = ModelRef(str(folder), dtype='bfloat16' if device() == 'cuda' else 'float32')
    free(); reference_path(pairs).unlink(missing_ok=True); t0 = time.perf_counter()
    with patched_loading(folder, config):
        reference = dpo_reference(model, arch, pairs, cfg.lora, optim, batch_size=reference_batch or cfg.reference_batch)
        reference_seconds = time.perf_counter() - t0
        ref_doc = json.loads(Path(reference).read_text())
        free(); t0 = time.perf_counter()
        ev = train_dpo(model, arch, pairs, cfg.lora, optim, out_dir, tag='speed', beta=cfg.grid[0].beta, nll_weight=cfg.nll_weight,
                       reference=reference, report_to=[])
    total = time.perf_counter() - t0
    log = [x for x in json.loads((out_dir / 'log_history.json').read_text()) if 'loss' in x]
    cum = [x['num_tokens'] for x in log]
    res = {'stage': 'dpo', 'micro_batch': ev['micro_batch'], 'grad_accum': ev['grad_accum'], 'activation_checkpointing': ev['activation_checkpointing'],
           'settings': {'micro_batch': optim.micro_batch, 'grad_accum': optim.grad_accum, 'bf16': optim.bf16, 'micro_batch_fit': optim.micro_batch_fit,
                        'activation_checkpointing': optim.activation_checkpointing, 'seq_len': optim.seq_len, 'shared_reference': True,
                        'kernels': optim.kernels, 'pad_to_multiple_of': optim.pad_to_multiple_of},
           **({k: ev[k] for k in ('kernel_modules', 'compile_regions') if k in ev}),
           'reference_seconds': round(reference_seconds, 1), 'reference_batch_size': ref_doc['batch_size'],
           'reference_batches': ref_doc.get('batches'), 'fit': ev.get('fit'),
           'lora': {'r': cfg.lora.r, 'alpha': cfg.lora.alpha}, 'beta': cfg.grid[0].beta, 'nll_weight': cfg.nll_weight,
           'step_seconds': ev['step_seconds'], 'step_tokens': [cum[0]] + [b - a for a, b in zip(cum, cum[1:])],
           'training_tokens': ev['training_tokens'], 'padded_tokens': ev['padded_tokens'], 'wall_seconds_with_save': round(total, 1),
           'losses': [round(x['loss'], 4) for x in log], **peak(), **({'memory': ev['memory']} if 'memory' in ev else {})}
    free()
    return res


def trl_dpo(config, folder: Path, arch, pairs: Path, micro_batch, grad_accum, checkpointing, steps, seed, precompute=False):
    """TRL's DPOTrainer as a user sets it up for the dpo stage's loss: a random model in bf16, a PEFT LoRA adapter of the
    nemotron profile's dpo rank, alpha and targets (fp32, no dropout), the profile's seq_len, its first grid arm's beta
    and lr and its NLL weight (`loss_type=['sigmoid', 'sft']`), on the same pairs as `ours_dpo`. The reference is TRL's
    default for a PEFT model, the base with the adapter off inside every step; with `precompute` TRL's
    `precompute_ref_log_probs`, computed before the first step and so outside the timed steps, as `ours_dpo` times its
    shared reference apart (`trainer_init_seconds`: TRL builds the trainer, tokenises and precomputes there). Step seconds with
    the device synchronised, real tokens from TRL's own `num_tokens`, padded tokens at the collator."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import DPOConfig, DPOTrainer
    from rsi_repro.backends import load_tokenizer
    from rsi_repro.config import load_profile
    from rsi_repro.generate import ModelRef
    from rsi_repro.io import read_jsonl
    from rsi_repro.train import lora_targets
    cfg = load_profile(ROOT / 'configs/nemotron.yaml').dpo
    arm = cfg.grid[0]
    tok = load_tokenizer(ModelRef(str(folder)))     # the study's chat template, as the library's trainers render the pairs
    free()
    model = random_model(config)
    seconds, padded = [], [0]
    ckpt = checkpointing_argument()
    args = DPOConfig(output_dir=f'/tmp/rsi_train_speed/trl_dpo_{arch}', per_device_train_batch_size=micro_batch,
                     gradient_accumulation_steps=grad_accum, bf16=device() == 'cuda', max_steps=steps, learning_rate=arm.lr,
                     lr_scheduler_type='constant', max_grad_norm=1.0, logging_steps=1, save_strategy='no', report_to=[], seed=seed,
                     max_length=cfg.optim.seq_len, beta=arm.beta, loss_type=['sigmoid', 'sft'], loss_weights=[1.0, cfg.nll_weight],
                     precompute_ref_log_probs=precompute, dataloader_num_workers=0, disable_tqdm=True, **{ckpt: checkpointing})
    targets = lora_targets(cfg.lora, arch)
    peft_config = LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=0.0, target_modules=list(targets), task_type='CAUSAL_LM')
    data = Dataset.from_list([{k: p[k] for k in ('prompt', 'chosen', 'rejected')} for p in read_jsonl(pairs)])
    t0 = time.perf_counter()     # TRL 1.16 tokenises the pairs, and with `precompute` runs the reference pass, in __init__
    trainer = DPOTrainer(model=model, args=args, train_dataset=data, peft_config=peft_config, processing_class=tok, callbacks=[step_seconds_callback(seconds)])
    init_seconds = time.perf_counter() - t0
    collate = trainer.data_collator
    def counting(features):
        batch = collate(features); padded[0] += sum(v.numel() for k, v in batch.items() if k.endswith('input_ids')); return batch
    trainer.data_collator = counting
    trainer.train()
    log = [x for x in trainer.state.log_history if 'loss' in x]
    cum = [x['num_tokens'] for x in log]
    out = {'stage': 'dpo', 'micro_batch': micro_batch, 'grad_accum': grad_accum, 'activation_checkpointing': checkpointing,
           'settings': {'precompute_ref_log_probs': precompute, 'shared_reference': False, 'loss_type': ['sigmoid', 'sft'],
                        'seq_len': cfg.optim.seq_len},
           'lora': {'r': cfg.lora.r, 'alpha': cfg.lora.alpha}, 'beta': arm.beta, 'nll_weight': cfg.nll_weight,
           'trainer_init_seconds': round(init_seconds, 1),
           'step_seconds': [round(x, 4) for x in seconds], 'step_tokens': [cum[0]] + [b - a for a, b in zip(cum, cum[1:])],
           'training_tokens': cum[-1], 'padded_tokens': padded[0], 'losses': [round(x['loss'], 4) for x in log], **peak()}
    del trainer, model; free()
    return out


STEADY_STEPS = 20      # timed steps a rate needs before it is called steady
RATE_OF = 'median of the timed steps\' real tokens/s'
OLD_RATE_OF = 'real tokens over seconds of the timed steps'      # how rows measured before the median was used were rated


def gemm_peak(sizes=(4096, 8192, 16384), repeats: int = 30) -> dict:
    """The GPU's bf16 matrix-product rate, the peak MFU divides by: for each n, the median of `repeats` timed n x n by n x n
    products (2n^3 FLOPs each, CUDA events around each), after 5 untimed; the best n's rate is the peak."""
    import torch
    rates = {}
    for n in sizes:
        a, b = (torch.randn(n, n, device='cuda', dtype=torch.bfloat16) for _ in range(2))
        for _ in range(5): a @ b
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(); a @ b; end.record(); end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        rates[n] = 2 * n ** 3 / statistics.median(times)
        del a, b; free()
    return {'gemm_tflops': {str(n): round(r / 1e12, 1) for n, r in rates.items()}, 'peak_tflops': round(max(rates.values()) / 1e12, 1)}


def measured_peaks(doc) -> dict[str, float]:
    "Each device's measured bf16 peak FLOP/s: its last `peak` variant's."
    return {run['meta']['device']: r['peak_tflops'] * 1e12 for run in doc.get('runs', []) for r in run['results']
            if r['variant'] == 'peak' and r.get('peak_tflops')}


def timed_steps(res) -> list[tuple[int, float, int]]:
    "(step, seconds, real tokens) of the timed steps: all but the first (warm-up) and a profiled one, the same for every variant."
    skip = {0, res.get('profiled_step', -1)}
    return [(i, s, t) for i, (s, t) in enumerate(zip(res['step_seconds'], res['step_tokens'])) if i not in skip]


def step_stats(res) -> dict:
    """The timed steps' real tokens/s: how many, whether that many is steady (>= STEADY_STEPS), the median, min and max,
    and the steps slower than 1.5x the median step time (reported, not removed); over twice STEADY_STEPS, each half's
    median as well, in step order, so that a run still speeding up (or slowing down) shows."""
    timed = timed_steps(res)
    if not timed: return {'timed_steps': 0, 'steady': False}
    rates = sorted(t / s for _, s, t in timed)
    mid = statistics.median(s for _, s, _ in timed)
    halves = {}
    if len(timed) >= 2 * STEADY_STEPS:
        in_order, half = [t / s for _, s, t in timed], len(timed) // 2
        halves = {'first_half_median_tokens_per_s': round(statistics.median(in_order[:half]), 1),
                  'second_half_median_tokens_per_s': round(statistics.median(in_order[half:]), 1)}
    return {'timed_steps': len(timed), 'steady': len(timed) >= STEADY_STEPS, 'median_tokens_per_s': round(statistics.median(rates), 1),
            'min_tokens_per_s': round(rates[0], 1), 'max_tokens_per_s': round(rates[-1], 1), **halves,
            'slow_steps': [{'step': i, 'seconds': round(s, 3)} for i, s, _ in timed if s > 1.5 * mid]}


def rate(res):
    "A variant's rate: the median of its timed steps' real tokens/s (`step_stats`), one formula for every variant."
    return step_stats(res).get('median_tokens_per_s')


def summarise(doc) -> list[dict]:
    "One row per measurement of every run in the file (kernel checks and failed variants left out), in the order run."
    out, peaks = [], measured_peaks(doc)
    for run in doc.get('runs', []):
        m, s = run['meta'], run['shape']
        kernels = s['architecture'] == 'nemotron_h' and not str(m['versions'].get('mamba_ssm', '')).startswith('not installed')
        for r in run['results']:
            if r['variant'] in ('kernel-check', 'peak') or 'error' in r or r.get('tokens_per_s') is None: continue
            stage = r.get('stage', 'sft')
            out.append({'shape': s['name'], 'architecture': s['architecture'], 'stage': stage, 'variant': r['variant'],
                        'library': is_library(r['variant']), 'note': m.get('note', ''), 'mamba_kernels': kernels,
                        'tokens_per_s': r['tokens_per_s'], 'micro_batch': r['micro_batch'], 'grad_accum': r['grad_accum'],
                        'activation_checkpointing': r['activation_checkpointing'], 'padding_fraction': r.get('padding_fraction'),
                        'peak_gib': r['peak_gib'], 'peak_reserved_gib': r.get('peak_reserved_gib'),
                        'reserved_of_device': (round(r['peak_reserved_gib'] / m['gpu_gib'], 3) if r.get('peak_reserved_gib') and m.get('gpu_gib') else None),
                        'cache_flushes': (r.get('memory') or {}).get('cache_flushes'), 'tag': r.get('tag', ''),
                        **({'compile_regions': r['compile_regions']} if 'compile_regions' in r else {}),
                        'allocator': m.get('allocator'), 'settings': r.get('settings'), 'lora_r': r.get('lora', s['lora'])['r'],
                        'effective_batch': r['micro_batch'] * r['grad_accum'] if stage == 'dpo' else s['effective_batch'],
                        'mean_row_tokens': (round(r['training_tokens'] / (len(r['step_seconds']) * r['micro_batch'] * r['grad_accum']), 1) if stage == 'dpo'
                                            else s['mean_row_tokens']),
                        'rate_of': r.get('rate_of', OLD_RATE_OF), **step_stats(r),
                        'date': m['date'], 'device': m['device']})
            out[-1].update(flops_beside(out[-1], peaks.get(m['device'])))
            if stage == 'dpo' and r.get('reference_seconds') and s.get('dpo_pairs'):   # the stage's one reference pass, timed apart
                pairs = s['dpo_pairs']['pairs']
                out[-1].update(reference_pairs=pairs, reference_seconds=r['reference_seconds'],
                               reference_tokens_per_s=round(pairs * out[-1]['mean_row_tokens'] / r['reference_seconds'], 1))
                if len(r.get('reference_batches') or []) > 1:   # its batches timed: rated as steps are, the first a warm-up
                    rates = sorted(t / sec for _, t, sec in r['reference_batches'][1:])
                    out[-1].update(reference_with_warmup_tokens_per_s=out[-1]['reference_tokens_per_s'],
                                   reference_tokens_per_s=round(statistics.median(rates), 1), reference_timed_batches=len(rates),
                                   reference_steady=len(rates) >= STEADY_STEPS,
                                   reference_min_max_tokens_per_s=[round(rates[0], 1), round(rates[-1], 1)],
                                   reference_batch_size=r['reference_batch_size'])
                # an arm that pays for the reference alone, one epoch over the pairs (each pair's tokens once through each
                # pass): the rate to set beside a trainer that computes the reference inside its steps
                out[-1]['one_arm_with_reference_tokens_per_s'] = round(1 / (1 / r['tokens_per_s'] + 1 / out[-1]['reference_tokens_per_s']), 1)
                arms = profile_dpo_arms()         # and each of the nemotron profile's arms, the pass shared by all of them
                out[-1].update(profile_dpo_arms=arms, profile_arm_with_reference_tokens_per_s=round(
                    1 / (1 / r['tokens_per_s'] + 1 / (arms * out[-1]['reference_tokens_per_s'])), 1))
    return out


def profile_dpo_arms() -> int:
    "The DPO arms of the nemotron profile that share one reference pass: its beta x lr grid and its rank/seed search."
    from rsi_repro.config import load_profile
    dpo = load_profile(ROOT / 'configs/nemotron.yaml').dpo
    return len(dpo.grid) + len(dpo.rank_seed)


def reference_apart(row) -> bool:
    """Whether a DPO row's timed steps leave the reference forward out: the library's shared pass, or TRL's
    `precompute_ref_log_probs` (its pass in the trainer's set-up, before the first step). Then a token's work in a step
    is the policy's forward and backward alone, as for SFT."""
    st = row['settings'] or {}
    return bool(st.get('shared_reference') or st.get('precompute_ref_log_probs'))


def flops_beside(row, measured_peak: float | None = None) -> dict:
    """The row's model FLOPs per token (benchmarks/flops.py's formula) and its rates as MFU: of the device's spec peak, and
    of its measured one (a `peak` variant's) where the file has one."""
    from rsi_repro.train import LORA_TARGETS
    arch, cfg = SHAPES[row['shape']]
    f = training_flops_per_token(cfg, arch, row['mean_row_tokens'], row['lora_r'], LORA_TARGETS[arch], bool(row['activation_checkpointing']),
                                 reference_forward=row['stage'] == 'dpo' and not reference_apart(row))
    peak = SPEC_PEAK.get(row['device'])
    out = {'gflops_per_token': round(f['flops_per_token'] / 1e9, 2)}
    if peak:
        out['mfu_of_spec_peak'] = round(mfu(row['tokens_per_s'], f['flops_per_token'], peak), 3)
        if row.get('median_tokens_per_s'): out['median_mfu_of_spec_peak'] = round(mfu(row['median_tokens_per_s'], f['flops_per_token'], peak), 3)
    if measured_peak:
        out['mfu_of_measured_peak'] = round(mfu(row['tokens_per_s'], f['flops_per_token'], measured_peak), 3)
        if row.get('median_tokens_per_s'): out['median_mfu_of_measured_peak'] = round(mfu(row['median_tokens_per_s'], f['flops_per_token'], measured_peak), 3)
    return out


LIBRARY_VARIANTS = {'ours': 'none', 'ours-compile': 'compile', 'ours-liger': 'liger', 'ours-dpo': 'none'}   # and their optim.kernels

def row_kernels(row) -> str:
    "The fused layers a row ran with (`optim.kernels`): its settings say so since they record it; before, its variant did."
    return (row.get('settings') or {}).get('kernels') or LIBRARY_VARIANTS.get(row['variant'], 'none')

def is_library(variant: str) -> bool:
    """A variant that runs the library's own train_sft or train_dpo as a stage calls it (`ours-compile-padN`,
    `ours-dpo-compile-padN`: with optim.kernels compile and optim.pad_to_multiple_of N)."""
    return variant in LIBRARY_VARIANTS or variant.startswith(('ours-compile-pad', 'ours-dpo-compile-pad'))

def commit_of(row) -> str:
    "The commit a row's run measured (its note's first word, as the runs of a device session are noted), else its date."
    return row['note'].split(';')[0].strip() if row['note'] else row['date']

RATE_RANKS = {'sft': 768, 'dpo': 64}   # the ranks a plain training key is measured at: --r's default (the card's), the profile's DPO rank

def rate_rows(summary) -> dict[str, list[dict]]:
    """The summary rows each rate comes from: per shape the estimate knows, per stage and per what a rate's key names
    (`optim.kernels`, `optim.pad_to_multiple_of`: `rsi_repro.estimate.training_tag`; a rank other than `RATE_RANKS`'s
    under its own key, `rsi_repro.estimate.rank_key`), the library's rows of the last
    commit measured (`ours` for `train.sft.<shape>`, `ours-compile` for `train.sft-compile.<shape>`, `ours-compile-pad16`
    for `train.sft-compile-pad16.<shape>`, `ours-dpo`, the profile's DPO settings, for `train.dpo.<shape>`): the keys
    `rsi-repro estimate` asks for by the profile's settings. Several rows of one commit are repeated runs of one thing.
    Only rows measured on `ESTIMATE_DEVICE` set a rate: one card's bill."""
    from rsi_repro.estimate import rank_key, training_tag
    rows = {}
    for row in summary:
        # a tag marks a departure from the library's own run; a row from another card than the estimate's prices nothing
        if row['library'] and row['shape'] in ESTIMATE_SHAPES and not row.get('tag') and row['device'] == ESTIMATE_DEVICE:
            pad = (row['settings'] or {}).get('pad_to_multiple_of', 1)
            key = f"train.{row['stage']}{training_tag(row_kernels(row), pad)}.{ESTIMATE_SHAPES[row['shape']]}"
            if row['lora_r'] != RATE_RANKS[row['stage']]: key = rank_key(key, row['lora_r'])   # another rank's rate: its own key
            rows.setdefault(key, []).append(row)
    return {key: [r for r in rs if commit_of(r) == commit_of(rs[-1])] for key, rs in rows.items()}


KERNEL_WORDS = {'none': '', 'liger': "Liger's RMSNorm and rotary kernels (optim.kernels: liger)"}
COMPILE_WORDS = {'compile_norms_and_activations': "RMSNorms and experts' activations compiled by torch.compile (optim.kernels: compile)",
                 'compile_decoder_layers': "each decoder layer compiled whole by torch.compile (optim.kernels: compile)",
                 'compile_layers_but_mamba': "each attention and MoE layer compiled whole and each Mamba layer's norm by torch.compile (optim.kernels: compile)"}

def kernel_words(row) -> str:
    """What the row's fused layers were, in words: for `compile`, the regions its run compiled (`train.COMPILE_REGIONS`),
    the norms and activations for rows from before the evidence recorded them."""
    kernels = row_kernels(row)
    if kernels != 'compile': return KERNEL_WORDS[kernels]
    return COMPILE_WORDS[row.get('compile_regions') or 'compile_norms_and_activations']

def rates_from_summary(summary) -> dict[str, dict]:
    "The file's `rates` section: per measured shape and stage the library row's tokens/s, and what it is."
    out = {}
    for key, rows in rate_rows(summary).items():
        row = rows[-1]
        st = row['settings'] or {}
        how = ', '.join(x for x in ['padding-free' if st.get('padding_free') else '', 'length-grouped' if st.get('length_grouping') else '',
                                    f"micro-batches padded to a multiple of {st['pad_to_multiple_of']} tokens (optim.pad_to_multiple_of)"
                                    if st.get('pad_to_multiple_of', 1) > 1 else '',
                                    f"{st['lora_compute']} LoRA inputs" if st.get('lora_compute') else '', kernel_words(row)] if x)
        splits = sorted({(r['micro_batch'], r['grad_accum']) for r in rows}, reverse=True)
        split = (' or '.join(f"micro-batch {m} x grad-accum {g}" for m, g in splits)
                 + (' (fitted by micro_batch_fit)' if st.get('micro_batch_fit') else '')
                 + f", activation checkpointing {'on' if row['activation_checkpointing'] else 'off'}")
        kernels = ('; Mamba-2 kernels (mamba-ssm, causal-conv1d)' if row['mamba_kernels'] else "; transformers' PyTorch Mamba scan"
                   ) if row['architecture'] == 'nemotron_h' else ''
        if row['stage'] == 'dpo':
            what = (f"DPO (sigmoid + NLL, the reference model by disabling the adapter): rsi_repro.train.train_dpo as the dpo stage "
                    f"calls it with the nemotron profile's dpo settings, {SHAPE_WORDS[row['shape']]} with random weights, LoRA "
                    f"r={row['lora_r']}, {split}{kernels}; effective batch {row['effective_batch']} synthetic pairs of "
                    f"{row['mean_row_tokens']:g} tokens on average (prompt twice, chosen and rejected), real tokens per second on one "
                    f"{row['device']}; benchmarks/train_speed.py, {row['date']}")
        else:
            what = (f"SFT-shaped training (one forward and backward per row; not DPO): rsi_repro.train.train_sft as the "
                    f"stages call it, {SHAPE_WORDS[row['shape']]} with random weights, LoRA r={row['lora_r']} on the profile's "
                    f"target set, {split}, {how}{kernels}; effective batch {row['effective_batch']} of synthetic rows of "
                    f"{row['mean_row_tokens']:g} tokens on average, real tokens per second on one {row['device']}; "
                    f"benchmarks/train_speed.py, {row['date']}")
        if len(rows) > 1:
            what += (f"; the median of {len(rows)} runs measured at {commit_of(row)} (tokens/s: "
                     + ', '.join(f"{r['tokens_per_s']:,.1f} at {r['micro_batch']} x {r['grad_accum']}" for r in rows) + ")")
        note = '; '.join(dict.fromkeys(r['note'] for r in rows if r['note']))
        out[key] = {'value': round(statistics.median(r['tokens_per_s'] for r in rows), 1), 'unit': 'tokens/s', 'lora_r': row['lora_r'],
                    'what': what + (f"; {note}" if note else '')}
        if row.get('reference_tokens_per_s'):
            out[key.replace('train.dpo', 'train.dpo_reference', 1)] = {
                'value': row['reference_tokens_per_s'], 'unit': 'tokens/s', 'lora_r': row['lora_r'],
                'what': (f"the DPO reference's log-probabilities, computed once for every arm of a pair set (the SFT adapter's "
                         f"forward, no gradient): rsi_repro.train.dpo_reference, {SHAPE_WORDS[row['shape']]} with random weights; "
                         f"{row['reference_pairs']} synthetic pairs of {row['mean_row_tokens']:g} tokens on average" +
                         (f", {row['reference_batch_size']} a forward; the median of its {row['reference_timed_batches']} timed "
                          f"batches' real tokens/s after the first (a warm-up)" if row.get('reference_timed_batches') else
                          f" in {row['reference_seconds']} s, the first batch's warm-up included; real tokens per second") +
                         f" on one {row['device']}; benchmarks/train_speed.py, {row['date']}")}
    return out


def with_summary_and_rates(doc) -> dict:
    "The document with `summary` rebuilt from its runs and `rates` from the summary (`rates` before `summary`)."
    summary = summarise(doc)
    rest = {k: v for k, v in doc.items() if k not in ('rates', 'summary', 'runs')}
    return {**rest, 'rates': rates_from_summary(summary), 'summary': summary, 'runs': doc.get('runs', [])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--shape', choices=sorted(SHAPES))
    ap.add_argument('--variants', nargs='+', default=['stock-16x3', 'ours'])
    ap.add_argument('--steps', type=int, default=STEADY_STEPS + 1, help='optimiser steps per variant, the first one untimed')
    ap.add_argument('--slow-steps', type=int, default=None, help='optimiser steps of a stock variant with micro-batch < 8 (default: --steps)')
    ap.add_argument('--rows', type=int, default=480)
    ap.add_argument('--pairs', type=int, default=352, help='synthetic preference pairs for the ours-dpo variants (352: the '
                    'reference pass at 16 a forward has 21 timed batches after its first, as steady as a training rate)')
    ap.add_argument('--reference-batch', type=int, default=None, help="pairs a forward of the ours-dpo reference pass (default: the profile's dpo.reference_batch)")
    ap.add_argument('--eff', type=int, default=48, help='examples per optimiser step (the card\'s 48)')
    ap.add_argument('--r', type=int, default=768); ap.add_argument('--alpha', type=int, default=1536)
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--length-grouping-steps', type=int, default=1, help="the ours-compile-padN and ours-dpo-compile-padN variants' "
                    "optim.length_grouping_steps (Nemotron-H, which groups by length); above 1 the rows are tagged with it, so they set no rate")
    ap.add_argument('--profile-dir', default=None)
    ap.add_argument('--tag', default='', help='a label for this process\'s rows (e.g. "no mamba kernels")')
    ap.add_argument('--note', default='', help='what the summary rows of this run should say about it (e.g. the library\'s state)')
    ap.add_argument('--out', default=str(ROOT / 'benchmarks/results/train_speed.json'))
    ap.add_argument('--append', action='store_true')
    ap.add_argument('--rates-only', action='store_true', help='measure nothing: rewrite summary and rates of --out from its runs')
    a = ap.parse_args()
    out = Path(a.out)
    if a.rates_only:
        doc = with_summary_and_rates(json.loads(out.read_text()))
        out.write_text(json.dumps(doc, indent=1))
        for k, v in doc['rates'].items(): print(f"{k}: {v['value']:,.1f} {v['unit']}")
        return
    if a.shape is None: ap.error('--shape is required (or --rates-only)')
    if a.length_grouping_steps > 1: a.tag = ' '.join(filter(None, [a.tag, f'length_grouping_steps={a.length_grouping_steps}']))
    unsloth_variants = [v for v in a.variants if v.startswith('unsloth-')]
    if unsloth_variants and len(unsloth_variants) < len(a.variants):   # its patches would time the others too
        ap.error(f"run the Unsloth variants ({', '.join(unsloth_variants)}) in a process of their own")
    if unsloth_variants:
        import unsloth  # noqa: F401  (before torch, transformers, peft and trl, as Unsloth requires)
    import torch, transformers, peft
    from transformers import AutoTokenizer
    from rsi_repro.config import Lora
    from rsi_repro.train import lora_targets
    work = Path('/tmp/rsi_train_speed'); work.mkdir(exist_ok=True, parents=True)
    tok = AutoTokenizer.from_pretrained(ROOT / 'data/tiny_base')
    arch, config = build_config(a.shape, tok)
    folder = work / a.shape; folder.mkdir(exist_ok=True)
    config.save_pretrained(folder); tok.save_pretrained(folder)
    ids, masks = synthetic_rows(a.rows, a.seed)
    pairs, pair_info = work / f'pairs_{a.pairs}_{a.seed}.jsonl', {}
    if pairs.exists(): pairs.unlink()
    mix = work / f'mix_{a.rows}_{a.seed}.npz'; write_mix(mix, ids, masks)
    targets = lora_targets(Lora(r=a.r, alpha=a.alpha), arch)
    versions = {'torch': torch.__version__, 'transformers': transformers.__version__, 'peft': peft.__version__}
    for name in ('trl', 'mamba_ssm', 'causal_conv1d') + (('unsloth', 'unsloth_zoo') if unsloth_variants else ()):
        try: versions[name] = __import__(name).__version__
        except Exception as e: versions[name] = f'not installed ({type(e).__name__})'
    lengths = [len(x) for x in ids]
    gpu = torch.cuda.is_available()
    meta = {'date': time.strftime('%Y-%m-%d'), 'device': torch.cuda.get_device_name() if gpu else 'cpu',
            'gpu_gib': round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if gpu else None,
            'versions': versions, 'argv': sys.argv, 'allocator': os.environ.get('PYTORCH_CUDA_ALLOC_CONF', ''), **({'note': a.note} if a.note else {})}
    shape = {'name': a.shape, 'architecture': arch, 'lora': {'r': a.r, 'alpha': a.alpha, 'targets': targets},
             'effective_batch': a.eff, 'rows': a.rows, 'mean_row_tokens': round(sum(lengths) / len(lengths), 1), 'max_row_tokens': max(lengths),
             'supervised_fraction': round(sum(map(sum, masks)) / sum(lengths), 3)}
    liger = [v for v in a.variants if v == 'ours-liger' or (v.startswith('trl-') and not v.startswith(('trl-plain-', 'trl-dpo-')))]
    if liger and len(liger) < len(a.variants):     # Liger's patches stay in the process: they would time the others too
        ap.error(f"run the Liger variants ({', '.join(liger)}) in a process of their own, apart from {', '.join(v for v in a.variants if v not in liger)}")
    results = []
    for v in a.variants:
        print(f"== {a.shape}: {v} {a.tag}", flush=True)
        t0 = time.perf_counter()
        try:
            if v == 'kernel-check': res = kernel_check(arch)
            elif v == 'peak': res = gemm_peak()
            elif v.startswith('stock-'):
                m, g = map(int, v.split('-')[1].split('x'))
                res = stock_loop(config, arch, ids, masks, targets, a.r, a.alpha, m, g, v.endswith('-ckpt'), a.steps if m >= 8 or a.slow_steps is None else a.slow_steps, a.seed)
            elif v == 'ours': res = ours(folder, config, arch, mix, a.r, a.alpha, a.steps, a.seed, a.eff, a.profile_dir)
            elif v == 'ours-liger': res = ours(folder, config, arch, mix, a.r, a.alpha, a.steps, a.seed, a.eff, kernels='liger')
            elif v == 'ours-compile': res = ours(folder, config, arch, mix, a.r, a.alpha, a.steps, a.seed, a.eff, kernels='compile')
            elif v.startswith('ours-compile-pad'):    # ours-compile-padN: optim.pad_to_multiple_of N
                res = ours(folder, config, arch, mix, a.r, a.alpha, a.steps, a.seed, a.eff, kernels='compile', pad=int(v.removeprefix('ours-compile-pad')),
                           grouping_steps=a.length_grouping_steps)
            elif v.startswith('ours-compile-layers-pad'):   # ours-compile-layers-padN: the whole attention and MoE layers on Nemotron-H
                with compiled_layers_but_mamba():
                    res = ours(folder, config, arch, mix, a.r, a.alpha, a.steps, a.seed, a.eff, kernels='compile',
                               pad=int(v.removeprefix('ours-compile-layers-pad')))
            elif v.startswith('ours-compile-norms'):   # ours-compile-norms[-padN]: the small regions on every architecture
                pad = int(v.removeprefix('ours-compile-norms-pad')) if v.startswith('ours-compile-norms-pad') else 1
                with compiled_norms(): res = ours(folder, config, arch, mix, a.r, a.alpha, a.steps, a.seed, a.eff, kernels='compile', pad=pad)
            elif v == 'ours-indexed':
                with indexed_rows(): res = ours(folder, config, arch, mix, a.r, a.alpha, a.steps, a.seed, a.eff)
            elif v.startswith('trl-dpo-'):    # trl-dpo[-precompute]-MxG[-ckpt]: TRL's DPOTrainer, its reference in every step or precomputed
                pre = v.startswith('trl-dpo-precompute-')
                m, g = map(int, v.split('-')[3 if pre else 2].split('x'))
                if not pairs.exists(): pair_info.update(synthetic_pairs(pairs, a.pairs, a.seed, tok))
                res = trl_dpo(config, folder, arch, pairs, m, g, v.endswith('-ckpt'), a.steps, a.seed, precompute=pre)
            elif v.startswith('trl-'):        # trl-MxG[-ckpt]: TRL's SFTTrainer with Liger's kernels; trl-plain-MxG[-ckpt]: without
                plain = v.startswith('trl-plain-')
                m, g = map(int, v.split('-')[2 if plain else 1].split('x'))
                res = trl_sft(config, tok, arch, ids, masks, targets, a.r, a.alpha, m, g, v.endswith('-ckpt'), a.steps, a.seed, liger=not plain)
            elif v.startswith('unsloth-dpo-'):   # unsloth-dpo-MxG[-ckpt]: Unsloth's model and its rewritten DPOTrainer
                m, g = map(int, v.split('-')[2].split('x'))
                if not pairs.exists(): pair_info.update(synthetic_pairs(pairs, a.pairs, a.seed, tok))
                res = unsloth_dpo(folder, config, arch, pairs, m, g, v.endswith('-ckpt'), a.steps, a.seed)
            elif v.startswith('unsloth-'):     # unsloth-MxG[-ckpt]
                m, g = map(int, v.split('-')[1].split('x'))
                res = unsloth_sft(folder, config, tok, arch, ids, masks, targets, a.r, a.alpha, m, g, v.endswith('-ckpt'), a.steps, a.seed)
            elif v.startswith('ours-dpo-compile-pad'):   # ours-dpo-compile-padN: the profile's dpo settings, optim.kernels compile, padded to N
                if not pairs.exists(): pair_info.update(synthetic_pairs(pairs, a.pairs, a.seed, tok))
                res = ours_dpo(folder, config, arch, pairs, a.steps, a.seed, None, a.reference_batch, kernels='compile',
                               pad=int(v.removeprefix('ours-dpo-compile-pad')), grouping_steps=a.length_grouping_steps)
            elif v.startswith('ours-dpo'):     # ours-dpo: the profile's dpo split; ours-dpo-MxG[-ckpt]: another split
                split = None
                if v != 'ours-dpo':
                    m, g = map(int, v.split('-')[2].split('x')); split = (m, g, v.endswith('-ckpt'))
                if not pairs.exists(): pair_info.update(synthetic_pairs(pairs, a.pairs, a.seed, tok))
                res = ours_dpo(folder, config, arch, pairs, a.steps, a.seed, split, a.reference_batch)
            else: raise SystemExit(f"unknown variant {v}")
        except torch.OutOfMemoryError as e:
            res = {'error': f'out of memory: {str(e).splitlines()[0]}', **peak()}; free()
        except Exception as e:
            import traceback; traceback.print_exc()
            res = {'error': f'{type(e).__name__}: {e}'}; free()
        res = {'variant': v, 'tag': a.tag, 'seconds': round(time.perf_counter() - t0, 1), **res}
        if 'step_seconds' in res: res['tokens_per_s'], res['rate_of'] = rate(res), RATE_OF
        if 'step_padded_tokens' in res:
            res['padding_fraction'] = round(1 - sum(res['step_tokens']) / sum(res['step_padded_tokens']), 3)
        elif 'padded_tokens' in res:
            res['padding_fraction'] = round(1 - res['training_tokens'] / res['padded_tokens'], 3)
        results.append(res)
        print(json.dumps({k: res[k] for k in res if k not in ('step_tokens', 'step_padded_tokens', 'losses')}), flush=True)
    doc = json.loads(out.read_text()) if (a.append and out.exists()) else {}
    if pair_info: shape['dpo_pairs'] = pair_info
    doc.setdefault('runs', []).append({'meta': meta, 'shape': shape, 'results': results})
    doc = with_summary_and_rates(doc)
    out.parent.mkdir(parents=True, exist_ok=True); out.write_text(json.dumps(doc, indent=1))
    print(f"\n{'shape':<20} {'variant':<16} {'tag':<18} {'split':<9} {'ckpt':<5} {'tok/s':>9} {'pad':>6} {'peak GiB':>9}")
    for run in doc['runs']:
        for r in run['results']:
            if r['variant'] == 'peak':
                print(f"{'':<20} {'peak':<16} {r.get('tag',''):<18} bf16 matrix products: {r.get('gemm_tflops', r.get('error'))} TFLOP/s")
                continue
            if r['variant'] == 'kernel-check':
                print(f"{run['shape']['name']:<20} {'kernel-check':<16} {r.get('tag',''):<18} kernels={r.get('kernels')} "
                      f"grad rel err max {r.get('grad_rel_err_max')} loss {r.get('loss_kernels')} vs {r.get('loss_torch')}")
                continue
            split = f"{r.get('micro_batch')}x{r.get('grad_accum')}" if 'micro_batch' in r else '-'
            print(f"{run['shape']['name']:<20} {r['variant']:<16} {r.get('tag',''):<18} {split:<9} {str(r.get('activation_checkpointing', '-')):<5} "
                  f"{r.get('tokens_per_s') or r.get('error', '-')!s:>9} {r.get('padding_fraction', '-')!s:>6} {r.get('peak_gib', '-')!s:>9}")


if __name__ == '__main__':
    main()
