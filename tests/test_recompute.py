"""A stage recomputed to the same weights and rows reruns nothing below it: later stages are keyed on what a stage
computed (`content_sha256`), not on how long it took or the logs it left (which its `outputs` still check byte for
byte). On a copy of the session's finished small run (conftest.py's `finished_run`), every stage of the card's
lineage below SFT and DPO."""
import json
from pathlib import Path

import pytest

from rsi_repro.config import load_profile
from test_run_trust import PROFILE, RUN, cli, copy_project


@pytest.fixture
def project(small_profile, finished_run, tmp_path):
    return copy_project(finished_run, tmp_path / 'project')


def test_a_forced_recompute_with_identical_weights_reruns_nothing_downstream(project):
    "SFT, then DPO (with its shared reference pass), each forced to recompute: the same content, no other stage reruns."
    run_dir, stages = project / RUN, len(load_profile(project / PROFILE).stages)
    manifest = lambda stage: json.loads((run_dir / stage / 'manifest.json').read_text())
    before = manifest('sft')
    again = cli(project, 'run', PROFILE, '--force', 'sft'); assert again.returncode == 0, again.stderr[-3000:]
    after = manifest('sft')
    assert before['outputs_sha256'] != after['outputs_sha256']         # the recompute wrote other timings and logs ...
    assert before['outputs']['adapter/adapter_model.safetensors'] == after['outputs']['adapter/adapter_model.safetensors']
    assert before['content_sha256'] == after['content_sha256']         # ... and computed the same thing
    assert '[dpo] unchanged, skipped' in again.stdout and f"1 stage(s) ran, {stages - 1} unchanged" in again.stdout, again.stdout
    dpo = manifest('dpo')                                               # DPO: its reference pass logs each forward's time
    redo = cli(project, 'run', PROFILE, '--force', 'dpo'); assert redo.returncode == 0, redo.stderr[-3000:]
    dpo_again = manifest('dpo')
    assert dpo['outputs_sha256'] != dpo_again['outputs_sha256'] and dpo['content_sha256'] == dpo_again['content_sha256']
    assert f"1 stage(s) ran, {stages - 1} unchanged" in redo.stdout, redo.stdout
