"""Unsloth's wheels, slimmed to what its LoRA SFT on an H200 imports, for the speed lane's unsloth-* variants (run on
the CPU side).

    python tools/gpu_ship/unsloth_wheels.py --out .unsloth_wheels/slim

The GPU machine has torch, transformers, PEFT, accelerate and Triton; it lacks unsloth, unsloth_zoo and bitsandbytes
(which Unsloth imports at start, for its 4-bit paths). The three wheels are 77 MB as published, more than a device call
carries beside the tree, so each is rewritten without what a 16-bit LoRA run on CUDA 13 never loads: unsloth's
`studio/` (its web UI, 24 MB) and `unsloth_cli/`, and every bitsandbytes library but the CPU one and CUDA 13.0's (its loader picks the
library by the torch build's CUDA version). RECORD is rewritten to list exactly the files kept, with their hashes, so
that `pip install --no-index --no-deps` installs them as it would the originals. Their metadata caps trl and datasets
below the pipeline's pins, hence --no-deps (gpu_study.sh installs them so, into a target of their own).
"""
import argparse, base64, hashlib, subprocess, sys, tempfile, zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PINS = ['unsloth==2026.10.9', 'unsloth_zoo==2026.10.9', 'bitsandbytes==0.50.2']
BNB_KEPT = {'bitsandbytes/libbitsandbytes_cpu.so', 'bitsandbytes/libbitsandbytes_cuda130.so'}


def dropped(name: str) -> bool:
    "Whether a wheel member is left out of the slim wheel."
    if name.startswith(('studio/', 'unsloth_cli/')): return True
    return name.startswith('bitsandbytes/libbitsandbytes_') and name not in BNB_KEPT


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()
    return f'{name},sha256={digest},{len(data)}'


def slim(src: Path, dest: Path) -> tuple[int, int]:
    "Copy wheel `src` to `dest` without the dropped members, its RECORD listing what is kept; returns (kept, dropped)."
    kept, lines, n_dropped = [], [], 0
    with zipfile.ZipFile(src) as z:
        record = next(n for n in z.namelist() if n.endswith('.dist-info/RECORD'))
        with zipfile.ZipFile(dest, 'w', zipfile.ZIP_DEFLATED) as out:
            for info in z.infolist():
                if info.filename == record: continue
                if dropped(info.filename): n_dropped += 1; continue
                data = z.read(info)
                out.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
                lines.append(record_line(info.filename, data)); kept.append(info.filename)
            out.writestr(record, '\n'.join(lines + [f'{record},,']) + '\n')
    return len(kept), n_dropped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default=str(ROOT / '.unsloth_wheels/slim'))
    a = ap.parse_args()
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, '-m', 'pip', 'download', '--quiet', '--no-deps', '--only-binary=:all:',
                        '--python-version', '3.12', '--platform', 'manylinux_2_24_x86_64', '-d', tmp, *PINS], check=True)
        for src in sorted(Path(tmp).glob('*.whl')):
            kept, n_dropped = slim(src, out / src.name)
            print(f'{src.name}: {src.stat().st_size / 1e6:.1f} MB -> {(out / src.name).stat().st_size / 1e6:.1f} MB '
                  f'({kept} files kept, {n_dropped} left out)')


if __name__ == '__main__':
    main()
