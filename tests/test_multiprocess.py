"""Several processes on one CPU, as several GPUs of a node would run them: a stage's training in two gloo ranks
started from inside the stage (one adapter, one evidence file, written by rank 0), and its generation spread over
two engine processes (the same shards and rows as one engine; a kill loses and repeats nothing)."""
import json, os, signal, subprocess, sys, textwrap
from pathlib import Path

import pytest

from conftest import WARM_PYTHON

from rsi_repro.compute import COMPUTE_ENV, compute_environment
from rsi_repro.config import Compute, load_profile
from rsi_repro.io import TIMINGS_ENV, environment, read_jsonl, sha256_file
from rsi_repro.layout import ADAPTER, EVIDENCE
from rsi_repro.pipeline import run

ROOT = Path(__file__).resolve().parents[1]

def small(run_name: str, cpu_processes: int, nodes: int = 1) -> str:
    over = ', nodes: 2, node_launch: loopback' if nodes > 1 else ''
    return textwrap.dedent(f"""\
        extends: ../../configs/tiny.yaml
        run: {run_name}
        compute: {{cpu_processes: {cpu_processes}{over}}}
        serving: {{max_new_tokens: 16, shard_size: 2, batch_size: 2}}
        sft:
          corpora:
            - {{name: tulu3, source: data/corpora/tulu_sample.jsonl, bands: [{{start: 0, stop: 16}}]}}
            - {{name: smoltalk, source: data/corpora/smoltalk_sample.jsonl, bands: [{{start: 0, stop: 16}}]}}
        dpo:
          corpus: {{name: ultrafeedback, source: data/corpora/ultrafeedback_sample.jsonl, bands: [{{start: 0, stop: 32}}]}}
          grid: [{{name: b010, beta: 0.1, lr: 5.0e-4}}]
          audit: {{start: 1400, stop: 1404}}
          max_tool_leak_rate: 1.0
        stages:
          - {{name: serve, notebook: serve}}
          - {{name: sft, notebook: sft}}
          - {{name: dpo, notebook: dpo, needs: [sft]}}
        """)

@pytest.fixture(scope='module')
def runs():
    """The same three stages in one process, in two, and in one on each of two loopback nodes, each from a clean folder.
    One process a node: two per node are `tests/test_nodes.py`'s (four ranks); here the stages' path over nodes, at half
    the processes (the nodes' run 129 s with two a node, 63 s with one, alone on two cores)."""
    d = ROOT / 'outputs' / '_test_profiles'; d.mkdir(parents=True, exist_ok=True)
    out = {}
    for n in (1, 2, 'nodes'):
        name = f'ci-processes-{n}'
        p = d / f'{name}.yaml'; p.write_text(small(name, 1, nodes=2) if n == 'nodes' else small(name, n))
        prof = load_profile(p)
        subprocess.run(['rm', '-rf', str(prof.run_dir)], check=True)
        timings = prof.run_dir.parent / f'{name}.timings.jsonl'; timings.unlink(missing_ok=True)
        with environment({TIMINGS_ENV: str(timings)}):
            before = dict(os.environ)
            run(p, log=lambda *a: None)
            assert dict(os.environ) == before, "a run changed its caller's environment (only its stages' kernels get the profile's)"
        out[n] = prof
    yield out
    for prof in out.values():
        subprocess.run(['rm', '-rf', str(prof.run_dir)], check=True); Path(prof.path).unlink(missing_ok=True)
        prof.run_dir.parent.joinpath(f'{prof.run_dir.name}.timings.jsonl').unlink(missing_ok=True)

def timings(prof) -> list[dict]:
    return read_jsonl(prof.run_dir.parent / f'{prof.run_dir.name}.timings.jsonl')

@pytest.mark.slow
def test_training_stages_train_in_two_ranks_with_one_adapter_and_one_evidence(runs):
    two = runs[2].run_dir
    for stage in ('sft', 'dpo'):
        adapters = sorted(p.parent for p in two.joinpath(stage).rglob(EVIDENCE))
        ev = [json.loads((a / EVIDENCE).read_text()) for a in adapters]
        assert ev and {e['world_size'] for e in ev} == {2}, (stage, ev)
        for a, e in zip(adapters, ev):
            assert e['effective_batch'] == 16 and (e['micro_batch'], e['grad_accum']) == (8, 1)   # the profile's 8 x 2, shared
            assert (a / 'adapter_model.safetensors').exists() and (a / 'chat_template.jinja').exists()
        one = sorted(p.parent.relative_to(runs[1].run_dir) for p in runs[1].run_dir.joinpath(stage).rglob(EVIDENCE))
        assert [a.relative_to(two) for a in adapters] == one          # the same adapter folders as one process writes
    assert not list(two.rglob('*.launch.log'))                        # kept only when ranks fail

@pytest.mark.slow
def test_generation_over_two_engines_gives_the_rows_of_one(runs):
    "The base's serving answers (no training upstream): the same shards, and rows equal token for token."
    shards = lambda prof: {p.relative_to(prof.run_dir): read_jsonl(p) for p in prof.run_dir.joinpath('serve').rglob('shard-*.jsonl')}
    one, two = shards(runs[1]), shards(runs[2])
    assert len(one) == 4 and one == two

@pytest.mark.slow
def test_a_run_imports_its_engines_once_and_every_stage_uses_them(runs):
    "The run's two engine processes serve all three stages' kernels, and end with the run; one process starts none."
    loads = [t for t in timings(runs[2]) if t['part'] == 'engine_load']
    kernels = {t['pid'] for t in loads}
    assert len(kernels) == 3, loads                                   # serve, sft, dpo: a kernel each
    engines = {tuple(t['engines']) for t in loads}
    assert len(engines) == 1 and len(next(iter(engines))) == 2, engines   # the same two processes every time
    assert all(t['shared'] for t in timings(runs[2]) if t['part'] == 'engine_processes')
    assert [t['devices'] for t in timings(runs[2]) if t['part'] == 'engine_host'] == [2]
    for pid in next(iter(engines)):
        with pytest.raises(ProcessLookupError): os.kill(pid, 0)
    assert not [t for t in timings(runs[1]) if t['part'] in ('engine_host', 'engine_processes')]

KILL_AFTER = """
import os, signal, sys
from dataclasses import replace
import rsi_repro.generate as g
from rsi_repro.config import load_profile
from rsi_repro.generate import generate, load_requests
from rsi_repro.eval_plan import model_ref
written, kill_at = [], int(sys.argv[3])
real = g.write_jsonl
def dying(path, rows):
    real(path, rows); written.append(path)
    if len(written) == kill_at: os.kill(os.getpid(), signal.SIGKILL)
g.write_jsonl = dying
if __name__ == '__main__':
    p = load_profile(sys.argv[1])
    reqs = load_requests(p.resolve(p.prompts['serve']))
    generate(reqs, model_ref(p), replace(p.serving, shard_size=1, max_new_tokens=12), sys.argv[2], progress=False)
"""

@pytest.mark.slow
def test_spread_generation_killed_part_way_resumes_losing_and_repeating_nothing(tmp_path):
    script, out, clean = tmp_path / 'gen.py', tmp_path / 'shards', tmp_path / 'clean'
    script.write_text(KILL_AFTER)
    env = {**os.environ, **compute_environment(Compute(cpu_processes=2))}
    killed = subprocess.run([*WARM_PYTHON, str(script), str(ROOT / 'configs/tiny.yaml'), str(out), '3'], cwd=ROOT, env=env)
    assert killed.returncode == -signal.SIGKILL
    before = {s.name: (s.stat().st_mtime_ns, sha256_file(s)) for s in out.glob('plan-*/shard-*.jsonl')}
    assert 3 <= len(before) < 8                                                  # some shards done, not all
    done = subprocess.run([*WARM_PYTHON, str(script), str(ROOT / 'configs/tiny.yaml'), str(out), '0'], cwd=ROOT, env=env)
    assert done.returncode == 0
    after = {s.name: (s.stat().st_mtime_ns, sha256_file(s)) for s in out.glob('plan-*/shard-*.jsonl')}
    assert len(after) == 8 and all(after[k] == v for k, v in before.items())     # finished shards neither lost nor redone
    one = subprocess.run([*WARM_PYTHON, str(script), str(ROOT / 'configs/tiny.yaml'), str(clean), '0'], cwd=ROOT,
                         env={k: v for k, v in os.environ.items() if k != COMPUTE_ENV})
    assert one.returncode == 0
    rows = lambda d: [r for s in sorted(d.glob('plan-*/shard-*.jsonl')) for r in read_jsonl(s)]
    assert rows(out) == rows(clean)                                             # row for row, as one uninterrupted engine


@pytest.mark.slow
def test_stages_over_two_loopback_nodes_give_the_one_process_adapters_and_rows(runs):
    """The sft and dpo stages in two gloo ranks over two nodes (torchrun agents meeting at a loopback c10d rendezvous),
    and the serve stage's generation spread over both nodes: the SFT adapters of one process to within the tolerance
    `tests/test_nodes.py` states, the same rows, and nothing of the nodes' left in the run folder. DPO's adapters are
    not compared: TRL's NLL term is a token mean per micro-batch, and the ranks group the step's 16 pairs into other
    micro-batches than one process does (the sigmoid term, a mean per pair, is the same either way)."""
    import torch
    from safetensors.torch import load_file
    from test_nodes import ATOL, RTOL
    one, nodes = runs[1].run_dir, runs['nodes'].run_dir
    for stage in ('sft', 'dpo'):
        for ev_path in sorted(one.joinpath(stage).rglob(EVIDENCE)):
            other = nodes / ev_path.relative_to(one)
            ev = json.loads(other.read_text())
            assert ev['world_size'] == 2 and ev['effective_batch'] == 16, (other, ev)
            if stage == 'dpo': continue
            a, b = load_file(ev_path.parent / 'adapter_model.safetensors'), load_file(other.parent / 'adapter_model.safetensors')
            for k in a: torch.testing.assert_close(b[k], a[k], atol=ATOL, rtol=RTOL, msg=lambda m: f"{other.parent}: {k}: {m}")
    shards = lambda d: {p.relative_to(d): read_jsonl(p) for p in d.joinpath('serve').rglob('shard-*.jsonl')}
    assert shards(nodes) == shards(one) and len(shards(one)) == 4
    assert not [p for p in nodes.rglob('.*node*')]                   # the nodes' call files and logs go when all succeed
