"""Stage notebooks run where a person opens them: from `nbs/stages/` (Jupyter's folder), with their defaults."""
import nbformat
from nbclient import NotebookClient

from rsi_repro.config import load_profile, project_root
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pools_stage_executes_from_its_own_folder_with_its_defaults():
    "The defaults are root-relative paths; run from nbs/stages/ they must still find configs/tiny.yaml and write under outputs/."
    nb = nbformat.read(ROOT / 'nbs/stages/pools.ipynb', as_version=4)
    NotebookClient(nb, timeout=300, kernel_name='python3', resources={'metadata': {'path': str(ROOT / 'nbs/stages')}}).execute()
    out = load_profile(ROOT / 'configs/tiny.yaml').run_dir / 'pools'
    assert (out / 'h6.jsonl').exists() and (out / 'pools.json').exists()
    assert not (ROOT / 'nbs/stages/outputs').exists()          # nothing landed relative to the notebook's folder
    assert project_root(out) == ROOT
