"""The stage folder across reruns, and the watch over what a stage reads, on throw-away projects whose stage
notebooks take a second: a rerun starts clean but keeps a person's files and the caches it uses, an interrupted
run resumes from its shards, arms run in parts, and a read the key does not cover stops the stage."""
import json, shutil, tempfile
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from rsi_repro import pipeline as pl
from rsi_repro.config import load_profile

ROOT = Path(__file__).resolve().parents[1]
quiet = lambda *a: None

PROFILE = """run: t
base: {name_or_path: some/hub-id, architecture: llama}
serving: {max_new_tokens: 8}
stages: [{name: first, notebook: first}, {name: second, notebook: second, needs: [first]}]
"""
READ = "from pathlib import Path\nfrom rsi_repro.config import load_profile\nprofile = load_profile(profile_path)\nhere = Path(stage_dir)\n"


def _notebook(path: Path, body: str):
    params = new_code_cell("profile_path = ''\nstage_dir = ''\nrun_dir = ''\narms = None"); params.metadata['tags'] = ['parameters']
    nbformat.write(new_notebook(cells=[params, new_code_cell(body)],
                                metadata={'kernelspec': {'name': 'python3', 'language': 'python', 'display_name': 'Python 3'}}), path)


@pytest.fixture
def project(monkeypatch):
    "A project with two stage notebooks, `first` and `second`, registered like the study's; `make(first=..., second=...)` writes their code."
    d = Path(tempfile.mkdtemp()); (d / 'settings.ini').touch(); (d / 'nbs/stages').mkdir(parents=True)
    (d / 'p.yaml').write_text(PROFILE)
    monkeypatch.setitem(pl.STAGE_READS, 'first', pl.Reads(('serving',), keep=('labels.csv',)))
    monkeypatch.setitem(pl.STAGE_READS, 'second', pl.Reads(('serving',)))
    def make(first: str | None = '', second: str | None = ''):       # None: leave that notebook as it is
        if first is not None: _notebook(d / 'nbs/stages/first.ipynb', READ + first)
        if second is not None: _notebook(d / 'nbs/stages/second.ipynb', READ + second)
        return d / 'p.yaml'
    yield make
    shutil.rmtree(d, ignore_errors=True)


def _edit(path: Path, old: str, new: str): path.write_text(path.read_text().replace(old, new))
def _files(folder: Path) -> list[str]:
    "The files in a stage folder, without the runner's dot files."
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob('*') if p.is_file() and not p.name.startswith('.'))


# A stage that writes a generation plan named by its settings (a cache it checks itself), a person's labels once,
# and an artifact named by its settings.
PLANNED = """n = profile.serving.max_new_tokens
plan = here / 'gen' / f'plan-{n}'
if (plan / 'shard.jsonl').exists(): assert (plan / 'shard.jsonl').read_text() == str(n)
else: plan.mkdir(parents=True, exist_ok=True); (plan / 'shard.jsonl').write_text(str(n))
if not (here / 'labels.csv').exists(): (here / 'labels.csv').write_text('labelled by a person')
(here / f'table-{n}.csv').write_text('x')
"""


def test_a_rerun_starts_clean_keeps_a_persons_files_and_drops_unused_caches(project):
    path = project(first=PLANNED)
    assert [r.status for r in pl.run(path, log=quiet)] == ['ran', 'ran']
    first = load_profile(path).run_dir / 'first'
    (first / 'labels.csv').write_text('edited by a person')
    _edit(path, 'max_new_tokens: 8', 'max_new_tokens: 16')
    assert [r.reasons for r in pl.run(path, log=quiet)] == [('changed: profile section serving',),
                                                             ('changed: profile section serving; outputs of first',)]
    # table-8.csv (an artifact of the old settings) and plan-8 (a cache this run did not use) are gone; the labels stay
    assert _files(first) == ['first.ipynb', 'gen/plan-16/shard.jsonl', 'labels.csv', 'manifest.json', 'table-16.csv']
    assert (first / 'labels.csv').read_text() == 'edited by a person'
    assert sorted(pl.read_manifest(first)['outputs']) == ['gen/plan-16/shard.jsonl', 'labels.csv', 'table-16.csv']
    assert not pl.previous_dir(first).exists() and not (first / pl.MARKER).exists()


def test_a_cache_the_rerun_uses_is_kept_and_forcing_drops_it(project):
    path = project(first=PLANNED)
    pl.run(path, log=quiet)
    first = load_profile(path).run_dir / 'first'
    shard = first / 'gen/plan-8/shard.jsonl'
    born = shard.stat().st_mtime_ns
    _edit(path, 'max_new_tokens: 8', 'max_new_tokens: 8, top_p: 0.9')     # a change the plan does not depend on
    assert [r.status for r in pl.run(path, log=quiet)] == ['ran', 'ran']
    assert shard.stat().st_mtime_ns == born                                # carried into the rerun and read, not rewritten
    pl.run(path, force=['first'], log=quiet)
    assert shard.exists() and shard.stat().st_mtime_ns != born             # forced: recomputed from a clean folder
    assert (first / 'labels.csv').exists()


def test_an_interrupted_run_resumes_from_its_shards_with_the_same_inputs_only(project):
    "The first attempt writes a shard and dies; run again unchanged, it finds its shard; run with other inputs, it starts clean."
    path = project(first="shard = here / 'shard-0.jsonl'\n"
                         "if not shard.exists(): shard.write_text('one shard'); raise RuntimeError('interrupted')\n")
    with pytest.raises(pl.StageFailed, match="stage 'first' failed .*RuntimeError: interrupted"):
        pl.run(path, log=quiet)
    first = load_profile(path).run_dir / 'first'
    assert pl.read_manifest(first) is None and pl.read_marker(first)['key']
    assert [p.reasons for p in pl.plan(path)][0] == ('an interrupted run with the same inputs resumes',)
    assert [r.status for r in pl.run(path, log=quiet)] == ['ran', 'ran']
    assert list(pl.read_manifest(first)['outputs']) == ['shard-0.jsonl']
    with pytest.raises(pl.StageFailed, match='interrupted'): pl.run(path, force=['first'], log=quiet)   # forced: clean, dies again
    _edit(path, 'max_new_tokens: 8', 'max_new_tokens: 16')
    assert pl.plan(path)[0].reasons[0].startswith('an unfinished run of other inputs is replaced (changed: profile section serving')
    with pytest.raises(pl.StageFailed, match='interrupted'): pl.run(path, log=quiet)       # shard-0 of the other inputs was cleared


def test_reads_the_key_does_not_cover_stop_the_stage(project, monkeypatch):
    path = project(first="(here / 'out.txt').write_text('x')\n")
    pl.run(path, only=['first'], log=quiet)
    run_dir = load_profile(path).run_dir
    cases = {
        "profile.base": r"read the profile section 'base' \(at a cell of nbs/stages/second.ipynb\), which its cache key does not cover: "
                        r"declare it in rsi_repro.pipeline.STAGE_READS\['second'\] \(nbs/90a_stage_keys.ipynb\).sections",
        "profile.section('base')": r"read the profile section 'base' \(at a cell of nbs/stages/second.ipynb\)",   # placed where section is called
        f"open({str(run_dir / 'first' / 'out.txt')!r}, 'a').write('y')": "stage 'second' opened .*first/out.txt for writing: a stage writes in its own folder only",
        "(Path(profile.root) / 'data' / 'extra.txt').read_text()": r"read data/extra.txt, which its cache key does not cover: it is not one of its data; declare it in .*\.data",
        "import importlib; importlib.import_module('rsi_repro.summary')": r"imported the library module rsi_repro.summary \(at a cell of nbs/stages/second.ipynb\), which its cache key does not cover: import it by name where it is used",
        "try: profile.pools\nexcept Exception: pass\n(here / 'out.txt').write_text('went on')": r"the stage caught the error and went on; 1 such read",
    }
    (Path(load_profile(path).root) / 'data').mkdir(); (Path(load_profile(path).root) / 'data/extra.txt').write_text('z')
    for code, message in cases.items():
        project(first=None, second=code)
        with pytest.raises(pl.StageFailed, match=message):
            pl.run(path, log=quiet)
        assert pl.read_manifest(run_dir / 'second') is None
    monkeypatch.setitem(pl.STAGE_READS, 'second', pl.Reads(('serving',), data=('data/extra.txt',)))
    project(first=None, second="(Path(profile.root) / 'data' / 'extra.txt').read_text()")
    assert [r.status for r in pl.run(path, log=quiet)] == ['skipped', 'ran']           # declared, the same read is fine
    _edit(path, "{name: second, notebook: second, needs: [first]}", "{name: second, notebook: second}")
    project(first=None, second="(Path(run_dir) / 'first' / 'out.txt').read_text()")
    with pytest.raises(pl.StageFailed, match=r"first/out.txt, which its cache key does not cover: stage 'first' is not upstream of it; add it to this stage's `needs`"):
        pl.run(path, log=quiet)


ARMS = """
rounds:
  sampling: {k: 2, temperature: 0.7, top_p: 0.9, seed: 6, max_new_tokens: 8}
  lora: {r: 4, alpha: 8}
  optim: {lr: 1.0e-3, micro_batch: 1, grad_accum: 1, seq_len: 64, seed: 1, steps: 1}
  arms: [{name: a, pool: r1, warm_start: base}, {name: b, pool: r1, warm_start: base}]
stages: [{name: first, notebook: first, takes_arms: true}, {name: second, notebook: second, needs: [first]}]
"""
ARM_WORK = """for arm in (arms or [a.name for a in profile.rounds.arms]):
    (here / arm).mkdir(exist_ok=True)
    if not (here / arm / 'adapter.txt').exists(): (here / arm / 'adapter.txt').write_text(arm)
"""


def test_some_arms_leave_the_stage_unfinished_until_a_run_of_all(project, monkeypatch):
    path = project(first=ARM_WORK)
    _edit(path, "stages: [{name: first, notebook: first}, {name: second, notebook: second, needs: [first]}]\n", ARMS)
    monkeypatch.setitem(pl.STAGE_READS, 'first', pl.Reads(('rounds',), reuse=('*/adapter.txt',)))
    assert [p.action for p in pl.plan(path, arms=['a'])] == ['run', 'wait']
    assert [r.status for r in pl.run(path, arms=['a'], log=quiet)] == ['partial', 'waiting']
    first = load_profile(path).run_dir / 'first'
    assert pl.read_manifest(first) is None and _files(first) == ['a/adapter.txt', 'first.ipynb']
    pl.run(path, arms=['b'], log=quiet)                         # same key: the folder is kept, arm a with it
    assert _files(first) == ['a/adapter.txt', 'b/adapter.txt', 'first.ipynb']
    with pytest.raises(KeyError, match="--force first with --arm would start first from a clean folder"):
        pl.run(path, arms=['a'], force=['first'], log=quiet)
    assert [r.status for r in pl.run(path, log=quiet)] == ['ran', 'ran']
    assert sorted(pl.read_manifest(first)['outputs']) == ['a/adapter.txt', 'b/adapter.txt']
    assert [r.status for r in pl.run(path, arms=['a'], log=quiet)] == ['skipped', 'skipped']   # every arm is done


def test_an_unregistered_stage_notebook_is_refused(project):
    path = project()
    shutil.copy(path.parent / 'nbs/stages/second.ipynb', path.parent / 'nbs/stages/third.ipynb')
    _edit(path, "notebook: second", "notebook: third")
    with pytest.raises(pl.StageFailed, match="its notebook 'third' has no entry in rsi_repro.pipeline.STAGE_READS"):
        pl.plan(path)


def test_a_failed_rerun_leaves_the_finished_run_aside_and_an_undone_edit_puts_it_back(project):
    path = project(first=PLANNED + "assert n != 16, 'sixteen tokens are refused'\n")
    pl.run(path, log=quiet)
    first = load_profile(path).run_dir / 'first'
    finished, files = pl.read_manifest(first), _files(first)
    _edit(path, 'max_new_tokens: 8', 'max_new_tokens: 16')
    with pytest.raises(pl.StageFailed, match='sixteen tokens are refused'): pl.run(path, log=quiet)
    assert pl.read_manifest(first) is None and pl.read_manifest(pl.previous_dir(first)) == finished
    _edit(path, 'max_new_tokens: 16', 'max_new_tokens: 8')
    assert [(p.action, p.reasons) for p in pl.plan(path)] == [('restore', (pl.RESTORE,)), ('skip', ('unchanged',))]
    assert [r.status for r in pl.run(path, log=quiet)] == ['restored', 'skipped']
    assert pl.read_manifest(first) == finished and _files(first) == files and not pl.previous_dir(first).exists()
