"The grid stage states its power before it reads any arm's results."
import json
from pathlib import Path

import pytest
import yaml

pm = pytest.importorskip("papermill")
ROOT = Path(__file__).resolve().parents[1]


def test_power_is_printed_before_any_result_is_read(tmp_path):
    data = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    data.update(stages=[], prompts={})
    for k in ("sft", "dpo", "evals"): data.pop(k)       # they name the project's data files, which a profile outside it cannot reach
    (tmp_path / "tiny_base").mkdir()                      # the stage never loads the base
    data["base"]["name_or_path"] = str(tmp_path / "tiny_base")
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump(data))
    out = tmp_path / "grid.out.ipynb"
    # No evaluation has run in this folder, so reading the arms' outcomes fails; the power statement comes first.
    with pytest.raises(pm.PapermillExecutionError):
        pm.execute_notebook(str(ROOT / "nbs" / "stages" / "grid.ipynb"), str(out), cwd=str(ROOT), kernel_name="python3",
                            progress_bar=False, parameters=dict(profile_path=str(profile), stage_dir=str(tmp_path / "grid"),
                                                                run_dir=str(tmp_path / "outputs" / "tiny")))
    cells = [c for c in json.loads(out.read_text())["cells"] if c["cell_type"] == "code"]
    text = ["".join(o.get("text", "")) for c in cells for o in c.get("outputs", [])]
    said = next(i for i, c in enumerate(cells) if any("discordance 0.18" in "".join(o.get("text", "")) for o in c.get("outputs", [])))
    failed = next(i for i, c in enumerate(cells) if any(o.get("output_type") == "error" for o in c.get("outputs", [])))
    assert said < failed and "grid_stage(" in "".join(cells[failed]["source"])
    assert any(f"At n = {data['pools']['h6_size']} prompts and discordance 0.18" in t for t in text)
