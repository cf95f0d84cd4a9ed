"""A disk that really fills up while a stage runs: the run stops with one line naming the stage and the file it was
writing, exit status 1, and leaves no half-written file that a later run could take for a finished one. The disk is a
small tmpfs mounted on the run folder, which needs the right to mount (root on Linux); elsewhere the test says so and
skips (the one-line message itself is also tested without a mount in `nbs/91_cli.ipynb` and `nbs/00a_io.ipynb`)."""
import contextlib, io, json, shutil, subprocess
from pathlib import Path

import pytest

from rsi_repro.cli import main
from rsi_repro.stage_keys import MARKER

ROOT = Path(__file__).resolve().parents[1]
RUN = '_full_disk'
PROFILE = f"""extends: ../../configs/tiny.yaml
run: {RUN}
stages:
  - {{name: pools, notebook: pools}}
"""


@pytest.fixture
def small_disk(request):
    "The run folder on a tmpfs of `request.param` bytes; the profile that writes there."
    d = ROOT / 'outputs' / '_test_profiles'; d.mkdir(parents=True, exist_ok=True)
    profile, mount = d / f'{RUN}.yaml', ROOT / 'outputs' / RUN
    profile.write_text(PROFILE); mount.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={request.param}', 'tmpfs', str(mount)], capture_output=True, text=True)
    if r.returncode:
        mount.rmdir(); profile.unlink()
        pytest.skip(f"a tmpfs cannot be mounted here ({(r.stderr or r.stdout).strip() or 'mount failed'}): needs root on Linux")
    try: yield profile, mount
    finally:
        subprocess.run(['umount', str(mount)], check=False)
        shutil.rmtree(mount, ignore_errors=True); profile.unlink(missing_ok=True)


def cli(*args) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()): code = main(list(args))
    return code, err.getvalue()


def complete(path: Path) -> bool:
    "A JSON or JSONL file that parses whole, or any other file (the stage writes nothing else)."
    text = path.read_text()
    try:
        if path.suffix in ('.json', '.ipynb'): json.loads(text)
        elif path.suffix == '.jsonl': [json.loads(l) for l in text.splitlines()]
    except ValueError: return False
    return True


# 48 KiB: full before the kernel starts (the executed notebook cannot be written); 120 KiB: full while the stage writes its pools
@pytest.mark.parametrize('small_disk', ['48k', '120k'], indirect=True)
def test_a_full_disk_stops_the_run_in_one_line_and_leaves_nothing_half_written(small_disk):
    profile, mount = small_disk
    code, err = cli('run', str(profile.relative_to(ROOT)))
    lines = [l for l in err.splitlines() if l.strip()]
    assert code == 1 and len(lines) == 1, err
    assert lines[0].startswith(f"rsi-repro: error: stage 'pools': no space left on the device writing outputs/{RUN}/pools/"), lines[0]
    assert 'nothing half-written was kept' in lines[0] and 'Traceback' not in err
    left = [p for p in (mount / 'pools').rglob('*') if p.is_file()]
    assert not [p.name for p in left if p.name.endswith('.tmp') or p.name.endswith('.input.ipynb')]   # no temporary file
    assert not (mount / 'pools' / 'pools.ipynb').exists()          # the executed notebook papermill had begun is gone
    assert all(complete(p) for p in left), [p.name for p in left if not complete(p)]
    assert (mount / 'pools' / MARKER).exists()                      # the run is recorded as unfinished, so the next one starts again
    subprocess.run(['mount', '-o', 'remount,size=8m', str(mount)], check=True)   # space freed
    assert cli('run', str(profile.relative_to(ROOT)))[0] == 0 and (mount / 'pools' / 'pools.ipynb').exists()
