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
