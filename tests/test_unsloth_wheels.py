"""The slim Unsloth wheels (tools/gpu_ship/unsloth_wheels.py): what a 16-bit LoRA run never loads is left out, and
the rewritten RECORD lists exactly the files kept with their true hashes, so that pip installs the slim wheel offline."""
import base64, hashlib, subprocess, sys, zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'tools' / 'gpu_ship'))
from unsloth_wheels import dropped, slim  # noqa: E402


def fake_wheel(path: Path, files: dict[str, bytes]) -> Path:
    "A wheel of `files` whose RECORD is the published kind: every file, hashed, and RECORD itself unhashed."
    dist = 'bitsandbytes-0.50.2.dist-info'
    files = {**files, f'{dist}/WHEEL': b'Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
             f'{dist}/METADATA': b'Metadata-Version: 2.1\nName: bitsandbytes\nVersion: 0.50.2\n'}
    def line(n, d): return f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
    with zipfile.ZipFile(path, 'w') as z:
        for n, d in files.items(): z.writestr(n, d)
        z.writestr(f'{dist}/RECORD', '\n'.join([line(n, d) for n, d in files.items()] + [f'{dist}/RECORD,,']) + '\n')
    return path


def test_the_slim_wheel_keeps_what_runs_and_installs_as_published(tmp_path):
    files = {'bitsandbytes/__init__.py': b'LOADED = True\n', 'bitsandbytes/libbitsandbytes_cpu.so': b'cpu',
             'bitsandbytes/libbitsandbytes_cuda130.so': b'cuda13', 'bitsandbytes/libbitsandbytes_cuda128.so': b'x' * 1000,
             'bitsandbytes/libbitsandbytes_rocm72.so': b'rocm'}
    src = fake_wheel(tmp_path / 'bitsandbytes-0.50.2-py3-none-any.whl', files)
    (tmp_path / 'slim').mkdir()
    dest = tmp_path / 'slim' / src.name
    assert slim(src, dest) == (5, 2)                  # three package files and WHEEL and METADATA kept; two libraries left out
    with zipfile.ZipFile(dest) as z:
        names = set(z.namelist())
        record = z.read('bitsandbytes-0.50.2.dist-info/RECORD').decode().split()
        for entry in record[:-1]:                      # each kept file listed once, with its own hash and size
            name, digest, size = entry.split(',')
            data = z.read(name)
            assert digest == 'sha256=' + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()
            assert int(size) == len(data)
    assert {e.split(',')[0] for e in record} == names
    assert 'bitsandbytes/libbitsandbytes_cuda128.so' not in names and 'bitsandbytes/libbitsandbytes_cuda130.so' in names
    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--no-index', '--no-deps', '--no-compile',
                    '--target', str(tmp_path / 'site'), str(dest)], check=True)
    assert (tmp_path / 'site/bitsandbytes/libbitsandbytes_cuda130.so').read_bytes() == b'cuda13'


def test_what_is_left_out():
    assert dropped('studio/frontend/index.html') and dropped('unsloth_cli/__init__.py')
    assert dropped('bitsandbytes/libbitsandbytes_cuda118.so') and not dropped('bitsandbytes/libbitsandbytes_cuda130.so')
    assert not dropped('unsloth/models/_utils.py') and not dropped('unsloth_zoo/loss_utils.py')
