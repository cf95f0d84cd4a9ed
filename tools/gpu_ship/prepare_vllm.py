"""Pack vLLM 0.26.0 and the wheels the GPU machine lacks (with --also, the pipeline's too) into pieces that fit one device
call each (CPU side).

    python tools/gpu_ship/prepare_vllm.py --tier core      # vllm + the wheels `from vllm import LLM` is expected to need
    python tools/gpu_ship/prepare_vllm.py --tier full      # every wheel of the list (optional kernel packages too)

The GPU machine has Python 3.12, torch 2.11.0+cu130 (vLLM 0.26.0's pin) and transformers 5.17 (vLLM asks >= 5.5.3), no
network, and takes at most 64 MiB of working tree per call. This script
  0. adds --out and --wheels to .git/info/exclude, so that they neither travel nor show as untracked;
  1. reads the wheel list (tools/gpu_ship/vllm-0.26.0-wheels.txt: file names of the wheels missing there, with sizes)
     and drops torch (the list's torch 2.10 is spurious: vLLM pins torch==2.11.0, which the machine has), transformers
     (the machine's satisfies vLLM), setuptools (the machine's own) and, for --tier core, the large optional kernel / toolchain packages (--tier full
     keeps them); adds torchcodec 0.14.x (vLLM asks >= 0.14);
  2. downloads exactly those versions with `pip download --no-deps` for CPython 3.12 manylinux x86_64 into --wheels;
  3. writes one uncompressed tar of the wheels, split as it is written into pieces of --piece-mib MiB (default: what is
     left of 64 MiB after the working tree as it is now, less --margin-mib), into --out/parts/;
  4. writes --out/manifest.json (every wheel and every piece with its size and sha256) and --out/SHA256SUMS.
Then `install_vllm.py` on the device receives the pieces one call at a time (checking each against the manifest),
joins and unpacks them, checks every wheel and installs them offline. The calls to make are printed at the end.
--out should be ignored by git (the default .vllm_ship/ is added to .git/info/exclude).
"""
import argparse, hashlib, json, re, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALWAYS_SKIP = {'torch', 'transformers', 'setuptools'}   # the machine's own (vLLM asks setuptools < 81; the list's is 84)
# large packages of optional kernels and compilers (Triton/TileLang/CUTLASS DSL paths, video decode, SMT solver, numba):
# left out of the core tier; ship them with --tier full if `from vllm import LLM` or a generate() asks for them
OPTIONAL = {'tokenspeed_triton', 'tokenspeed_mla', 'nvidia_cutlass_dsl', 'nvidia_cutlass_dsl_libs_cu13', 'nvidia_cutlass_dsl_libs_base',
            'nvidia_cutlass_dsl_libs_core', 'nvidia_nvvm', 'nvidia_cuda_nvcc', 'nvidia_cuda_nvdisasm', 'nvidia_cuda_crt',
            'nvidia_cuda_cccl', 'tilelang', 'pynvvideocodec', 'z3_solver', 'quack_kernels', 'humming_kernels', 'cuda_tile',
            'llvmlite', 'numba'}
EXTRA = ['torchcodec>=0.14,<0.15']   # vLLM asks >= 0.14; the oldest it accepts, as newer releases may be built for newer torch
PLATFORMS = ['manylinux1_x86_64', 'manylinux2010_x86_64', 'manylinux2014_x86_64', 'linux_x86_64'] + \
            [f'manylinux_2_{n}_x86_64' for n in range(5, 40)]


def norm(name):
    return re.sub(r'[-_.]+', '_', name).lower()


def parse_list(path):
    "(normalised name, version, file name, listed bytes) for every wheel line of the list."
    out = []
    for line in Path(path).read_text().splitlines():
        if not line.strip() or line.startswith('#'): continue
        size, fname = line.split()
        name, version = fname.split('-')[:2]
        out.append((norm(name), version, fname, int(size)))
    return out


def sha256(path):
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for b in iter(lambda: f.read(1 << 20), b''): h.update(b)
    return h.hexdigest()


def tree_bytes():
    "Bytes of the working tree that travels with every call (tracked and untracked-not-ignored files)."
    files = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard', '-z'], cwd=ROOT, capture_output=True, check=True).stdout.split(b'\0')
    return sum((ROOT / f.decode()).stat().st_size for f in files if f and (ROOT / f.decode()).is_file())


class SplitWriter:
    "A write-only stream that cuts what is written into numbered files of at most `size` bytes."
    def __init__(self, folder, stem, size):
        self.folder, self.stem, self.size, self.parts, self.f, self.n = Path(folder), stem, size, [], None, 0
    def write(self, data):
        data = memoryview(data)
        while len(data):
            if self.f is None or self.n == self.size:
                if self.f: self.f.close()
                p = self.folder / f"{self.stem}.{len(self.parts):03d}"; self.parts.append(p); self.f = open(p, 'wb'); self.n = 0
            k = min(len(data), self.size - self.n)
            self.f.write(data[:k]); self.n += k; data = data[k:]
        return len(data)
    def close(self):
        if self.f: self.f.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--list', default=str(ROOT / 'tools/gpu_ship/vllm-0.26.0-wheels.txt'))
    ap.add_argument('--tier', choices=['core', 'full'], default='core')
    ap.add_argument('--wheels', default=str(ROOT / '.vllm_wheels'), help='download folder (kept: a second run reuses it)')
    ap.add_argument('--out', default=str(ROOT / '.vllm_ship'))
    ap.add_argument('--piece-mib', type=float, help='piece size; default: 64 MiB less the working tree less --margin-mib')
    ap.add_argument('--margin-mib', type=float, default=4.0)
    ap.add_argument('--no-download', action='store_true', help='use what --wheels already holds')
    ap.add_argument('--also', help="a folder of more wheels to pack with vLLM's (pipeline_wheels.py's: the pipeline's own needs)")
    a = ap.parse_args()
    out, wheels = Path(a.out), Path(a.wheels)
    excl = ROOT / '.git/info/exclude'
    rel = '/' + out.resolve().relative_to(ROOT).as_posix() + '/' if out.resolve().is_relative_to(ROOT) else None
    for d in filter(None, [rel, '/' + wheels.resolve().relative_to(ROOT).as_posix() + '/' if wheels.resolve().is_relative_to(ROOT) else None]):
        excl.parent.mkdir(parents=True, exist_ok=True)
        if d not in (excl.read_text().split() if excl.exists() else []):
            with open(excl, 'a') as f: f.write(d + '\n')
    listed = parse_list(a.list)
    keep = [w for w in listed if w[0] not in ALWAYS_SKIP and (a.tier == 'full' or w[0] not in OPTIONAL)]
    skipped = sorted({w[0] for w in listed} - {w[0] for w in keep})
    wheels.mkdir(parents=True, exist_ok=True)
    reqs = [f"{n}=={v}" for n, v, _, _ in keep] + EXTRA
    if not a.no_download:
        cmd = [sys.executable, '-m', 'pip', 'download', '--no-deps', '--only-binary=:all:', '--python-version', '3.12', '--implementation', 'cp',
               '--abi', 'cp312', '--abi', 'abi3', '--abi', 'none', '-d', str(wheels)] + [x for p in PLATFORMS for x in ('--platform', p)] + reqs
        print(f"downloading {len(reqs)} wheels into {wheels} ...", flush=True)
        subprocess.run(cmd, check=True)
    have = {}
    for p in wheels.glob('*.whl'):
        n, v = p.name.split('-')[:2]; have.setdefault(norm(n), []).append((v, p))
    chosen, missing = [], []
    for n, v, fname, _ in keep:
        match = [p for ver, p in have.get(n, []) if ver == v]
        (chosen.append(match[0]) if match else missing.append(fname))
    tc = sorted(have.get('torchcodec', []), key=lambda x: [int(t) if t.isdigit() else t for t in re.split(r'[.]', x[0])])
    if tc: chosen.append(tc[-1][1])
    else: missing.append('torchcodec>=0.14')
    if missing: sys.exit(f"not downloaded: {missing}")
    if a.also:
        extra = sorted(Path(a.also).glob('*.whl'))
        clash = sorted({norm(p.name.split('-')[0]) for p in extra} & {norm(p.name.split('-')[0]) for p in chosen})
        if clash: sys.exit(f"--also holds packages vLLM's list already ships (one version of each, or pip stops): {clash}")
        chosen += extra
    (out / 'parts').mkdir(parents=True, exist_ok=True)
    for old in (out / 'parts').glob('*'): old.unlink()
    tree = tree_bytes()
    piece = int((a.piece_mib * 2**20) if a.piece_mib else (64 * 2**20 - tree - a.margin_mib * 2**20))
    if piece < 8 * 2**20: sys.exit(f"the working tree ({tree / 2**20:.1f} MiB) leaves too little room for pieces")
    import tarfile
    w = SplitWriter(out / 'parts', 'vllm-wheels.tar', piece)
    with tarfile.open(fileobj=w, mode='w|', format=tarfile.PAX_FORMAT) as tar:
        for p in sorted(chosen): tar.add(p, arcname=p.name)
    w.close()
    manifest = {'what': 'vLLM 0.26.0 and the wheels the GPU machine lacks' + (' (with the pipeline\'s, from --also)' if a.also else '')
                        + ', for CPython 3.12 manylinux x86_64',
                'tier': a.tier, 'list': Path(a.list).name, 'skipped_packages': skipped, 'extra': EXTRA,
                'install': 'python3 tools/gpu_ship/install_vllm.py install',
                'wheels': [{'file': p.name, 'bytes': p.stat().st_size, 'sha256': sha256(p)} for p in sorted(chosen)],
                'tar': 'vllm-wheels.tar', 'piece_bytes': piece, 'tree_bytes_when_packed': tree,
                'pieces': [{'file': p.name, 'bytes': p.stat().st_size, 'sha256': sha256(p)} for p in w.parts]}
    manifest['wheel_bytes'] = sum(x['bytes'] for x in manifest['wheels'])
    (out / 'manifest.json').write_text(json.dumps(manifest, indent=1))
    (out / 'SHA256SUMS').write_text(''.join(f"{x['sha256']}  parts/{x['file']}\n" for x in manifest['pieces']) +
                                    ''.join(f"{x['sha256']}  wheels/{x['file']}\n" for x in manifest['wheels']))
    n = len(manifest['pieces'])
    print(f"{len(chosen)} wheels, {manifest['wheel_bytes'] / 1e6:.1f} MB -> {n} pieces of <= {piece / 2**20:.1f} MiB in {out / 'parts'}")
    print(f"skipped: {', '.join(skipped)}")
    relout = rel.strip('/') if rel else str(out)
    print("device calls, back to back on one warm machine (it goes back after 30 s idle):")
    for i, p in enumerate(manifest['pieces']):
        last = i == n - 1
        cmd = 'python3 tools/gpu_ship/install_vllm.py receive' + (' && python3 tools/gpu_ship/install_vllm.py install' if last else '')
        print(f"  run(carry=['{relout}/manifest.json', '{relout}/parts/{p['file']}'], command='{cmd}')")


if __name__ == '__main__':
    main()
