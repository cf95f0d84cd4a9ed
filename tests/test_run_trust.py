"""A run that cannot be fooled or broken, tried as a hostile user would, on copies of the session's finished small run
(conftest.py's `finished_run`) in a project copied elsewhere: edited outputs are named by the dry run, the run and
`rsi-repro verify` and refused by decide; a second runner is refused; names stay inside the run folder; settings are
strict; every failure is one line; a moved run skips every stage, keeps its caches and names no folder of a machine.

Each refusal is checked for what makes it real: a non-zero exit, one line on stderr naming the file, and no file of
the copied project changed (in the run folder or out of it)."""
import hashlib, json, os, shutil, socket, struct, subprocess, sys, time
from pathlib import Path

import pytest

from conftest import PLANTED_DIR, SMALL_RUN

ROOT = Path(__file__).resolve().parents[1]
PROFILE = Path('outputs/_test_profiles') / f'{SMALL_RUN}.yaml'      # from a project's root
RUN = Path('outputs') / SMALL_RUN
OUTCOME = RUN / 'eval/v6141/h6.outcomes.jsonl'


def copy_project(finished, dest: Path) -> Path:
    "The project (settings, notebooks, data, profiles and the run's planted prompts) with the finished small run, copied to `dest`: a project moved elsewhere."
    for part in ('settings.ini', 'nbs', 'data', 'configs', PROFILE, PLANTED_DIR.relative_to(ROOT), RUN):
        src, dst = ROOT / part, dest / part
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, dst, symlinks=True) if src.is_dir() else shutil.copy2(src, dst)
    return dest


@pytest.fixture
def project(small_profile, finished_run, tmp_path):
    return copy_project(finished_run, tmp_path / 'project')


def snapshot(root: Path, skip=lambda rel: False) -> dict:
    """Every file and folder under `root` but those `skip` names by their relative path (and what is under them): content
    digest and mode (a symlink by its target). A file another process removes as this reads is left out, so it differs
    from a snapshot that had it; a skipped one is never opened (a runner at work renames its temporary files away)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            p = Path(folder) / name; rel = p.relative_to(root).as_posix()
            if skip(rel): continue
            try:
                if p.is_symlink(): out[rel] = ('link', os.readlink(p))
                elif p.is_file(): out[rel] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode & 0o777)
                else: out[rel] = ('dir', p.stat().st_mode & 0o777)
            except FileNotFoundError: pass
        dirs[:] = [d for d in dirs if not skip((Path(folder) / d).relative_to(root).as_posix())]
    return out


def cli(project: Path, *args, timeout=600) -> subprocess.CompletedProcess:
    "`rsi-repro ARGS` run in the project's root, as a user runs it."
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}
    return subprocess.run([sys.executable, '-m', 'rsi_repro.cli', *map(str, args)], cwd=project, capture_output=True, text=True,
                          timeout=timeout, env=env)


def refused(r: subprocess.CompletedProcess, *names: str) -> str:
    "The one line a refused command printed; it exits non-zero and names every one of `names`."
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1, (r.returncode, r.stderr[-3000:])
    for n in names: assert n in lines[0], (n, lines[0])
    return lines[0]


# --- edited outputs ---------------------------------------------------------------------------------------------------

def edit_outcome(p: Path):
    "One failed row of the candidate's H6 outcomes set to passed."
    f = p / OUTCOME
    rows = f.read_text().splitlines()
    i = next(i for i, l in enumerate(rows) if json.loads(l)['passed'] is False)
    rows[i] = json.dumps({**json.loads(rows[i]), 'passed': True})
    f.write_text('\n'.join(rows) + '\n')


def edit_seal(p: Path):
    "The seal back-dated by a year, so that older results would look pre-registered."
    f = p / RUN / 'preregister/promotion.seal.json'
    seal = json.loads(f.read_text())
    f.write_text(json.dumps({**seal, 'sealed_at': seal['sealed_at'].replace('2026', '2025')}, indent=2, sort_keys=True) + '\n')


def edit_manifest(p: Path):
    "The evaluation's manifest made to record the edited outcome file, by hand."
    edit_outcome(p)
    f = p / RUN / 'eval/manifest.json'
    m = json.loads(f.read_text())
    m['outputs']['v6141/h6.outcomes.jsonl'] = hashlib.sha256((p / OUTCOME).read_bytes()).hexdigest()
    f.write_text(json.dumps(m, indent=1, sort_keys=True))


def break_manifest(p: Path):
    "The evaluation's manifest cut in the middle (a crash, a full disk)."
    f = p / RUN / 'eval/manifest.json'
    f.write_text(f.read_text()[:200])


def truncate_adapter(p: Path):
    "The repair adapter's weights cut short."
    f = p / RUN / 'repair/adapter/adapter_model.safetensors'
    f.write_bytes(f.read_bytes()[:-1000])


EDITS = {'outcome row': (edit_outcome, OUTCOME), 'seal': (edit_seal, RUN / 'preregister/promotion.seal.json'),
         'manifest': (edit_manifest, RUN / 'eval/manifest.json'), 'manifest json': (break_manifest, RUN / 'eval/manifest.json'),
         'adapter': (truncate_adapter, RUN / 'repair/adapter/adapter_model.safetensors')}


@pytest.mark.parametrize('kind', list(EDITS))
def test_an_edited_output_is_named_by_the_dry_run_the_run_and_verify(project, kind):
    edit, named = EDITS[kind]
    edit(project)
    before = snapshot(project)
    for args in (['run', PROFILE, '--dry-run'], ['run', PROFILE], ['run', PROFILE, '--only', 'decide', '--force', 'decide'],
                 ['verify', RUN]):
        line = refused(cli(project, *args), named.as_posix())
        assert str(project) not in line and str(ROOT) not in line, line           # named from the project root
        assert snapshot(project) == before, args                                   # nothing changed, in the run folder or out of it


def test_forcing_the_stage_that_wrote_an_edited_file_rewrites_it(project):
    "The refusal's second way on, `--force STAGE`: the stage reruns from a clean folder, and the run folder verifies again."
    table = project / RUN / 'grid/grid_h6.csv'
    original = table.read_bytes()
    table.write_text(table.read_text().replace(',', ';', 3))
    refused(cli(project, 'run', PROFILE), 'outputs/ci-e2e/grid/grid_h6.csv', 'rerun grid with --force grid')
    r = cli(project, 'run', PROFILE, '--force', 'grid')
    assert r.returncode == 0 and '[grid] running: forced' in r.stdout, r.stdout + r.stderr[-2000:]
    assert table.read_bytes() == original and cli(project, 'verify', RUN).returncode == 0


@pytest.mark.parametrize('kind', ['outcome row', 'seal'])
def test_decide_refuses_an_edited_outcome_file_or_seal(project, kind, monkeypatch):
    from rsi_repro.config import load_profile
    from rsi_repro.preregister import SealError
    from rsi_repro.recipes import decide_stage
    edit, named = EDITS[kind]
    edit(project)
    before = snapshot(project)
    monkeypatch.chdir(project)
    profile = load_profile(project / PROFILE)
    with pytest.raises(SealError, match=f"{named.as_posix()}: differs from what its stage's manifest"):
        decide_stage(profile, project / RUN / 'decide', 'repair', 'v6141')
    assert snapshot(project) == before


def test_the_unedited_copy_verifies(project):
    r = cli(project, 'verify', RUN)
    assert r.returncode == 0 and r.stderr == '', r.stderr[-2000:]
    assert r.stdout.startswith(f"rsi-repro: verified {RUN.as_posix()}: 14 stage manifest(s)"), r.stdout
    assert 'KEEP v6141 over repair' in r.stdout or 'PROMOTE v6141 over repair' in r.stdout, r.stdout


# --- one runner per run folder ---------------------------------------------------------------------------------------

def test_a_second_runner_is_refused_in_one_line_and_changes_nothing(project):
    "A forced evaluation runs; a second `rsi-repro run` of the same folder meanwhile is refused and leaves the folder to the first."
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}
    first = subprocess.Popen([sys.executable, '-m', 'rsi_repro.cli', 'run', str(PROFILE), '--only', 'eval_arms', '--force', 'eval_arms'],
                             cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lock = project / RUN / '.lock'
    try:
        for _ in range(600):
            if lock.exists() and (project / RUN / '.eval_arms.previous').exists(): break   # the first runner is at work
            time.sleep(0.1)
        assert lock.exists(), first.communicate(timeout=600)
        ours = lambda k: 'eval_arms' in k or k.endswith(('.lock', 'run_times.jsonl'))   # what the first runner writes as it goes
        before = snapshot(project, skip=ours)
        line = refused(cli(project, 'run', PROFILE), f"{RUN.as_posix()} is in use: a runner (pid {first.pid} on {socket.gethostname()}")
        assert 'holds its lock' in line
        assert snapshot(project, skip=ours) == before
    finally:
        out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-3000:]
    assert not lock.exists() and cli(project, 'verify', RUN).returncode == 0              # the first finished, whole


def test_a_stale_lock_is_replaced(project):
    (project / RUN / '.lock').write_text(json.dumps({'pid': 2**22 + 12345, 'host': socket.gethostname(), 'started': '2026-01-01T00:00:00+00:00'}))
    r = cli(project, 'run', PROFILE)
    assert r.returncode == 0 and 'a stale lock is replaced: its process is gone' in r.stdout, r.stderr[-2000:]
    assert not (project / RUN / '.lock').exists()


# --- a run folder moved elsewhere -----------------------------------------------------------------------------------

def test_a_moved_run_skips_every_stage_and_names_no_folder_of_a_machine(project):
    r = cli(project, 'run', PROFILE)
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == 'rsi-repro: 0 stage(s) ran, 14 unchanged', r.stdout + r.stderr[-2000:]
    leaks = [p.relative_to(project).as_posix() for p in (project / RUN).rglob('*')
             if p.is_file() and any(root.encode() in p.read_bytes() for root in (str(ROOT), str(project), os.path.realpath(project)))]
    assert leaks == []
    for p in [project / RUN, *(project / RUN).rglob('*')]:
        assert p.stat().st_mode & 0o777 == (0o755 if p.is_dir() else 0o644), p


def test_a_moved_run_keeps_its_generation_caches(project):
    "A change that reruns serve but not its generations (its default prompt set named): the moved run's shards are read, not redone."
    shards = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (project / RUN / 'serve').rglob('plan-*/shard-*.jsonl')}
    assert shards
    profile = project / PROFILE
    profile.write_text(profile.read_text().replace('{name: serve, notebook: serve}', '{name: serve, notebook: serve, params: {prompt_set: serve}}'))
    r = cli(project, 'run', PROFILE, '--only', 'serve')
    assert r.returncode == 0 and '[serve] running: changed: its entry in the stage list' in r.stdout, r.stdout + r.stderr[-2000:]
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (project / RUN / 'serve').rglob('plan-*/shard-*.jsonl')} == shards


# --- names confined ---------------------------------------------------------------------------------------------------

@pytest.fixture
def bare(tmp_path):
    "A project of the repository's notebooks and data only (no run), with a folder beside it a stage name could reach."
    p = tmp_path / 'project'; p.mkdir()
    for part in ('settings.ini', 'nbs', 'data', 'configs'):
        (shutil.copytree if (ROOT / part).is_dir() else shutil.copy2)(ROOT / part, p / part)
    victim = tmp_path / 'x' / 'victim'; victim.mkdir(parents=True); (victim / 'notes.txt').write_text('mine')
    return p


def profile_with(project: Path, text: str, name: str = 'p.yaml') -> Path:
    (project / 'configs' / name).write_text("extends: tiny.yaml\nrun: t\n" + text)
    return Path('configs') / name


def test_a_stage_name_that_leaves_the_run_folder_is_refused(bare):
    p = profile_with(bare, "stages: [{name: ../../../x/victim, notebook: pools}]\n")
    before = snapshot(bare.parent)
    for args in (['run', p], ['run', p, '--dry-run']):
        refused(cli(bare, *args), 'configs/p.yaml: stages[0].name', "'../../../x/victim' is not a plain name")
    assert snapshot(bare.parent) == before


def test_a_folder_no_run_made_is_refused_with_its_files_listed(bare):
    p = profile_with(bare, "stages: [{name: pools, notebook: pools}]\n")
    (bare / 'outputs/t/pools').mkdir(parents=True); (bare / 'outputs/t/pools/notes.txt').write_text('mine')
    before = snapshot(bare.parent)
    for args in (['run', p], ['run', p, '--dry-run']):
        refused(cli(bare, *args), 'outputs/t/pools holds 1 file(s): notes.txt that no run of stage \'pools\' wrote')
    assert snapshot(bare.parent) == before


def test_ifeval_check_refuses_to_write_over_its_input(tmp_path):
    f = tmp_path / 'in.jsonl'
    f.write_text(json.dumps({'key': 1, 'prompt': 'Say hi.', 'instruction_id_list': [], 'kwargs': [], 'response': 'hi'}) + '\n')
    (tmp_path / 'link.jsonl').symlink_to(f)
    before = snapshot(tmp_path)
    for out in (f, tmp_path / 'link.jsonl', tmp_path / '.' / 'in.jsonl'):
        refused(cli(tmp_path, 'ifeval-check', f, '-o', out), 'is also the input', 'writing it would replace the input')
    assert snapshot(tmp_path) == before


def test_train_sft_refuses_an_existing_adapter_folder(tmp_path):
    out = tmp_path / 'adapter'; out.mkdir(); (out / 'adapter_config.json').write_text('{}')
    before = snapshot(tmp_path)
    refused(cli(ROOT, 'train-sft', 'configs/tiny.yaml', '--mix', tmp_path / 'mix.npz', '--out', out),
            f"{out}: exists and is not empty (an adapter?); pass --overwrite")
    assert snapshot(tmp_path) == before


# --- strict settings, one line each -----------------------------------------------------------------------------------

SETTINGS = {
    'duplicate key': ("serving: {max_new_tokens: 24}\nserving: {max_new_tokens: 48}\n",
                      ["configs/p.yaml:4: duplicate key 'serving' (first on line 3"]),
    'yaml syntax': ("serving: {max_new_tokens: 24\nstages: []\n", ['configs/p.yaml:4: not valid YAML']),
    'misspelt stage param': ("stages: [{name: pools, notebook: pools}, {name: decide, notebook: decide, params: {candidat: sft}}]\n",
                             ["configs/p.yaml: stages[1].params.candidat: the decide notebook has no parameter 'candidat'"]),
    'empty pool': ("pools: {seed: 6, h6_size: 240, probe2_size: 0}\n", ['configs/p.yaml: pools.probe2_size: must be > 0, got 0']),
    'negative size': ("pools: {seed: 6, h6_size: -240, probe2_size: 96}\n", ['configs/p.yaml: pools.h6_size: must be > 0, got -240']),
    'missing corpus': ("dpo: {corpus: {name: u, source: data/corpora/missing.jsonl, bands: [{start: 0, stop: 8}]}}\n",
                       ['configs/p.yaml: dpo.corpus.source: file not found: data/corpora/missing.jsonl']),
}


@pytest.mark.parametrize('case', list(SETTINGS))
def test_a_wrong_setting_is_one_line_naming_it_before_anything_runs(bare, case):
    text, names = SETTINGS[case]
    p = profile_with(bare, text)
    before = snapshot(bare)
    commands = [['run', p], ['run', p, '--dry-run']] + ([['estimate', p]] if case != 'misspelt stage param' else [])
    for args in commands: refused(cli(bare, *args), *names)
    assert snapshot(bare) == before


def test_a_profile_byte_that_is_not_utf8_names_its_line(bare):
    (bare / 'configs/p.yaml').write_bytes(b"extends: tiny.yaml\nrun: t\n# caf\xe9\n")
    refused(cli(bare, 'run', 'configs/p.yaml', '--dry-run'), 'configs/p.yaml:3: not UTF-8 (byte 0xe9 at column 6)')


def test_a_corpus_error_names_the_files_line(tmp_path):
    "A blank line and a bad row: the error names the line an editor shows, not the row's index."
    from rsi_repro.config import Band, Corpus
    from rsi_repro.corpora import CorpusError, chat_messages, read_band, row_where
    rows = [json.dumps({'messages': [{'role': 'user', 'content': f'q{i}'}, {'role': 'assistant', 'content': f'a{i}'}]}) for i in range(8)]
    rows.insert(3, '')                                              # a blank line: the bad row is row 8 of the band, line 10 of the file
    rows.append(json.dumps({'messages': [{'role': 'user', 'content': 'q'}]}))
    (tmp_path / 'c.jsonl').write_text('\n'.join(rows) + '\n')
    corpus = Corpus('c', str(tmp_path / 'c.jsonl'))
    with pytest.raises(Exception, match=r"c\.jsonl:10 \(corpus c\)"):
        for row in read_band(corpus, Band(0, 9)): chat_messages(row, row_where(corpus, row))


def test_a_dead_kernel_is_one_line_naming_the_stage_the_cell_and_the_signal(tmp_path, monkeypatch, capsys):
    """A stage whose kernel is killed (what the system does when memory runs out) stops the run in one line naming the signal;
    a rerun removes the kernel's sockets and connection file a killed runner would have left."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook
    from rsi_repro import pipeline as pl
    from rsi_repro.cli import main
    (tmp_path / 'settings.ini').touch(); (tmp_path / 'nbs/stages').mkdir(parents=True)
    params = new_code_cell("profile_path = ''\nstage_dir = ''\nrun_dir = ''"); params.metadata['tags'] = ['parameters']
    nbformat.write(new_notebook(cells=[params, new_code_cell("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")],
                                metadata={'kernelspec': {'name': 'python3', 'language': 'python', 'display_name': 'Python 3'}}),
                   tmp_path / 'nbs/stages/big.ipynb')
    (tmp_path / 'p.yaml').write_text("run: t\nbase: {name_or_path: some/hub-id, architecture: llama}\nserving: {}\nstages: [{name: big, notebook: big}]\n")
    monkeypatch.setitem(pl.STAGE_READS, 'big', pl.Reads(('serving',)))
    monkeypatch.chdir(tmp_path)
    assert main(['run', 'p.yaml']) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rsi-repro: error: stage 'big': its kernel died in cell 3 [import os, signal]: "
                                               "the process was killed by SIGKILL (the system does this to a process out of memory"), err
    assert pl.read_manifest(tmp_path / 'outputs/t/big') is None
    from jupyter_core.paths import jupyter_runtime_dir
    runtime = Path(jupyter_runtime_dir())
    left = [runtime / f"{pl.kernel_prefix(tmp_path / 'outputs/t')}-0123abcd{end}" for end in ('-1', '-2', '.json')]
    for f in left: f.write_text('')                                  # what a runner killed with its kernel leaves
    other = runtime / f"{pl.kernel_prefix(tmp_path / 'outputs/other')}-0123abcd.json"; other.write_text('')
    said = []
    monkeypatch.setitem(pl.STAGE_READS, 'big', pl.Reads(('serving',)))
    with pytest.raises(pl.StageFailed): pl.run('p.yaml', log=said.append)
    assert not any(f.exists() for f in left) and other.exists() and any('removed 3 socket(s) and connection file(s)' in s for s in said)
    other.unlink()


def test_a_stage_kernel_is_on_local_ipc_and_says_nothing_of_tcp(bare):
    "A stage's kernel listens on no TCP port (IPC sockets instead), so the run prints no kernel-transport warning."
    p = profile_with(bare, "stages: [{name: pools, notebook: pools}]\n")
    r = cli(bare, 'run', p)
    assert r.returncode == 0, r.stderr[-2000:]
    assert 'TCP' not in r.stdout + r.stderr and 'encryption' not in r.stdout + r.stderr, r.stderr[-2000:]
    nb = json.loads((bare / 'outputs/t/pools/pools.ipynb').read_text())
    assert nb['metadata']['papermill']['exception'] is None


def test_only_report_over_stale_stages_stops_naming_them(project):
    "A profile change that makes the evaluation stale: `--only report` stops in one line naming it, and so does the dry run."
    profile = project / PROFILE
    text = profile.read_text()
    changed = text.replace('  open_chat: {n: 8,', '  open_chat: {n: 6,'); assert changed != text
    profile.write_text(changed)
    before = snapshot(project / RUN)
    line = refused(cli(project, 'run', PROFILE, '--only', 'report'), '--only report', 'stale', 'eval (changed: profile section evals')
    assert 'decide' in line or 'pair_read' in line                       # what reads the stale evaluation is stale too
    assert snapshot(project / RUN) == before
    dry = cli(project, 'run', PROFILE, '--only', 'report', '--dry-run')
    assert dry.returncode == 0 and 'report' in dry.stdout and 'blocked' in dry.stdout and 'stale under this profile' in dry.stdout


def test_the_environment_a_stage_gets_is_in_its_key_and_code_changing_variables_are_refused(project):
    "compute.env reaches every process a stage starts: a change reruns the stages; a variable that swaps the code is refused."
    profile = project / PROFILE
    text = profile.read_text()
    profile.write_text(text + "compute:\n  env: {OMP_DYNAMIC: 'false'}\n")
    dry = cli(project, 'run', PROFILE, '--dry-run')
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.count('changed: compute.env OMP_DYNAMIC') >= 3 and '0 unchanged' in dry.stdout
    profile.write_text(text + "compute:\n  env: {PYTHONPATH: /elsewhere}\n")
    refused(cli(project, 'run', PROFILE, '--dry-run'), 'compute.env.PYTHONPATH', 'would change the code or libraries')
