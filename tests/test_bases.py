"""A base is its content, and a GGUF base goes through the runner: converted once into the run, keyed by the file's
sha256, served with the same answers as the checkpoint it was written from, refused in one line without the study's
chat markers, and checked by `rsi-repro verify`. The GGUF files are written here, from the tiny base, with the `gguf`
package (`rsi_repro.bases.llama_to_gguf`)."""
import contextlib, io, json, shutil
from pathlib import Path

import pytest

from rsi_repro.bases import IM_END, SOURCE_RECORD, llama_to_gguf
from rsi_repro.cli import main
from rsi_repro.config import load_profile
from rsi_repro.io import read_jsonl, sha256_file
from rsi_repro.pipeline import plan, read_manifest, run

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / 'outputs' / '_test_bases'
SERVE_ONLY = """
extends: ../../configs/tiny.yaml
run: {run}
base: {{name_or_path: {base}, architecture: llama, dtype: float32}}
stages:
  - {{name: serve, notebook: serve}}
"""


@pytest.fixture(scope='module')
def work():
    shutil.rmtree(WORK, ignore_errors=True); WORK.mkdir(parents=True)
    yield WORK
    shutil.rmtree(WORK, ignore_errors=True)
    for name in ('_tb_gguf', '_tb_plain', '_tb_bad', '_tb_changed'): shutil.rmtree(ROOT / 'outputs' / name, ignore_errors=True)


def profile(work: Path, run: str, base: str) -> Path:
    p = work / f'{run}.yaml'
    p.write_text(SERVE_ONLY.format(run=run, base=base))
    return p


def answers(run_name: str) -> list[tuple]:
    rows = [r for f in sorted((ROOT / 'outputs' / run_name / 'serve').rglob('shard-*.jsonl')) for r in read_jsonl(f)]
    return sorted((r['id'], r['response'], r['finish_reason']) for r in rows)


def test_a_gguf_base_is_converted_once_keyed_by_its_sha256_and_answers_as_its_source(work):
    gguf = llama_to_gguf(ROOT / 'data/tiny_base', work / 'tiny.gguf')
    said = []
    results = run(profile(work, '_tb_gguf', str(gguf)), log=said.append)
    assert [r.status for r in results] == ['ran']
    assert any(s.startswith('[base] converting') for s in said)
    base = ROOT / 'outputs/_tb_gguf/base'
    record = json.loads((base / SOURCE_RECORD).read_text())
    assert record['source_sha256'] == f"gguf:{sha256_file(gguf)}"
    assert read_manifest(ROOT / 'outputs/_tb_gguf/serve')['inputs']['data']['base'] == record['source_sha256']
    run(profile(work, '_tb_plain', 'data/tiny_base'), log=lambda *a: None)
    assert answers('_tb_gguf') == answers('_tb_plain') and len(answers('_tb_plain')) == 8   # the same weights and tokenizer
    said.clear()
    assert [r.status for r in run(profile(work, '_tb_gguf', str(gguf)), log=said.append)] == ['skipped']
    assert not any('[base]' in s for s in said)                              # whole and of this source: not converted again


def test_verify_names_a_changed_converted_file_and_a_rerun_converts_again(work):
    out = io.StringIO()
    with contextlib.redirect_stdout(out): assert main(['verify', 'outputs/_tb_gguf']) == 0
    assert 'the converted base as its source.json records it' in out.getvalue()
    tok = ROOT / 'outputs/_tb_gguf/base/tokenizer_config.json'
    tok.write_text(tok.read_text() + ' ')
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()): assert main(['verify', 'outputs/_tb_gguf']) == 1
    assert 'base/tokenizer_config.json: its sha256 is not the one source.json records' in err.getvalue()
    said = []
    run(profile(work, '_tb_gguf', str(work / 'tiny.gguf')), log=said.append)
    assert any(s.startswith('[base] converting') for s in said)
    with contextlib.redirect_stdout(io.StringIO()): assert main(['verify', 'outputs/_tb_gguf']) == 0


def test_a_changed_gguf_reruns_what_reads_the_base(work):
    changed = work / 'changed.gguf'
    shutil.copy(work / 'tiny.gguf', changed)
    p = profile(work, '_tb_gguf', str(changed))                          # the same bytes under another name: nothing reruns
    assert [s.action for s in plan(p)] == ['skip']
    with open(changed, 'r+b') as f: f.seek(-1, 2); b = f.read(1); f.seek(-1, 2); f.write(bytes([b[0] ^ 1]))
    steps = plan(p)
    assert [s.action for s in steps] == ['run'] and 'data base' in steps[0].reasons[0]


def test_a_base_whose_weights_or_tokenizer_changed_is_another_base(work):
    copy = work / 'base_copy'
    shutil.copytree(ROOT / 'data/tiny_base', copy)
    rel = copy.relative_to(ROOT).as_posix()
    p = profile(work, '_tb_changed', rel)
    run(p, log=lambda *a: None)
    assert [s.action for s in plan(p)] == ['skip']
    weights = copy / 'model.safetensors'
    with open(weights, 'r+b') as f: f.seek(-1, 2); b = f.read(1); f.seek(-1, 2); f.write(bytes([b[0] ^ 1]))   # same size, same names
    assert [s.action for s in plan(p)] == ['run']
    shutil.copy(ROOT / 'data/tiny_base/model.safetensors', weights)
    assert [s.action for s in plan(p)] == ['skip']
    cfg = json.loads((copy / 'tokenizer_config.json').read_text())
    (copy / 'tokenizer_config.json').write_text(json.dumps({**cfg, 'model_max_length': 512}))     # the tokenizer alone
    assert [s.action for s in plan(p)] == ['run']


def test_a_gguf_without_the_chat_markers_is_refused_in_one_line(work):
    bad = llama_to_gguf(ROOT / 'data/tiny_base', work / 'bad.gguf', rename={IM_END: '<|end|>'})
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert main(['run', str(profile(work, '_tb_bad', str(bad)))]) == 2
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and 'bad.gguf: its tokenizer has no <|im_end|> token' in lines[0]
    assert not (ROOT / 'outputs/_tb_bad/base').exists()
