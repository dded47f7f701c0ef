import os
import pytest

os.environ.setdefault('MPLBACKEND', 'Agg')

def pytest_configure(config):
    config.addinivalue_line('markers', 'slow: heavy runs, skipped in CI (run with --runslow)')

def pytest_addoption(parser):
    parser.addoption('--runslow', action='store_true', default=False, help='run tests marked slow')

def pytest_collection_modifyitems(config, items):
    if config.getoption('--runslow'): return
    skip = pytest.mark.skip(reason='slow: run with --runslow')
    for item in items:
        if 'slow' in item.keywords: item.add_marker(skip)

@pytest.fixture
def one_thread():
    "Torch on one thread for the test (restored after): the CPU model tests, next to other work on two cores."
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
