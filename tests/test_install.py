"""A plain (non-editable) install works outside the repository: the data the library itself reads (pool subjects
and templates, the prompt sets it loads by default, the card's claims) ships inside the package, and the command
line runs.

Offline: the package is built from a copy of the repository with this environment's setuptools and installed
without its dependencies into a fresh environment that reads this one's packages (but not its rsi_repro)."""
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ('setup.py', 'settings.ini', 'README.md', 'rsi_repro', 'data')


def _run(cmd, cwd):
    "Run outside this checkout: no PYTHONPATH pointing back at it."
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'PYTHONHOME')}
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.fixture(scope='module')
def installed(tmp_path_factory):
    "(python of a fresh environment with rsi_repro installed non-editable, its rsi-repro script, its site-packages)."
    tmp = tmp_path_factory.mktemp('install')
    src = tmp / 'src'
    for name in SHIPPED:
        p = ROOT / name
        if p.is_dir(): shutil.copytree(p, src / name, symlinks=True, ignore=shutil.ignore_patterns('__pycache__'))
        else: src.mkdir(exist_ok=True); shutil.copy2(p, src / name)
    env_dir = tmp / 'env'
    _run([sys.executable, '-m', 'venv', '--without-pip', env_dir], tmp)
    py = env_dir / 'bin' / 'python'
    purelib = Path(_run([py, '-c', "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp).strip())
    # this environment's packages (the dependencies) are visible there as plain folders: their .pth files, among
    # them the editable install of rsi_repro, are not processed, so the only rsi_repro there is the one built here
    outer = [p for p in (*site.getsitepackages(), sysconfig.get_paths()['purelib']) if Path(p).is_dir()]
    (purelib / '_deps.pth').write_text('\n'.join(dict.fromkeys(outer)) + '\n')
    _run([sys.executable, '-m', 'pip', 'install', '--no-deps', '--no-build-isolation', '--no-index', '--quiet',
          '--target', purelib, src], tmp)
    return py, purelib / 'bin' / 'rsi-repro', purelib


def test_the_installed_package_is_the_built_copy_with_its_data(installed, tmp_path):
    py, script, purelib = installed
    out = _run([py, '-c', "import json, rsi_repro, rsi_repro.pools as p, rsi_repro.instruments.prompts as q, rsi_repro.io as io\n"
                "print(json.dumps([rsi_repro.__file__, str(p.DATA_DIR), str(q.prompts_dir()), str(io.package_data('claims'))]))"], tmp_path)
    pkg, pools_dir, prompts_dir, claims_dir = (Path(x) for x in json.loads(out))
    assert pkg.is_relative_to(purelib), pkg
    for d in (pools_dir, prompts_dir, claims_dir):
        assert d.is_relative_to(purelib) and not d.is_symlink() and d.resolve().is_relative_to(purelib.resolve()), d
    assert (pools_dir / 'subjects.txt').is_file() and (prompts_dir / 'code.jsonl').is_file()
    assert (claims_dir / 'seed_card.yaml').is_file()


def test_pools_build_and_prompt_sets_load_outside_the_repository(installed, tmp_path):
    py, script, purelib = installed
    code = ("from rsi_repro.pools import build_pools, audit\n"
            "from rsi_repro.instruments.prompts import load_prompt_set\n"
            "p = build_pools(seed=6, h6_size=26, probe2_size=13, rounds={'r1': 20}, second_constraint_prob=0.3)\n"
            "print(audit(p)['pools'], len(load_prompt_set(kind='code')))")
    out = _run([py, '-c', code], tmp_path)
    assert out.strip() == "{'h6': 26, 'probe2': 13, 'r1': 20} 24"


def test_ifeval_check_runs_from_the_installed_script(installed, tmp_path):
    py, script, purelib = installed
    rows = [{'key': 1, 'prompt': 'No commas.', 'instruction_id_list': ['punctuation:no_comma'], 'kwargs': [{}],
             'response': 'Hello world'},
            {'key': 2, 'prompt': 'No commas.', 'instruction_id_list': ['punctuation:no_comma'], 'kwargs': [{}],
             'response': 'Hello, world'}]
    (tmp_path / 'in.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
    _run([py, script, 'ifeval-check', 'in.jsonl', '-o', 'out.jsonl'], tmp_path)
    out = [json.loads(l) for l in (tmp_path / 'out.jsonl').read_text().splitlines()]
    assert [(o['key'], o['follow_all_instructions_strict']) for o in out] == [(1, True), (2, False)]
