"""Two nodes on this machine: two torchrun agents (`--nnodes=2`), each with two gloo ranks, meeting at a c10d rendezvous
on a loopback port, each with its own scratch folder. A tiny SFT run over them ends with the one-process adapter (within
the tolerance below), a node killed part-way fails the run naming that node, and the rerun resumes from the last
checkpoint; generation over two nodes gives the rows of one process, and a killed node loses none of the shards the
other finished. Under Slurm, the same launch is one srun step (its commands are checked in `nbs/00f_nodes.ipynb`)."""
import contextlib, json, os, re, signal, threading, time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rsi_repro.compute import COMPUTE_ENV, LaunchFailed, compute_environment
from rsi_repro.config import Compute, Lora, Optim, Serving
from rsi_repro.corpora import write_sft_mix
from rsi_repro.generate import ModelRef, generate, load_requests, load_tokenizer
from rsi_repro.io import environment, sha256_file
from rsi_repro.nodes import NODE_ENV
from rsi_repro.train import train_sft

ROOT = Path(__file__).resolve().parents[1]
BASE = ModelRef(str(ROOT / 'data/tiny_base'))
TWO_NODES = compute_environment(Compute(nodes=2, node_launch='loopback', cpu_processes=2))
# 40 steps of 4 examples (1 per rank over 4 ranks), a checkpoint every 2: the kill lands well before the end
OPTIM = Optim(lr=2e-3, micro_batch=2, grad_accum=2, seq_len=128, seed=3, steps=40, length_grouping=True, checkpoint_steps=2)
# The ranks' gradients are averaged by gloo's all-reduce in another order than one process sums them: float32 rounding,
# which 40 Adam steps carry into the weights. The adapter of four ranks over two nodes matches one process to this:
ATOL, RTOL = 2e-4, 1e-3


@contextlib.contextmanager
def one_process():
    "As outside a run: no compute settings, one process."
    saved = os.environ.pop(COMPUTE_ENV, None)
    try: yield
    finally:
        if saved is not None: os.environ[COMPUTE_ENV] = saved


def node_processes(node: int, count: int = 2) -> list[int]:
    "The pids of every process of one loopback node (its agent and its ranks): the ones whose environment names it."
    mine = f"{NODE_ENV}={node}/{count}".encode()
    found = []
    for p in Path('/proc').iterdir():
        if p.name.isdigit():
            try:
                if mine in p.joinpath('environ').read_bytes().split(b'\0'): found.append(int(p.name))
            except OSError: pass
    return found


def kill_node_when(node: int, ready) -> threading.Thread:
    "Kill every process of `node` outright, as a machine that dies, once `ready()` holds."
    def watch():
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not ready(): time.sleep(0.02)
        for pid in node_processes(node):
            try: os.kill(pid, signal.SIGKILL)
            except ProcessLookupError: pass
    t = threading.Thread(target=watch, daemon=True); t.start(); return t


@pytest.fixture(scope='module')
def sft_data(tmp_path_factory):
    d = tmp_path_factory.mktemp('nodes')
    convs = [[{'role': 'user', 'content': f'Name module number {i}.'}, {'role': 'assistant', 'content': f'Module {i} is os{"." * (i % 5)}'}]
             for i in range(24)]
    write_sft_mix([(f's{i}', c) for i, c in enumerate(convs)], load_tokenizer(BASE), 128, d / 'sft.npz')
    return d / 'sft.npz'


def train(data: Path, out: Path) -> dict:
    return train_sft(BASE, 'llama', data, Lora(r=4, alpha=8), OPTIM, out, tag='t', report_to=[])


@pytest.mark.slow
def test_sft_over_two_nodes_killed_and_resumed_ends_with_the_one_process_adapter(sft_data, tmp_path):
    one, nodes = tmp_path / 'one', tmp_path / 'nodes'
    with one_process(): ev_one = train(sft_data, one)
    with environment(TWO_NODES):
        killer = kill_node_when(1, lambda: any(nodes.glob('checkpoint-*/.complete')))
        with pytest.raises(LaunchFailed) as failed: train(sft_data, nodes)
        killer.join()
        line = str(failed.value)
        assert '\n' not in line and re.search(r"training t: node 1 of 2 was killed \(SIGKILL\) \(4 process\(es\) on 2 nodes, each on the CPU\)", line), line
        assert (nodes.parent / 'nodes.launch.log').exists() and f"every node's log: {nodes.parent / '.nodes.nodes'}" in line
        assert not (nodes / 'training_evidence.json').exists()
        ev = train(sft_data, nodes)                                   # the plain rerun
    assert ev['world_size'] == 4 and (ev['micro_batch'], ev['grad_accum'], ev['effective_batch']) == (1, 1, 4)
    assert ev['checkpoints']['resumed_from_step'] >= 2, ev['checkpoints']
    assert (ev['steps'], ev['training_tokens'], ev['supervised_tokens']) == (ev_one['steps'], ev_one['training_tokens'], ev_one['supervised_tokens'])
    a, b = load_file(one / 'adapter_model.safetensors'), load_file(nodes / 'adapter_model.safetensors')
    assert sorted(a) == sorted(b)
    for k in a: torch.testing.assert_close(b[k], a[k], atol=ATOL, rtol=RTOL, msg=lambda m: f"{k}: {m}")
    assert not (nodes.parent / '.nodes.nodes').exists()               # the nodes' call file and logs go when all succeed
    assert sorted(p.name for p in nodes.iterdir() if p.name.startswith('.')) == []


@pytest.mark.slow
def test_generation_over_two_nodes_gives_the_rows_of_one_and_a_killed_node_loses_no_finished_shard(tmp_path):
    requests = load_requests(ROOT / 'data/prompts/serve.jsonl')[:8]
    serving = Serving(max_new_tokens=12, shard_size=1, batch_size=1)
    with one_process(): one = generate(requests, BASE, serving, tmp_path / 'one', progress=False)
    out = tmp_path / 'nodes'
    with environment(compute_environment(Compute(nodes=2, node_launch='loopback'))):
        done_by_0 = lambda: len(list(out.glob('plan-*/.node-jobs/job-*.json'))) >= 1
        killer = kill_node_when(1, done_by_0)
        with pytest.raises(LaunchFailed, match=r"generating base: node 1 of 2 was killed \(SIGKILL\)"):
            generate(requests, BASE, serving, out, progress=False)
        killer.join()
        kept = {p.name: sha256_file(p) for p in out.glob('plan-*/shard-*.jsonl')}
        assert 1 <= len(kept) < 8                                     # the jobs that came back became shards
        rows = generate(requests, BASE, serving, out, progress=False)
    assert all(sha256_file(p) == kept[p.name] for p in out.glob('plan-*/shard-*.jsonl') if p.name in kept)   # written once
    assert rows.to_dict('records') == one.to_dict('records')          # row for row, token for token
    assert not list(out.glob('plan-*/.*'))                            # nothing of the nodes' left beside the shards


def test_a_dry_run_in_a_slurm_allocation_prints_what_each_node_runs():
    "Two nodes of eight GPUs as Slurm describes them to the job: the srun step and each node's command, nothing started."
    import subprocess, sys
    job = {'SLURM_JOB_ID': '4242', 'SLURM_JOB_NODELIST': 'gpu[07-08]', 'SLURM_NNODES': '2', 'SLURM_GPUS_ON_NODE': '8'}
    env = {k: v for k, v in os.environ.items() if not k.startswith('SLURM_') and k != COMPUTE_ENV}
    r = subprocess.run([sys.executable, '-m', 'rsi_repro.cli', 'run', '--dry-run', 'configs/nemotron.yaml'], cwd=ROOT,
                       env={**env, **job}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('launch over'))
    assert lines[start].startswith('launch over 2 nodes (gpu07, gpu08; srun), 8 process(es) each on 8 GPUs')
    train, gen = lines[start + 1], lines[start + 4]
    assert train.startswith('  training: srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --nodelist=gpu07,gpu08 --kill-on-bad-exit=1')
    assert '--nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=gpu07:29400' in train
    for node in (0, 1):                        # the same agent on each node: the rendezvous, not the command, numbers them
        each = lines[start + 2 + node]
        assert each.startswith(f"    node {node} of 2 (gpu0{7 + node}): RSI_REPRO_NODE=slurm SLURM_NODEID={node} ")
        assert each.split(' SLURM_NODEID=')[1][2:].split('  #')[0] == train.split('RSI_REPRO_NODE=slurm ')[1]
    assert gen.startswith('  generation: srun --nodes=2') and 'jobs 1, 3, 5' in lines[start + 6]
    outside = subprocess.run([sys.executable, '-m', 'rsi_repro.cli', 'run', '--dry-run', 'configs/nemotron.yaml'], cwd=ROOT,
                             env={**env, COMPUTE_ENV: ''}, capture_output=True, text=True, timeout=300)
    assert 'launch over' not in outside.stdout                        # one node: no launch lines
