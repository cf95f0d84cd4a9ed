"""Each stage's key covers what it reads, and `rsi-repro run --dry-run` says what a change reruns and why.

The run here is the tiny profile with a manifest written for every stage without executing any: what these tests
look at is the keys, which are computed from the profile, the notebooks, the library and the data, exactly as a
real run computes them."""
import json, shutil, subprocess, sys
from pathlib import Path

import pytest

from rsi_repro import pipeline as pl
from rsi_repro.config import load_profile
from rsi_repro.io import sha256_json
from rsi_repro.manifests import with_hashes

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / 'outputs' / '_test_profiles'
RUN = 'ci-keys'
TRAINING = {'sft', 'dpo', 'repair', 'rounds'}
PROMOTION = """
promotion:
  description: "Promote only on a positive wide-H6 delta with no collapsed family and a probe2 score at or above the incumbent."
  clauses:
    - {kind: delta_above, instrument: h6, threshold: 0.0}
    - {kind: no_family_collapse, instrument: h6, max_drop: %s}
    - {kind: delta_at_least, instrument: probe2, threshold: 0.0}
"""


def _write(text: str) -> Path:
    PROFILES.mkdir(parents=True, exist_ok=True)
    path = PROFILES / f'{RUN}.yaml'
    path.write_text(f"extends: ../../configs/tiny.yaml\nrun: {RUN}\n{text}")
    return path


@pytest.fixture
def finished():
    "The tiny profile's stages, each with a manifest of its current key (and an output digest of its own)."
    path = _write('')
    prof = load_profile(path)
    shutil.rmtree(prof.run_dir, ignore_errors=True)
    for s in prof.stages:
        inputs = pl.stage_inputs(prof, s)
        (prof.run_dir / s.name).mkdir(parents=True)
        (prof.run_dir / s.name / f'{s.name}.json').write_text(json.dumps(s.name))
        outputs = pl.output_hashes(prof.run_dir / s.name, '')
        (prof.run_dir / s.name / pl.MANIFEST).write_text(json.dumps(with_hashes(
            {'stage': s.name, 'inputs': inputs, 'inputs_sha256': sha256_json(inputs), 'outputs': outputs})))
    yield path
    shutil.rmtree(prof.run_dir, ignore_errors=True); path.unlink(missing_ok=True)


def _plan(path, **kw) -> dict:
    return {p.stage: p for p in pl.plan(path, **kw)}


def _running(steps) -> set: return {s for s, p in steps.items() if p.action == 'run'}
def _reading(steps, section) -> set: return {s for s, p in steps.items() if any(f'profile section {section}' in r for r in p.reasons)}


def test_an_unchanged_run_reruns_nothing(finished):
    steps = _plan(finished)
    assert {p.action for p in steps.values()} == {'skip'} and steps['eval'].reasons == ('unchanged',)


def test_changing_the_promotion_rule_reruns_exactly_preregister_decide_and_report(finished):
    """The rule is read by preregister (which seals it) and decide (which applies it), and by nothing else; the report
    reads decide. The evaluations run after preregister (their registry entry says `after`) but read none of it, so a
    new seal reruns no evaluation: decide labels a verdict on results older than the seal post hoc instead."""
    _write(PROMOTION % 0.1)
    steps = _plan(finished)
    assert _reading(steps, 'promotion') == {'preregister', 'decide'}
    assert steps['preregister'].reasons == ('changed: profile section promotion',)
    assert _running(steps) == {'preregister', 'decide', 'report'}
    assert steps['report'].reasons[0].startswith('upstream preregister, decide reruns')
    assert {s for s, p in steps.items() if p.action == 'skip'} == set(steps) - {'preregister', 'decide', 'report'}
    prof = load_profile(finished)
    eval_stage = next(s for s in prof.stages if s.name == 'eval')
    assert 'preregister' in eval_stage.needs and pl.order_stages(prof, eval_stage) == ['preregister']
    assert 'preregister' not in pl.stage_inputs(prof, eval_stage)['upstream']
    grid = next(s for s in prof.stages if s.name == 'grid')        # nor does it reach them through the evaluations
    assert 'preregister' in pl.upstream_stages(prof, grid) and 'preregister' not in pl.upstream_stages(prof, grid, keyed=True)


def test_an_evaluation_still_waits_for_the_seal(finished):
    "`after` orders: with no finished preregister stage, the evaluations are blocked, and run_stage refuses them by name."
    prof = load_profile(finished)
    shutil.rmtree(prof.run_dir / 'preregister')
    steps = _plan(finished)
    assert steps['preregister'].action == 'run'
    assert steps['eval'].action == 'skip'           # its key does not read the seal: planned after preregister, unchanged
    eval_stage = next(s for s in prof.stages if s.name == 'eval')
    with pytest.raises(pl.StageFailed, match="stage 'eval' needs stage 'preregister', which has not run"):
        pl.stage_inputs(prof, eval_stage)
    steps = _plan(finished, only=['eval'])            # preregister not selected and never run: eval cannot start
    assert steps['eval'].action == 'blocked' and steps['eval'].reasons == ('needs preregister, which has not run',)


def test_changing_one_instrument_reruns_the_evaluations_not_training(finished):
    """evals.code.n is read by the stages that evaluate (eval, eval_arms, soups) or read evaluation settings (decide and
    grid: the flags of their paired reads, the grid's for the one-SE rule's regression profiles; pair_read, report).
    The rounds stage starts from the stage-3 soup, so it sits downstream of the soups stage and reruns with it: its key
    covers that whole stage, the soups' evaluations included (the arms it trains are keyed on the soup adapter's
    identity, which an instrument change leaves as it was). No other training stage reruns."""
    _write("evals: {code: {n: 6}}\n")
    steps = _plan(finished)
    assert _reading(steps, 'evals') == {'eval', 'eval_arms', 'decide', 'grid', 'pair_read', 'soups', 'report'}
    assert _running(steps) == {'eval', 'eval_arms', 'decide', 'grid', 'pair_read', 'soups', 'rounds', 'report'}
    assert steps['decide'].reasons[0].startswith('upstream soups, rounds, eval') and steps['rounds'].reasons[0].startswith('upstream soups')
    assert not _running(steps) & (TRAINING - {'rounds'} | {'serve', 'pools', 'preregister'})


def test_a_persons_labels_are_part_of_the_key_of_the_stage_they_sit_in(finished):
    """A safety adjudication or a blind-sheet label written after a run reruns the stage whose folder holds it (and what
    reads it) on a plain run, saying why; the stage beside it (eval_arms, the same notebook) does not."""
    run_dir = load_profile(finished).run_dir
    (run_dir / 'eval' / 'v6141').mkdir()
    (run_dir / 'eval' / 'v6141' / 'safety.ab12.adjudication.csv').write_text('id,sample,response_sha256,label\ns1,0,x,full_refusal\n')
    (run_dir / 'pair_read' / 'sheet.csv').write_text('pair,label\n1,A\n')
    steps = _plan(finished)
    assert steps['eval'].reasons == ("changed: a person's labels v6141/safety.ab12.adjudication.csv",)
    assert steps['pair_read'].reasons == ('upstream eval reruns', "changed: a person's labels sheet.csv")
    assert steps['eval_arms'].action == 'skip' and not _running(steps) & (TRAINING | {'preregister'})


def test_changing_a_training_stage_reruns_it_and_what_is_downstream_only(finished):
    _write("repair: {optim: {lr: 2.0e-3, micro_batch: 8, grad_accum: 2, seq_len: 256, seed: 11, steps: 48}}\n")
    steps = _plan(finished)
    assert steps['repair'].reasons == ('changed: profile section repair',)
    assert {s for s, p in steps.items() if p.action == 'skip'} == {'serve', 'pools', 'sft', 'dpo', 'preregister'}
    assert 'changed: profile section repair' in steps['eval'].reasons          # eval reads repair's warm start too


def test_a_manifest_of_the_old_scheme_says_so(finished):
    prof = load_profile(finished)
    m = json.loads((prof.run_dir / 'serve' / pl.MANIFEST).read_text())
    m['inputs'] = {'profile_sha256': 'x', 'library_sha256': 'y'}; m['inputs_sha256'] = 'z'
    (prof.run_dir / 'serve' / pl.MANIFEST).write_text(json.dumps(m))
    steps = _plan(finished)
    assert steps['serve'].reasons == ('its manifest has a key of scheme 1 (the whole profile in every stage); it runs once to record a scheme-2 key (what the stage reads)',)
    assert steps['report'].reasons[0] == 'upstream serve reruns' and steps['pools'].action == 'skip'


def test_force_only_and_missing_upstream_in_a_dry_run(finished):
    steps = _plan(finished, force=['pools'], only=['pools', 'grid'])
    assert [(s, p.action) for s, p in steps.items() if p.action != 'not selected'] == [('pools', 'run'), ('grid', 'run')]
    assert steps['pools'].reasons == ('forced',) and steps['grid'].reasons == ('upstream pools reruns',)
    shutil.rmtree(load_profile(finished).run_dir / 'eval')
    steps = _plan(finished, only=['decide'])
    assert steps['decide'].action == 'blocked' and steps['decide'].reasons == ('needs eval, which has not run',)


def test_dry_run_on_the_command_line_prints_each_stage_and_runs_nothing(finished):
    _write(PROMOTION % 0.1)
    before = {p: p.stat().st_mtime_ns for p in load_profile(finished).run_dir.rglob('*')}
    r = subprocess.run([sys.executable, '-m', 'rsi_repro.cli', 'run', str(finished), '--dry-run'], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f'dry run of {finished}') and lines[-1] == '3 stage(s) would run, 11 unchanged'
    assert any(l.split()[:3] == ['preregister', 'run', 'changed:'] for l in lines)
    assert any(l.split()[:3] == ['eval', 'skip', 'unchanged'] for l in lines)
    assert any(l.split()[:2] == ['sft', 'skip'] for l in lines)
    assert {p: p.stat().st_mtime_ns for p in load_profile(finished).run_dir.rglob('*')} == before


def test_every_stage_notebook_is_registered_and_reads_only_profile_sections():
    assert sorted(pl.STAGE_READS) == sorted(p.stem for p in (ROOT / 'nbs/stages').glob('*.ipynb'))
    for name, reads in pl.STAGE_READS.items():
        assert set(reads.sections) <= set(pl.profile_sections()), name
        for d in reads.data:
            assert d == pl.PROFILE_FILE or (ROOT / d).exists(), (name, d)


@pytest.fixture
def seal_run():
    "A run of the tiny profile's preregister stage alone."
    path = _write("stages: [{name: preregister, notebook: preregister}]\n")
    shutil.rmtree(load_profile(path).run_dir, ignore_errors=True)
    yield path
    shutil.rmtree(load_profile(path).run_dir, ignore_errors=True); path.unlink(missing_ok=True)


def test_the_seal_outlives_a_forced_rerun_and_its_error_names_the_stage_parameter(seal_run):
    quiet = lambda *a: None
    seal = load_profile(seal_run).run_dir / 'preregister' / 'promotion.seal.json'
    assert [r.status for r in pl.run(seal_run, log=quiet)] == ['ran']
    first = json.loads(seal.read_text())
    pl.run(seal_run, force=['preregister'], log=quiet)                      # a clean folder, but the seal is kept, unmoved
    assert json.loads(seal.read_text()) == first
    _write("stages: [{name: preregister, notebook: preregister}]\n" + PROMOTION % 0.1)
    with pytest.raises(pl.StageFailed, match=r"a different rule was sealed at .*; to re-seal, set the preregister stage's parameter "
                                             r"replace_seal to true \(in the profile: `params: \{replace_seal: true\}` on its entry under `stages`"):
        pl.run(seal_run, log=quiet)
    assert json.loads(seal.read_text()) == first
    _write("stages: [{name: preregister, notebook: preregister, params: {replace_seal: true}}]\n" + PROMOTION % 0.1)   # as the error says
    assert [r.status for r in pl.run(seal_run, log=quiet)] == ['ran']
    assert json.loads(seal.read_text())['rule_sha256'] != first['rule_sha256']


def test_a_real_stage_reading_an_undeclared_section_is_stopped(seal_run, monkeypatch):
    monkeypatch.setitem(pl.STAGE_READS, 'preregister', pl.Reads((), keep=('promotion.seal.json',)))
    with pytest.raises(pl.StageFailed, match=r"stage 'preregister' read the profile section 'promotion' \(at a cell of nbs/stages/preregister.ipynb\)"):
        pl.run(seal_run, log=lambda *a: None)
    assert pl.read_manifest(load_profile(seal_run).run_dir / 'preregister') is None
