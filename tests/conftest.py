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
