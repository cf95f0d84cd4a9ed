"""Wheels of the Mamba-2 kernels for the GPU machine (no network there, no prebuilt wheels on PyPI), built on a CPU machine.

    python tools/gpu_ship/build_mamba_wheels.py --python /path/to/python3.12 --cuda-home /usr/local/cuda-13.0 --out .mamba_wheels

- causal-conv1d 1.7.0 (the short convolution, a CUDA extension): its sdist, compiled for sm_90 only (the H200; the
  setup.py's own list of nine architectures is cut to one, and nvcc runs one thread) against the torch the GPU
  machine has: `--python` must be a Python 3.12 with torch 2.11.0+cu130 and an nvcc 13.0 in `--cuda-home`.
  About 8 minutes on one core. The wheel links the machine's libtorch/libc10_cuda/libcudart.so.13.
- mamba-ssm 2.3.2.post1 without its CUDA extension (MAMBA_SKIP_CUDA_BUILD): the Mamba-2 training and decoding kernels
  transformers calls (`ops.triton.ssd_combined`, `ops.triton.selective_state_update`, the gated RMSNorm) are Triton and
  pure Python. Its `__init__` imports the Mamba-1 CUDA scan (`selective_scan_cuda`) unconditionally, which would make
  `import mamba_ssm` fail and transformers fall back to its PyTorch scan; the wheel's `__init__` imports the Mamba-1
  and Mamba-3 modules only where their extensions exist. Nothing else is changed.
Writes both wheels and a manifest with their sha256 to --out. On the GPU machine: `pip install --no-index --no-deps
--target DIR` both, and put DIR on PYTHONPATH; transformers then resolves every Nemotron-H Mamba function to them
(`benchmarks/train_speed.py --variants kernel-check` lists them and compares loss and gradients with the PyTorch path).
"""
import argparse, hashlib, json, os, re, shutil, subprocess, sys, tarfile, tempfile
from pathlib import Path

CAUSAL, MAMBA = ('causal-conv1d', '1.7.0'), ('mamba-ssm', '2.3.2.post1')

MAMBA_INIT = '''__version__ = "{version}"

# Installed without the CUDA extension (MAMBA_SKIP_CUDA_BUILD=TRUE): the Mamba-2 Triton kernels under mamba_ssm.ops.triton
# import on their own; the Mamba-1 selective scan (selective_scan_cuda) and the Mamba-3 modules (TileLang, CuTe) load only
# where their extensions are present.
try:
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, mamba_inner_fn
    from mamba_ssm.modules.mamba_simple import Mamba
except ImportError:
    pass
try:
    from mamba_ssm.modules.mamba2 import Mamba2
except ImportError:
    pass
try:
    from mamba_ssm.modules.mamba3 import Mamba3
except ImportError:
    pass
try:
    from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel
except ImportError:
    pass
'''


def sdist(py, name, version, dest):
    "The sdist from the package index (pip prepares its metadata, so torch must import in `py`)."
    env = {**os.environ, 'CAUSAL_CONV1D_SKIP_CUDA_BUILD': 'TRUE', 'MAMBA_SKIP_CUDA_BUILD': 'TRUE'}
    subprocess.run([py, '-m', 'pip', 'download', '--no-deps', '--no-build-isolation', '--no-binary', ':all:', f'{name}=={version}',
                    '-d', str(dest)], check=True, env=env)
    tgz = next(Path(dest).glob(f"{name.replace('-', '_')}-{version}.tar.gz"))
    with tarfile.open(tgz) as t: t.extractall(dest, filter='data')
    return Path(dest) / tgz.name[:-len('.tar.gz')]


def only_sm90(setup_py: Path):
    s = setup_py.read_text()
    start = s.index('        cc_flag.append("-gencode")\n        cc_flag.append("arch=compute_75')
    end = s.index('    # HACK: The compiler flag')
    s = s[:start] + '        cc_flag += ["-gencode", "arch=compute_90,code=sm_90"]   # the H200 only\n\n' + s[end:]
    setup_py.write_text(re.sub(r'\["--threads", "\d+"\]', '["--threads", "1"]', s))


def sha256(p):
    h = hashlib.sha256()
    with open(p, 'rb') as f:
        for b in iter(lambda: f.read(1 << 20), b''): h.update(b)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--python', required=True, help='a Python 3.12 with torch 2.11.0+cu130 (the GPU machine\'s)')
    ap.add_argument('--cuda-home', default='/usr/local/cuda-13.0')
    ap.add_argument('--out', default='.mamba_wheels')
    ap.add_argument('--jobs', default='1')
    a = ap.parse_args()
    out = Path(a.out).resolve(); out.mkdir(parents=True, exist_ok=True)   # pip wheel runs in the sources' folder
    site = subprocess.run([a.python, '-c', 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))'],
                          capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        src = sdist(a.python, *CAUSAL, tmp)
        only_sm90(src / 'setup.py')
        env = {**os.environ, 'CUDA_HOME': a.cuda_home, 'CAUSAL_CONV1D_FORCE_BUILD': 'TRUE', 'MAX_JOBS': a.jobs, 'TORCH_CUDA_ARCH_LIST': '9.0',
               'CPATH': os.pathsep.join(filter(None, [f'{site}/nvidia/cu13/include', os.environ.get('CPATH')]))}
        subprocess.run([a.python, '-m', 'pip', 'wheel', '--no-build-isolation', '--no-deps', '-w', str(out), '.'], cwd=src, check=True, env=env)
        src = sdist(a.python, *MAMBA, tmp)
        (src / 'mamba_ssm/__init__.py').write_text(MAMBA_INIT.format(version=MAMBA[1]))
        env = {**os.environ, 'MAMBA_SKIP_CUDA_BUILD': 'TRUE', 'MAMBA_FORCE_BUILD': 'TRUE'}
        subprocess.run([a.python, '-m', 'pip', 'wheel', '--no-build-isolation', '--no-deps', '-w', str(out), '.'], cwd=src, check=True, env=env)
    manifest = {w.name: {'bytes': w.stat().st_size, 'sha256': sha256(w)} for w in sorted(out.glob('*.whl'))}
    (out / 'manifest.json').write_text(json.dumps(manifest, indent=1))
    print(json.dumps(manifest, indent=1))


if __name__ == '__main__':
    main()
