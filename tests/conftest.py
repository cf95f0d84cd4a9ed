import json, os, shutil, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = ROOT / 'benchmarks' / 'results' / 'pytest_durations.json'   # each file's seconds in the last measured run
SHARED_RUN = ('test_pipeline.py', 'test_pipeline_folder.py', 'test_run_trust.py', 'test_recompute.py')   # the files that read finished_run below
PER_TEST = ('test_stage_notebooks.py',)     # in the study run (-m study), each of its tests goes to whichever worker is free
os.environ.setdefault('HF_HUB_OFFLINE', '1')
os.environ.setdefault('TRANSFORMERS_OFFLINE', '1')
os.environ.setdefault('HF_DATASETS_OFFLINE', '1')
os.environ.setdefault('TOKENIZERS_PARALLELISM', 'false')

def pytest_configure(config):
    config.addinivalue_line('markers', 'gpu: needs a CUDA GPU (skipped on CPU)')
    config.addinivalue_line('markers', 'slow: a pipeline run of more than a few seconds')
    config.addinivalue_line('markers', 'study: reads the finished demo run (make test-study runs the demo first)')

def _file_seconds() -> dict[str, float]:
    try: return {Path(f['file']).name: f['seconds'] for f in json.loads(DURATIONS.read_text())['files']}
    except (OSError, ValueError, KeyError): return {}

def _scope(file: str) -> str:
    "What one pytest-xdist worker runs whole: a test file (its module fixtures build runs in fixed folders), or the files of finished_run."
    return 'finished_run' if Path(file).name in SHARED_RUN else file

@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    "`make test`'s two workers take whole scopes (`_scope`), the slowest first (the order collection leaves below)."
    from xdist.scheduler import LoadScopeScheduling
    # xdist reorders scopes by their number of tests unless told not to, which put the real model's 4-test file (the
    # slowest scope) last: a 2-core run then ended with one worker on it alone for ~9 minutes
    config.option.loadscopereorder = False
    study = (config.option.markexpr or '').strip() == 'study'
    class ScopeScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            file = nodeid.split('::', 1)[0]
            # make test-study's stage notebooks run by hand are most of its time and share no fixture; the full suite
            # keeps whole files, as its slowest-first order was measured
            return nodeid if study and Path(file).name in PER_TEST else _scope(file)
    return ScopeScheduling(config, log)

def pytest_collection_modifyitems(config, items):
    # the slowest scopes first, by the last measured run's seconds, so that two workers end together; a file keeps its order
    seconds = _file_seconds(); total = {}
    for item in items: total.setdefault(_scope(item.path.name), sum(seconds.get(n, 0) for n in SHARED_RUN) if item.path.name in SHARED_RUN
                                        else seconds.get(item.path.name, 0))
    items.sort(key=lambda item: -total[_scope(item.path.name)])
    try:
        import torch; has_gpu = torch.cuda.is_available()
    except ImportError: has_gpu = False
    if has_gpu: return
    skip = pytest.mark.skip(reason='needs a CUDA GPU')
    for item in items:
        if 'gpu' in item.keywords: item.add_marker(skip)

@pytest.fixture
def root(): return ROOT


# `python ARGV` as a child of the warm process (rsi_repro.warm_kernels: torch, transformers, PEFT and TRL imported once)
# instead of a new interpreter importing them (~4 s of a 2-core machine each): the scripts below that kill themselves
# part-way, as a crash or a pre-empted job does. Each is still a process of its own, ending as its script ends (its exit
# status, or the signal that killed it); where a warm process cannot serve, it runs cold.
WARM_PYTHON = [sys.executable, '-m', 'rsi_repro.warm_kernels', 'run']

# The prelude of a generation script that SIGKILLs itself in the middle of shard number argv[3] (0: never),
# while that shard's rows are being decoded: what a crash or a pre-empted job does to a long stage.
DIE_MID_SHARD = """
import os, signal, sys
from rsi_repro.generate import HFBackend
kill_at = int(sys.argv[3])
if kill_at:
    real, calls = HFBackend.generate, []
    def dying(self, *a, **k):
        calls.append(1)
        if len(calls) == kill_at: os.kill(os.getpid(), signal.SIGKILL)
        return real(self, *a, **k)
    HFBackend.generate = dying
"""


# A smaller run derived from the tiny profile (`extends`), run once per session (about two minutes on two cores):
# tests/test_pipeline.py reads and reruns it, tests/test_run_trust.py works on copies of it.
SMALL_RUN = 'ci-e2e'
# Markup planted where a published site shows what a data file says: every serve and open-chat prompt's id and text
# carry an element with a handler; the site must show it as text (tests/test_pipeline.py opens the pages in a browser).
PLANTED = '<img src=x onerror=window.__planted=1>'
PLANTED_DIR = ROOT / 'outputs' / '_test_profiles' / 'planted'

def write_planted_prompts() -> None:
    from rsi_repro.io import read_jsonl, write_jsonl
    PLANTED_DIR.mkdir(parents=True, exist_ok=True)
    serve = read_jsonl(ROOT / 'data/prompts/serve.jsonl')
    write_jsonl(PLANTED_DIR / 'serve.jsonl', [{**r, 'id': r['id'] + PLANTED,
                                              'messages': [{**m, 'content': m['content'] + ' ' + PLANTED} for m in r['messages']]} for r in serve])
    chat = read_jsonl(ROOT / 'data/prompts/open_chat.jsonl')
    write_jsonl(PLANTED_DIR / 'open_chat.jsonl', [{**r, 'id': r['id'] + PLANTED, 'prompt': r['prompt'] + ' ' + PLANTED} for r in chat])

SMALL = f"""
extends: ../../configs/tiny.yaml
run: {SMALL_RUN}
serving: {{max_new_tokens: 24}}
prompts: {{serve: outputs/_test_profiles/planted/serve.jsonl}}
sft:
  corpora:
    - {{name: tulu3, source: data/corpora/tulu_sample.jsonl, bands: [{{start: 0, stop: 48}}, {{start: 48, stop: 96}}]}}
    - {{name: smoltalk, source: data/corpora/smoltalk_sample.jsonl, bands: [{{start: 0, stop: 48}}, {{start: 48, stop: 96}}]}}
dpo:
  corpus: {{name: ultrafeedback, source: data/corpora/ultrafeedback_sample.jsonl, bands: [{{start: 0, stop: 48}}]}}
  grid: [{{name: b010, beta: 0.1, lr: 5.0e-4}}]
  audit: {{start: 1400, stop: 1408}}
  max_tool_leak_rate: 1.0
repair:
  sampling: {{k: 2, temperature: 0.7, top_p: 0.9, seed: 5, max_new_tokens: 24, cap_per_prompt: 2}}
  optim: {{lr: 1.0e-3, micro_batch: 4, grad_accum: 1, seq_len: 256, seed: 11, steps: 2}}
rounds:
  sampling: {{k: 2, temperature: 0.7, top_p: 0.9, seed: 6, max_new_tokens: 24, cap_per_prompt: 2}}
  optim: {{lr: 1.0e-3, micro_batch: 4, grad_accum: 1, seq_len: 256, seed: 203, steps: 2}}
  sample_from: repair          # the demo's round starts from its soup; this run's soups stage runs last, read by nothing
  arms:
    - {{name: v6141, pool: r6, warm_start: repair, mix: single, steps: 2, seed: 203}}
    - {{name: v741, pool: r6, warm_start: parent, mix: double, steps: 2, seed: 741}}
pools: {{seed: 6, h6_size: 26, probe2_size: 13, rounds: {{r5: 32, r6: 32}}}}
evals:
  checkpoints: [base, repair, v6141]
  instruments: [h6, probe2, math, open_chat, wide_chat, termination]
  math: {{sources: [{{source: data/prompts/math.jsonl, kind: prompt_set, take: 4}}]}}
  open_chat: {{n: 8, prompts: outputs/_test_profiles/planted/open_chat.jsonl}}
  wide_chat: {{n: 12}}
  termination: {{sets: [open_chat]}}
stages:
  - {{name: serve, notebook: serve}}
  - {{name: pools, notebook: pools}}
  - {{name: sft, notebook: sft}}
  - {{name: dpo, notebook: dpo, needs: [sft]}}
  - {{name: repair, notebook: repair, needs: [pools, dpo]}}
  - {{name: rounds, notebook: rounds, needs: [pools, repair], takes_arms: true}}
  - {{name: preregister, notebook: preregister}}
  - {{name: eval, notebook: eval, needs: [preregister, pools, repair, rounds]}}
  - {{name: eval_arms, notebook: eval, needs: [preregister, pools, rounds], params: {{checkpoints: [v741], instruments: [h6]}}}}
  - {{name: grid, notebook: grid, needs: [eval, eval_arms], params: {{eval_stages: [eval_arms, eval]}}}}
  - {{name: decide, notebook: decide, needs: [preregister, eval, grid]}}
  - {{name: pair_read, notebook: pair_read, needs: [eval]}}
  - {{name: soups, notebook: soups, needs: [repair]}}
  - {{name: report, notebook: report, needs: [serve, pools, sft, dpo, repair, rounds, preregister, eval, eval_arms, decide, grid, pair_read, soups], params: {{library_glob: '2[23]_*.ipynb', execute_library: true}}}}
"""


@pytest.fixture(scope='session')
def small_profile():
    d = ROOT / 'outputs' / '_test_profiles'; d.mkdir(parents=True, exist_ok=True)
    p = d / f'{SMALL_RUN}.yaml'; p.write_text(SMALL); write_planted_prompts()
    shutil.rmtree(ROOT / 'outputs' / SMALL_RUN, ignore_errors=True)
    yield p
    shutil.rmtree(ROOT / 'outputs' / SMALL_RUN, ignore_errors=True); p.unlink(missing_ok=True)


@pytest.fixture(scope='session')
def finished_run(small_profile):
    "The small run, every stage executed (the list of stage results)."
    from rsi_repro.pipeline import run
    return run(small_profile, log=lambda *a: None)
