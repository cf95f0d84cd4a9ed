"""The one-stream ship of vLLM and the pipeline's wheels (tools/gpu_ship/pack_site.py): a wheel both folders hold is
installed once, and two versions of one project are refused by name before anything is packed."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'tools' / 'gpu_ship'))
from pack_site import ship_wheels  # noqa: E402


def test_a_wheel_in_both_folders_is_installed_once_in_vllms_order():
    listed = [Path('v/dill-0.4.1-py3-none-any.whl'), Path('v/vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl')]
    # pip's project names are blind to case: the pipeline's Dill is vLLM's dill, at the same version
    pipeline = [Path('p/Dill-0.4.1-py3-none-any.whl'), Path('p/trl-1.16.0-py3-none-any.whl')]
    assert ship_wheels(listed, pipeline) == [listed[0], listed[1], pipeline[1]]


def test_two_versions_of_one_project_are_refused_naming_both():
    listed = [Path('v/dill-0.4.1-py3-none-any.whl')]
    with pytest.raises(SystemExit, match=r'v/dill-0\.4\.1.*p/dill-0\.4\.0.*two versions of dill'):
        ship_wheels(listed, [Path('p/dill-0.4.0-py3-none-any.whl')])
