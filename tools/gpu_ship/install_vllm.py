"""Receive, join and install the vLLM pieces that `prepare_vllm.py` packed (run on the GPU machine; standard library only).

    python3 tools/gpu_ship/install_vllm.py receive     # each call: keep the pieces this call carried, checked against the manifest
    python3 tools/gpu_ship/install_vllm.py install     # once all are there: join, unpack, check every wheel, pip install offline
    python3 tools/gpu_ship/install_vllm.py status      # which pieces are there, which are missing

Pieces are kept in --store (default /tmp/vllm_parts), which lasts as long as the machine stays up: send them on one warm
machine, back to back. `install` unpacks the tar stream into /tmp/vllm_wheels, compares every wheel's sha256 with the
manifest, installs them with `pip install --no-index --no-deps --no-compile --target /tmp/vllm_site`, and runs
`from vllm import LLM` with PYTHONPATH=/tmp/vllm_site (prepend it in later commands). torch and transformers stay the
machine's own. Exit status 0 only when every step passed.
"""
import argparse, hashlib, json, os, shutil, subprocess, sys, tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# modules an offline generate() loads on CUDA, imported after the install to show early what is missing
PROBE = ['vllm.entrypoints.llm', 'vllm.v1.engine.core', 'vllm.v1.worker.gpu_worker', 'vllm.v1.worker.gpu_model_runner',
         'vllm.model_executor.models.llama', 'vllm.model_executor.models.qwen3_moe', 'vllm.model_executor.models.nemotron_h',
         'vllm.v1.sample.sampler', 'vllm.v1.attention.backends.flash_attn', 'vllm.v1.attention.backends.flashinfer',
         'vllm.model_executor.layers.fused_moe.fused_moe', 'vllm.model_executor.model_loader.dummy_loader',
         'vllm.lora.request', 'vllm.v1.spec_decode.ngram_proposer']


def sha256(path):
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for b in iter(lambda: f.read(1 << 20), b''): h.update(b)
    return h.hexdigest()


class Joined:
    "The pieces, in order, read as one stream."
    def __init__(self, paths):
        self.paths, self.f = list(paths), None
    def read(self, n=-1):
        out = b''
        while n < 0 or len(out) < n:
            if self.f is None:
                if not self.paths: break
                self.f = open(self.paths.pop(0), 'rb')
            b = self.f.read(-1 if n < 0 else n - len(out))
            if not b: self.f.close(); self.f = None; continue
            out += b
        return out


def status(store, manifest):
    ok, missing = [], []
    for p in manifest['pieces']:
        f = store / p['file']
        (ok if f.exists() and f.stat().st_size == p['bytes'] else missing).append(p['file'])
    return ok, missing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('action', choices=['receive', 'install', 'status'])
    ap.add_argument('--ship', default=str(ROOT / '.vllm_ship'), help='where a call carries manifest.json and parts/')
    ap.add_argument('--store', default='/tmp/vllm_parts'); ap.add_argument('--wheels', default='/tmp/vllm_wheels')
    ap.add_argument('--target', default='/tmp/vllm_site')
    a = ap.parse_args()
    ship, store = Path(a.ship), Path(a.store); store.mkdir(parents=True, exist_ok=True)
    if (ship / 'manifest.json').exists(): shutil.copy(ship / 'manifest.json', store / 'manifest.json')
    if not (store / 'manifest.json').exists(): sys.exit('no manifest.json: carry .vllm_ship/manifest.json with the first piece')
    manifest = json.loads((store / 'manifest.json').read_text())
    want = {p['file']: p for p in manifest['pieces']}
    if a.action == 'receive':
        for f in sorted((ship / 'parts').glob('*')) if (ship / 'parts').exists() else []:
            p = want.get(f.name)
            if p is None: sys.exit(f"{f.name}: not in the manifest")
            if f.stat().st_size != p['bytes'] or sha256(f) != p['sha256']: sys.exit(f"{f.name}: size or sha256 differs from the manifest")
            shutil.copy(f, store / f.name)
            print(f"received {f.name} ({p['bytes']} bytes, sha256 ok)")
    ok, missing = status(store, manifest)
    print(f"{len(ok)} of {len(want)} pieces here; missing: {' '.join(missing) or 'none'}", flush=True)
    if a.action != 'install': return
    if missing: sys.exit('install: pieces missing')
    for p in manifest['pieces']:
        if sha256(store / p['file']) != p['sha256']: sys.exit(f"{p['file']}: sha256 differs from the manifest")
    wheels = Path(a.wheels); shutil.rmtree(wheels, ignore_errors=True); wheels.mkdir(parents=True)
    with tarfile.open(fileobj=Joined(store / p['file'] for p in manifest['pieces']), mode='r|') as tar:
        tar.extractall(wheels, filter='data')
    for w in manifest['wheels']:
        f = wheels / w['file']
        if not f.exists() or sha256(f) != w['sha256']: sys.exit(f"{w['file']}: missing or sha256 differs after unpacking")
    print(f"{len(manifest['wheels'])} wheels unpacked, every sha256 equal to the manifest", flush=True)
    r = subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--no-index', '--no-deps', '--no-compile', '--no-cache-dir', '--upgrade',
                        '--target', a.target] + [str(wheels / w['file']) for w in manifest['wheels']])
    if r.returncode: sys.exit(f"pip install failed ({r.returncode})")
    env = {**os.environ, 'PYTHONPATH': a.target + os.pathsep + os.environ.get('PYTHONPATH', '')}
    r = subprocess.run([sys.executable, '-c', 'import torch, transformers, vllm; from vllm import LLM, SamplingParams; '
                        'print("vllm", vllm.__version__, "torch", torch.__version__, "transformers", transformers.__version__)'], env=env)
    if r.returncode: sys.exit('`from vllm import LLM` failed: see above for the missing module (ship it with prepare_vllm.py --tier full)')
    probe = ('import importlib\nfor m in %r:\n    try: importlib.import_module(m); print("imports:", m)\n'
             '    except Exception as e: print("does not import:", m, "-", type(e).__name__, str(e)[:160])') % (PROBE,)
    subprocess.run([sys.executable, '-c', probe], env=env)          # informative: what a generate() may load later
    print(f"installed into {a.target}: prepend it to PYTHONPATH")


if __name__ == '__main__':
    main()
