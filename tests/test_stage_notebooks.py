"""Stage notebooks run where a person opens them: from `nbs/stages/` (Jupyter's folder), with their defaults."""
import json, re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

from rsi_repro.config import load_profile, project_root

ROOT = Path(__file__).resolve().parents[1]
STAGES = sorted(p.stem for p in (ROOT / 'nbs/stages').glob('*.ipynb'))


def test_pools_stage_executes_from_its_own_folder_with_its_defaults():
    "The defaults are root-relative paths; run from nbs/stages/ they must still find configs/tiny.yaml and write under outputs/."
    import shutil, tempfile
    nb = nbformat.read(ROOT / 'nbs/stages/pools.ipynb', as_version=4)
    out = load_profile(ROOT / 'configs/tiny.yaml').run_dir / 'pools'
    kept = Path(tempfile.mkdtemp()) / 'pools'                  # a demo run's pools stage is put back as it was afterwards
    if out.exists(): shutil.move(out, kept)
    try:
        NotebookClient(nb, timeout=300, kernel_name='python3', resources={'metadata': {'path': str(ROOT / 'nbs/stages')}}).execute()
        assert (out / 'h6.jsonl').exists() and (out / 'pools.json').exists()
        assert not (ROOT / 'nbs/stages/outputs').exists()      # nothing landed relative to the notebook's folder
        assert project_root(out) == ROOT
    finally:                                                   # a folder no run made would stop the next `make demo`
        shutil.rmtree(out, ignore_errors=True)
        if kept.exists(): shutil.move(kept, out)
        if out.parent.is_dir() and not any(out.parent.iterdir()): out.parent.rmdir()


@pytest.mark.parametrize('name', STAGES)
def test_every_stage_notebook_resolves_its_defaults_from_the_repository_root(name):
    """Opened from nbs/stages/ and run from the top, each stage notebook's parameters cell and the cell after it (which
    resolves the paths from the root and creates the stage folder) run, and the paths are the repository's."""
    nb = nbformat.read(ROOT / f'nbs/stages/{name}.ipynb', as_version=4)
    i = next(i for i, c in enumerate(nb.cells) if 'parameters' in c.metadata.get('tags', []))
    params, paths = nb.cells[i], nb.cells[i + 1]
    assert 'rooted(profile_path, stage_dir, run_dir)' in paths.source, f"{name}: the cell after the parameters does not resolve the paths"
    defaults = dict(re.findall(r'^(profile_path|stage_dir|run_dir) = "([^"]+)"', params.source, re.M))
    assert set(defaults) == {'profile_path', 'stage_dir', 'run_dir'}, name
    existed = {k: (ROOT / v).exists() for k, v in defaults.items()}
    nb.cells = [params, paths, new_code_cell("import json; print(json.dumps({'profile_path': profile_path, 'stage_dir': stage_dir, 'run_dir': run_dir}))")]
    try:
        NotebookClient(nb, timeout=120, kernel_name='python3', resources={'metadata': {'path': str(ROOT / 'nbs/stages')}}).execute()
        got = json.loads(nb.cells[2].outputs[0]['text'])
        assert got == {k: str(ROOT / v) for k, v in defaults.items()}
        assert Path(got['stage_dir']).is_dir() and Path(got['profile_path']).is_file()
        assert not (ROOT / 'nbs/stages/outputs').exists()
    finally:                                                     # leave no empty folder the test made
        for k in ('stage_dir', 'run_dir'):
            p = ROOT / defaults[k]
            if not existed[k] and p.is_dir() and not any(p.iterdir()): p.rmdir()


def notebook_defaults(name: str) -> dict:
    "A stage notebook's parameters and their default values, as papermill reads them."
    import ast, papermill as pm
    return {k: ast.literal_eval(v['default']) for k, v in pm.inspect_notebook(str(ROOT / f'nbs/stages/{name}.ipynb')).items()}


def test_every_stage_notebooks_defaults_are_its_entry_in_the_tiny_profile():
    """Run by hand with its defaults, each stage notebook does what `rsi-repro run configs/tiny.yaml` has it do: the
    demo's paths and every parameter the profile's entry for it sets (an entry that reuses another stage's notebook
    under its own name, as eval_arms reuses eval's, passes its parameters explicitly)."""
    prof = load_profile(ROOT / 'configs/tiny.yaml')
    own = [s for s in prof.stages if s.name == s.notebook]
    assert {s.notebook for s in own} == set(STAGES)
    for s in own:
        got = notebook_defaults(s.notebook)
        want = {'profile_path': 'configs/tiny.yaml', 'stage_dir': f'outputs/tiny/{s.name}', 'run_dir': 'outputs/tiny', **dict(s.params)}
        assert {k: got.get(k) for k in want} == want, s.name


def run_by_hand(name: str, scratch: Path) -> dict:
    "`papermill nbs/stages/NAME.ipynb OUT -p stage_dir SCRATCH` from the repository root, as the README shows; the executed notebook."
    import subprocess, sys
    out = scratch / f'{name}.ipynb'
    r = subprocess.run([sys.executable, '-m', 'papermill', f'nbs/stages/{name}.ipynb', str(out), '-p', 'stage_dir', str(scratch / name),
                        '--no-progress-bar'], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f"{name} by hand: {r.stderr[-3000:]}"
    return json.loads(out.read_text())


FREE_STANDING = ('pools', 'preregister')      # read the profile only, no earlier stage


@pytest.mark.parametrize('name', FREE_STANDING)
def test_a_free_standing_stage_runs_by_hand_with_only_its_stage_dir(name, tmp_path):
    nb = run_by_hand(name, tmp_path)
    assert nb['metadata']['papermill']['exception'] is None and any((tmp_path / name).iterdir())


def cached_work(stage_dir: Path) -> dict:
    """The files a stage reuses instead of redoing its work (trained adapters, generation shards), with their modification
    times. The soups themselves are not among them: averaging is cheap and is redone on every run of the stage."""
    from rsi_repro.layout import soups_dir
    return {p.relative_to(stage_dir).as_posix(): p.stat().st_mtime_ns
            for pattern in ('adapter_model.safetensors', 'shard-*.jsonl') for p in stage_dir.rglob(pattern)
            if soups_dir(stage_dir) not in p.parents}


@pytest.mark.study
@pytest.mark.parametrize('name', [s for s in STAGES if s not in FREE_STANDING])
def test_every_stage_runs_by_hand_on_the_demo_run_with_only_its_stage_dir(name, tmp_path):
    """On the finished demo run (`make test-study` makes it), each stage notebook runs with nothing but `-p stage_dir`, in
    a copy of the demo's folder of that stage: it resolves the same profile, upstream stages and inputs as the pipeline
    did, so every adapter and generation shard the demo left is found current and reused, none rewritten (a wrong
    path or setting would make them stale and redo the work; the work itself is what `make demo` has just run)."""
    import shutil
    demo = load_profile(ROOT / 'configs/tiny.yaml').run_dir / name
    shutil.copytree(demo, tmp_path / name)                     # copy2: modification times kept
    before = cached_work(tmp_path / name)
    nb = run_by_hand(name, tmp_path)
    assert nb['metadata']['papermill']['exception'] is None and any((tmp_path / name).iterdir())
    after = cached_work(tmp_path / name)
    assert {k: after.get(k) for k in before} == before, f"{name} by hand redid work the demo run had done: " \
        f"{sorted(k for k in before if after.get(k) != before[k])}"
