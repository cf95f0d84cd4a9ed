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
    nb = nbformat.read(ROOT / 'nbs/stages/pools.ipynb', as_version=4)
    NotebookClient(nb, timeout=300, kernel_name='python3', resources={'metadata': {'path': str(ROOT / 'nbs/stages')}}).execute()
    out = load_profile(ROOT / 'configs/tiny.yaml').run_dir / 'pools'
    assert (out / 'h6.jsonl').exists() and (out / 'pools.json').exists()
    assert not (ROOT / 'nbs/stages/outputs').exists()          # nothing landed relative to the notebook's folder
    assert project_root(out) == ROOT


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
