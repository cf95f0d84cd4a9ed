"""What only a GPU machine can show (marked `gpu`, skipped on a CPU; `pytest -m gpu` there): generation through vLLM
in an engine process of its own (greedy rows against transformers', a LoRA adapter served without merging, the GPU's
memory handed back when the engines close), training on CUDA, and, with two GPUs, the same shards and rows from two
engines as from one, and training in two ranks."""
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

def cuda_gpus() -> int:
    try: import torch
    except ImportError: return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0

def has_vllm() -> bool:
    try: import vllm  # noqa: F401
    except ImportError: return False
    return True

needs_vllm = pytest.mark.skipif(not has_vllm(), reason='vLLM is not installed here')
two_gpus = pytest.mark.skipif(cuda_gpus() < 2, reason='needs two GPUs')

def requests(n=16):
    from rsi_repro.io import read_jsonl
    return [{'id': r['id'], 'messages': [{'role': 'user', 'content': r['prompt']}]} for r in read_jsonl(ROOT / 'data/prompts/open_chat.jsonl')[:n]]

def serving(**kw):
    from rsi_repro.config import Serving, VLLMSettings
    return Serving(max_new_tokens=32, max_input_tokens=256, batch_size=16, shard_size=8,
                   vllm=VLLMSettings(max_lora_rank=64, kv_cache_gib=2, enforce_eager=True, batch_invariant=True, gpu_memory_utilization=0.3), **kw)

def engine_pids() -> set[int]:
    "This process's generation engines and every process they started (vLLM's engine core runs in one of its own)."
    import psutil
    from rsi_repro.engines import _WORKERS
    procs = [psutil.Process(w.proc.pid) for ws in _WORKERS.values() for w in ws]
    return {p.pid for q in procs for p in [q, *q.children(recursive=True)]}

def gpu_pids() -> set[int]:
    "Processes holding memory on any GPU, from the driver: other runs sharing the GPU do not blur it, as free memory would."
    import pynvml
    pynvml.nvmlInit()
    return {p.pid for i in range(pynvml.nvmlDeviceGetCount())
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(i))}

def adapter(tmp_path, r=16, base='data/tiny_base', architecture='llama'):
    "A seeded LoRA of rank r on a base with non-zero B, saved as the pipeline saves one."
    import torch
    from peft import get_peft_model
    from rsi_repro.config import Lora
    from rsi_repro.generate import ModelRef, load_model
    from rsi_repro.train import lora_config
    torch.manual_seed(0)
    net = get_peft_model(load_model(ModelRef(str(ROOT / base)), 'cpu'), lora_config(Lora(r=r, alpha=2 * r), architecture))
    with torch.no_grad():
        for n, p in net.named_parameters():
            if 'lora_B' in n: p.normal_(0, 0.02)
    out = tmp_path / f'adapter-{architecture}-r{r}'; net.save_pretrained(out)
    return out


@pytest.mark.gpu
@needs_vllm
def test_vllm_in_an_engine_process_matches_transformers_greedy_and_frees_the_gpu(tmp_path):
    import torch
    from rsi_repro.engines import _WORKERS
    from rsi_repro.generate import ModelRef, generate, release_engines
    ref = ModelRef(str(ROOT / 'data/tiny_base'))
    hf = generate(requests(), ref, serving(backend='hf'), tmp_path / 'hf', progress=False)
    vl = generate(requests(), ref, serving(backend='vllm'), tmp_path / 'vllm', progress=False)
    assert list(vl.id) == list(hf.id) and set(vl.finish_reason) <= {'stop', 'length'}
    same = (vl.response == hf.response).mean()
    assert same >= 0.75, f"only {same:.0%} of greedy rows equal transformers' (near-ties decided by rounding differ)"
    assert _WORKERS, "vLLM ran in this process instead of an engine process"
    engines, free_open = engine_pids(), torch.cuda.mem_get_info()[0]
    seen = engines & gpu_pids()
    kept = {w.proc.pid for ws in _WORKERS.values() for w in ws}
    release_engines(keep_processes=True)          # as before training: the engines go, their processes stay
    assert kept == {w.proc.pid for ws in _WORKERS.values() for w in ws} and all(w.proc.is_alive() for ws in _WORKERS.values() for w in ws)
    def freed(what):
        if seen: assert not engines & gpu_pids(), f"an engine process still holds GPU memory after the engines {what}"
        else:    # the driver names processes outside this container's namespace: the engines' KV cache must come back
            returned = torch.cuda.mem_get_info()[0] - free_open
            assert returned >= 0.9 * serving().vllm.kv_cache_gib * 2**30, f"only {returned / 2**30:.1f} GiB came back after the engines {what}"
    freed('unloaded (their processes kept)')
    vl2 = generate(requests(), ref, serving(backend='vllm'), tmp_path / 'vllm-again', progress=False)   # loads where it was
    assert list(vl2.response) == list(vl.response) and kept == {w.proc.pid for ws in _WORKERS.values() for w in ws}
    engines = engine_pids()
    release_engines()
    freed('closed')


@pytest.mark.gpu
@needs_vllm
def test_vllm_serves_a_servable_rank_as_lora_and_an_unservable_one_merged(tmp_path):
    from rsi_repro.generate import ModelRef, generate, release_engines, vllm_lora_plan
    base = str(ROOT / 'data/tiny_base')
    lora = ModelRef(base, adapter=str(adapter(tmp_path, 16)), dtype='bfloat16')    # vLLM's LoRA kernels take 16-bit weights
    assert vllm_lora_plan(lora, 64) == 'lora'
    a = generate(requests(8), lora, serving(backend='vllm'), tmp_path / 'lora', progress=False)
    b = generate(requests(8), lora, serving(backend='hf'), tmp_path / 'hf', progress=False)
    assert (a.response == b.response).mean() >= 0.5
    merged = ModelRef(base, adapter=str(adapter(tmp_path, 768)), merge=True)
    c = generate(requests(8), merged, serving(backend='vllm', merge_lora=True), tmp_path / 'merged', progress=False)
    assert len(c) == 8 and list((tmp_path / 'merged').glob('merged-*/config.json'))    # merged once, beside the generations
    release_engines()


@pytest.mark.gpu
@needs_vllm
@pytest.mark.parametrize('base,architecture,eager', [('data/tiny_base', 'llama', True), ('data/nemotron_h_small', 'nemotron_h', True),
                                                      ('data/tiny_base', 'llama', False)], ids=['llama', 'nemotron_h', 'llama-cuda-graphs'])
def test_an_engine_given_another_checkpoints_weights_answers_as_a_new_engine_on_it(tmp_path, monkeypatch, base, architecture, eager):
    """A merged checkpoint of the base the engine holds is loaded into that engine (vLLM's reload_weights, its prefix cache
    emptied): its greedy rows equal an engine started on it, differ from the base's, and the base's come back after. Also
    with CUDA graphs, as the nemotron profile serves: the graphs captured on the first weights must read the reloaded ones."""
    from rsi_repro.generate import ModelRef, generate, release_engines
    from rsi_repro.io import TIMINGS_ENV, read_jsonl
    monkeypatch.setenv(TIMINGS_ENV, str(tmp_path / 'timings.jsonl'))
    ref = ModelRef(str(ROOT / base), dtype='bfloat16', merge=True)
    merged = ModelRef(ref.base, adapter=str(adapter(tmp_path, 16, base, architecture)), dtype='bfloat16', merge=True)
    from dataclasses import replace
    srv = serving(backend='vllm', merge_lora=True)
    srv = replace(srv, vllm=replace(srv.vllm, batch_invariant=False, enforce_eager=eager))   # vLLM refuses batch_invariant for Mamba layers
    reqs = requests()
    first = generate(reqs, ref, srv, tmp_path / 'base', progress=False)
    swapped = generate(reqs, merged, srv, tmp_path / 'merged', progress=False)     # the same prompts: a stale prefix cache would show
    back = generate(reqs, ref, srv, tmp_path / 'base-again', progress=False)
    release_engines()
    fresh = generate(reqs, merged, srv, tmp_path / 'merged-fresh', progress=False)
    release_engines()
    hows = [h for t in read_jsonl(tmp_path / 'timings.jsonl') if t['part'] == 'engine_load' for h in t['how']]
    assert hows == ['started', 'reloaded', 'reloaded', 'started'], hows
    rows = lambda df: df[['id', 'response', 'finish_reason', 'new_tokens']].to_dict('records')
    assert rows(swapped) == rows(fresh)
    assert rows(back) == rows(first)
    assert rows(swapped) != rows(first), "the adapter changed no row: the reload is not shown to load anything"


@pytest.mark.gpu
def test_training_on_cuda_records_one_gpu_and_bf16(tmp_path):
    from rsi_repro.config import Lora, Optim
    from rsi_repro.corpora import chat_messages, write_sft_mix
    from rsi_repro.generate import ModelRef, load_tokenizer
    from rsi_repro.io import read_jsonl
    from rsi_repro.train import train_sft
    ref = ModelRef(str(ROOT / 'data/tiny_base'))
    rows = read_jsonl(ROOT / 'data/corpora/tulu_sample.jsonl')[:32]
    mix = write_sft_mix([(r['id'], chat_messages(r, r['id'])) for r in rows], load_tokenizer(ref), 256, tmp_path / 'sft.npz')
    ev = train_sft(ref, 'llama', mix.path, Lora(r=8, alpha=16), Optim(lr=1e-3, micro_batch=4, grad_accum=2, seq_len=256, seed=0, steps=3,
                   bf16=True), tmp_path / 'adapter', tag='gpu', report_to=[])
    from rsi_repro.compute import processes
    assert ev['gpu_count'] == ev['world_size'] == processes().count     # every visible GPU, one rank each
    assert (ev['precision'], ev['steps'], ev['effective_batch']) == ('bf16', 3, 8)


@pytest.mark.gpu
@needs_vllm
def test_engines_sharing_one_gpu_give_the_rows_of_one_engine(tmp_path, monkeypatch):
    """Three vLLM engines side by side on one GPU (serving.vllm.engines_per_gpu), started together, each with a
    fixed cache: every shard's rows equal one engine's (each shard is one engine's batch either way), in the same
    plan folder."""
    from dataclasses import replace
    from rsi_repro.compute import Processes
    from rsi_repro.generate import ModelRef, generate, make_backend, plan_dir, release_engines
    from rsi_repro.io import TIMINGS_ENV, read_jsonl
    monkeypatch.setenv(TIMINGS_ENV, str(tmp_path / 'timings.jsonl'))
    ref, srv = ModelRef(str(ROOT / 'data/tiny_base'), dtype='bfloat16'), serving(backend='vllm')
    gpu = Processes(1, ('0',), 1)
    one = generate(requests(), ref, srv, tmp_path / 'one', progress=False, backend_obj=make_backend(ref, srv, procs=gpu))
    release_engines()
    three = replace(srv, vllm=replace(srv.vllm, engines_per_gpu=3, gpu_memory_utilization=0.1))
    many = generate(requests(), ref, three, tmp_path / 'three', progress=False, backend_obj=make_backend(ref, three, procs=gpu))
    release_engines()
    assert one.to_dict('records') == many.to_dict('records')
    assert [p.name for p in (tmp_path / 'one').iterdir()] == [p.name for p in (tmp_path / 'three').iterdir()]   # one plan
    loads = [t for t in read_jsonl(tmp_path / 'timings.jsonl') if t['part'] == 'engine_load']
    assert [len(t['engines']) for t in loads] == [1, 3] and loads[1]['how'] == ['started'] * 3, loads

@pytest.mark.gpu
@two_gpus
def test_two_gpus_generate_the_rows_of_one(tmp_path):
    from rsi_repro.compute import Processes
    from rsi_repro.generate import ModelRef, generate, make_backend, release_engines
    ref, srv = ModelRef(str(ROOT / 'data/tiny_base')), serving(backend='hf')
    one = generate(requests(), ref, srv, tmp_path / 'one', progress=False, backend_obj=make_backend(ref, srv, procs=Processes(1, ('0',), 1)))
    release_engines()
    two = generate(requests(), ref, srv, tmp_path / 'two', progress=False, backend_obj=make_backend(ref, srv, procs=Processes(2, ('0', '1'), 2)))
    release_engines()
    assert one.to_dict('records') == two.to_dict('records')


@pytest.mark.gpu
@two_gpus
def test_two_gpus_train_in_two_ranks_with_one_evidence(tmp_path, monkeypatch):
    from rsi_repro.compute import COMPUTE_ENV, compute_environment
    from rsi_repro.config import Compute
    monkeypatch.setenv(COMPUTE_ENV, compute_environment(Compute(max_gpus=2))[COMPUTE_ENV])
    from rsi_repro.config import Lora, Optim
    from rsi_repro.corpora import chat_messages, write_sft_mix
    from rsi_repro.generate import ModelRef, load_tokenizer
    from rsi_repro.io import read_jsonl
    from rsi_repro.train import train_sft
    ref = ModelRef(str(ROOT / 'data/tiny_base'))
    rows = read_jsonl(ROOT / 'data/corpora/tulu_sample.jsonl')[:32]
    mix = write_sft_mix([(r['id'], chat_messages(r, r['id'])) for r in rows], load_tokenizer(ref), 256, tmp_path / 'sft.npz')
    ev = train_sft(ref, 'llama', mix.path, Lora(r=8, alpha=16), Optim(lr=1e-3, micro_batch=4, grad_accum=2, seq_len=256, seed=0, steps=3,
                   bf16=True), tmp_path / 'adapter', tag='gpu2', report_to=[])
    assert (ev['world_size'], ev['gpu_count'], ev['effective_batch']) == (2, 2, 8)
    assert json.loads((tmp_path / 'adapter/training_evidence.json').read_text())['world_size'] == 2
