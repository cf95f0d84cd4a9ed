import os, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault('HF_HUB_OFFLINE', '1')
os.environ.setdefault('TRANSFORMERS_OFFLINE', '1')
os.environ.setdefault('HF_DATASETS_OFFLINE', '1')
os.environ.setdefault('TOKENIZERS_PARALLELISM', 'false')

def pytest_configure(config):
    config.addinivalue_line('markers', 'gpu: needs a CUDA GPU (skipped on CPU)')
    config.addinivalue_line('markers', 'slow: a pipeline run of more than a few seconds')
    config.addinivalue_line('markers', 'study: reads the finished demo run (make test-study runs the demo first)')

def pytest_collection_modifyitems(config, items):
    try:
        import torch; has_gpu = torch.cuda.is_available()
    except ImportError: has_gpu = False
    if has_gpu: return
    skip = pytest.mark.skip(reason='needs a CUDA GPU')
    for item in items:
        if 'gpu' in item.keywords: item.add_marker(skip)

@pytest.fixture
def root(): return ROOT


# The prelude of a generation script that SIGKILLs itself in the middle of shard number argv[3] (0: never),
# while that shard's rows are being decoded: what a crash or a pre-empted job does to a long stage.
DIE_MID_SHARD = """
import os, signal, sys
from rsi_repro.generate import HFBackend
kill_at = int(sys.argv[3])
if kill_at:
    real, calls = HFBackend.generate, []
    def dying(self, *a, **k):
        calls.append(1)
        if len(calls) == kill_at: os.kill(os.getpid(), signal.SIGKILL)
        return real(self, *a, **k)
    HFBackend.generate = dying
"""
