"""Ship vLLM and the pipeline's wheels to the GPU machine in as few device calls as possible (CPU side, then device side).

    python tools/gpu_ship/pack_site.py pack      # here: install every wheel into one folder, compress it, cut it in pieces
    python3 tools/gpu_ship/pack_site.py unpack   # there, after the last piece arrived: check, join, decompress to /tmp/site

Shipping the wheels themselves (prepare_vllm.py + install_vllm.py) costs one call per ~44 MiB of deflate-compressed
wheels. Installed and compressed as one zstd stream with a long window, the same files are a third smaller (vLLM's
FlashAttention-3 library goes from 38 MB deflated to 10 MB: its kernels repeat across head sizes): 411 MB of wheels
were 268 MB in 8 calls on 2026-12-01 (benchmarks/results/site_ship_manifest.json).
`pack` installs prepare_vllm.py's chosen wheels (--ship's manifest) and pipeline_wheels.py's (--pipeline) with pip
--target into one folder, using a Python 3.12 interpreter (--python) so that pip takes the GPU machine's wheel tags,
then writes one `tar | zstd -19 --long=27` stream cut into pieces that fit beside the working tree (--piece-mib), a
manifest with every piece's sha256, and the zstandard wheel that `unpack` decompresses with (the machine has no zstd).
Each device call carries one piece (`carry: [.site_ship/manifest.json, .site_ship/parts/site.NN]`) and starts with
`mkdir -p /tmp/ship && cp .site_ship/parts/* /tmp/ship/`: a call removes the pieces an earlier call carried into the
repository, so each moves its own out. The call with the last piece carries the zstandard wheel too and runs `unpack`,
which refuses a missing or changed piece by name before it writes anything.
The pieces are cut to what the tree leaves of a call: on 2026-12-07 (97 wheels, 240 MiB) 11 pieces beside the ~41 MB tree,
6 with both bases' weights moved aside (data/tiny_base and data/nemotron_h_small's model.safetensors, which the speed
and ssmstate lanes do not read). Move them aside before `pack` (or `cut`) and for every call, then put them back.
"""
import argparse, hashlib, json, shutil, subprocess, sys, tarfile, zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIP = ROOT / '.site_ship'
WINDOW_LOG = 27                       # zstd's default decoder limit; larger windows need the decoder told


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for b in iter(lambda: f.read(1 << 20), b''): h.update(b)
    return h.hexdigest()


def tree_bytes() -> int:
    "Bytes of what a device call sends without carry: tracked and untracked-not-ignored files."
    out = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'], cwd=ROOT,
                         capture_output=True, check=True).stdout.split(b'\0')
    return sum((ROOT / p.decode()).stat().st_size for p in out if p and (ROOT / p.decode()).is_file())


def project(wheel: Path) -> str:
    "A wheel's project, normalised as pip compares them (the file name's first field)."
    return wheel.name.split('-')[0].replace('.', '_').lower()


def ship_wheels(listed: list, pipeline: list) -> list:
    """vLLM's wheels, then the pipeline's that vLLM's list does not hold already: a file in both folders (dill 0.4.1)
    once, since pip refuses the same version named twice. Two versions of one project are refused here, by name."""
    seen = {}
    for w in [*listed, *pipeline]:
        first = seen.setdefault(project(w), w)
        if first.name.split('-')[1] != w.name.split('-')[1]:
            sys.exit(f"pack: {first} and {w} are two versions of {project(w)}; keep one (prepare_vllm.py's list or pipeline_wheels.py's)")
    return list(seen.values())


def pack(a):
    manifest = json.loads((ROOT / a.ship / 'manifest.json').read_text())
    wheels = ship_wheels([ROOT / a.wheels / w['file'] for w in manifest['wheels']], sorted((ROOT / a.pipeline).glob('*.whl')))
    missing = [str(w) for w in wheels if not w.exists()]
    if missing: sys.exit(f"pack: wheels missing: {', '.join(missing[:5])} (run prepare_vllm.py / pipeline_wheels.py)")
    stage = Path(a.stage); shutil.rmtree(stage, ignore_errors=True)
    subprocess.run([a.python, '-m', 'pip', 'install', '-q', '--no-index', '--no-deps', '--no-compile', '--target',
                    str(stage / 'site'), *map(str, wheels)], check=True)
    shutil.rmtree(SHIP, ignore_errors=True); (SHIP / 'parts').mkdir(parents=True)
    with open(ROOT / '.git/info/exclude') as f: excluded = f.read()
    if '/.site_ship/' not in excluded:
        with open(ROOT / '.git/info/exclude', 'a') as f: f.write('/.site_ship/\n')
    subprocess.run([a.python, '-m', 'pip', 'download', '-q', '--no-deps', '--only-binary=:all:', '--python-version', '3.12',
                    '--platform', 'manylinux2014_x86_64', '--platform', 'manylinux_2_17_x86_64', '-d', str(stage / 'z'),
                    'zstandard==0.25.0'], check=True)
    shutil.copy(next((stage / 'z').glob('zstandard-*.whl')), SHIP / 'zstandard.whl')
    subprocess.run(['bash', '-o', 'pipefail', '-c', f"tar -cf - -C {stage} site | zstd -q -{a.level} --long={WINDOW_LOG} -T0 "
                    f"> {stage / 'site.tar.zst'}"], check=True)
    installed = sum(p.stat().st_size for p in (stage / 'site').rglob('*') if p.is_file())
    cut(a, {'installed_bytes': installed, 'wheels': [w.name for w in wheels]})


def cut(a, about: dict | None = None):
    "Cut the compressed stream into pieces that fit one call each beside the working tree, with a manifest of their sha256."
    stream = Path(a.stage) / 'site.tar.zst'
    if about is None: about = {k: v for k, v in json.loads((SHIP / 'manifest.json').read_text()).items() if k in ('installed_bytes', 'wheels')}
    piece = int((a.piece_mib or (64 - a.margin_mib - tree_bytes() / 2**20)) * 2**20)
    shutil.rmtree(SHIP / 'parts', ignore_errors=True); (SHIP / 'parts').mkdir(parents=True)
    subprocess.run(['split', '-b', str(piece), '-d', '-a', '2', str(stream), str(SHIP / 'parts' / 'site.')], check=True)
    parts = sorted((SHIP / 'parts').iterdir())
    out = {'what': 'tar of one pip --target folder (vLLM + pipeline wheels), zstd-compressed, cut in pieces',
           'window_log': WINDOW_LOG, **about, 'piece_bytes': piece,
           'pieces': [{'file': p.name, 'bytes': p.stat().st_size, 'sha256': sha256(p)} for p in parts]}
    (SHIP / 'manifest.json').write_text(json.dumps(out, indent=1) + '\n')
    print(f"{len(about['wheels'])} wheels, {about['installed_bytes'] / 2**20:.0f} MiB installed -> {len(parts)} pieces of "
          f"<= {piece / 2**20:.1f} MiB ({sum(p.stat().st_size for p in parts) / 2**20:.0f} MiB)")
    with_wheel = parts[-1].stat().st_size + (SHIP / 'zstandard.whl').stat().st_size <= piece   # else the wheel takes a call
    for p in parts[:-1] if with_wheel else parts: print(f"  carry: [.site_ship/manifest.json, .site_ship/parts/{p.name}]")
    print(f"  carry: [.site_ship/manifest.json, .site_ship/zstandard.whl{', .site_ship/parts/' + parts[-1].name if with_wheel else ''}]"
          "   # then: python3 tools/gpu_ship/pack_site.py unpack")


def unpack(a):
    man = json.loads((ROOT / '.site_ship/manifest.json').read_text())
    parts = [Path(a.parts) / p['file'] for p in man['pieces']]
    bad = [p['file'] for p, f in zip(man['pieces'], parts) if not f.exists() or f.stat().st_size != p['bytes'] or sha256(f) != p['sha256']]
    if bad: sys.exit(f"unpack: pieces missing or changed: {', '.join(bad)}")
    zipfile.ZipFile(ROOT / '.site_ship/zstandard.whl').extractall('/tmp/zstd_site')     # a wheel is a zip of its package
    sys.path.insert(0, '/tmp/zstd_site')
    import zstandard

    class Joined:        # the pieces as one file object, read in order
        def __init__(self, files): self.files, self.f = iter(files), None
        def read(self, n=-1):
            while True:
                if self.f is None:
                    nxt = next(self.files, None)
                    if nxt is None: return b''
                    self.f = open(nxt, 'rb')
                b = self.f.read(n)
                if b: return b
                self.f.close(); self.f = None

    stream = zstandard.ZstdDecompressor(max_window_size=2 ** man['window_log']).stream_reader(Joined(parts))
    with tarfile.open(fileobj=stream, mode='r|') as tar: tar.extractall(a.to, filter='tar')
    print(f"unpacked {len(parts)} pieces into {a.to}/site")


if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest='cmd', required=True)
    p = sub.add_parser('pack')
    p.add_argument('--ship', default='.vllm_ship', help="prepare_vllm.py's --out (its manifest names the wheels)")
    p.add_argument('--wheels', default='.vllm_wheels', help="prepare_vllm.py's --wheels")
    p.add_argument('--pipeline', default='.pipeline_wheels', help="pipeline_wheels.py's folder")
    p.add_argument('--python', default=str(ROOT / '.venv-core-3.12/bin/python'), help='a Python 3.12 (the GPU machine\'s)')
    p.add_argument('--stage', default='/tmp/site_stage')
    p.add_argument('--level', type=int, default=19)
    p.add_argument('--piece-mib', type=float, default=None)
    p.add_argument('--margin-mib', type=float, default=1.5)
    c = sub.add_parser('cut', help="cut pack's stream again (after the working tree grew or shrank)")
    c.add_argument('--stage', default='/tmp/site_stage')
    c.add_argument('--piece-mib', type=float, default=None)
    c.add_argument('--margin-mib', type=float, default=1.5)
    u = sub.add_parser('unpack')
    u.add_argument('--to', default='/tmp')
    u.add_argument('--parts', default='/tmp/ship', help='where the calls put the pieces (a call removes the carried pieces of the one before)')
    a = ap.parse_args()
    {'pack': pack, 'cut': cut, 'unpack': unpack}[a.cmd](a)
