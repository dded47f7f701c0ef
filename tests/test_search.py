"""The `tpas_search` command line end to end: a CMP run trained for two steps on a tiny SynthPAB searches the
SynthPAB test images; results.csv has topk rows per query; bad input exits with status 1 and a one-line message."""
import os, shutil, subprocess, sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from tpas_nb.config import RunConfig, DataConfig, OptimConfig

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, OMP_NUM_THREADS='1', MPLBACKEND='Agg', PYTHONWARNINGS='ignore')
CLI = [shutil.which('tpas_search')] if shutil.which('tpas_search') else [sys.executable, '-m', 'tpas_nb.search']


@pytest.fixture(scope='module')
def toy(tmp_path_factory):
    "(SynthPAB root, run folder): 8 training pairs, 4 test pairs, CMP trained for 2 steps."
    from tpas_nb.data.synth.corpus import make_synthpab
    from tpas_nb.train import train
    tmp = tmp_path_factory.mktemp('search')
    sp = make_synthpab(tmp / 'sp', train_pairs=8, val_pairs=2, test_pairs=4, ucc_pairs=0, image_size=48, weather=False,
                       progress=False, workers=1)
    cfg = RunConfig(method='cmp', data=DataConfig(root=str(sp)), epochs=1, batch_size=8, max_steps=2, k_test=4, eval_batch=8,
                    out_dir=str(tmp / 'run'), device='cpu', optim=OptimConfig(lr=1e-3, lr_min=1e-4, warmup_steps=1))
    threads = torch.get_num_threads(); torch.set_num_threads(1)
    try: run = train(cfg, progress=False)
    finally: torch.set_num_threads(threads)
    return sp, run


def search(*args, timeout=180):
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True, env=ENV, cwd=REPO, timeout=timeout)


def test_cli_writes_topk_rows_per_query(toy, tmp_path):
    "Two queries, top 3: results.csv has 3 ranked rows per query naming gallery files, and one figure per query."
    sp, run = toy
    queries = ['a woman in a red jacket is lying on the ground', 'a man running on a beach']
    r = search('--run', run, '--gallery', sp / 'test', '--pose', sp / 'pose' / 'test', '--topk', 3, '--k-test', 4,
               '--out', tmp_path / 'out', '--query', queries[0], '--query', queries[1])
    assert r.returncode == 0, f"exit {r.returncode}\nSTDOUT:\n{r.stdout[-2000:]}\nSTDERR:\n{r.stderr[-4000:]}"
    df = pd.read_csv(tmp_path / 'out' / 'results.csv')
    assert list(df.columns) == ['query', 'rank', 'path', 'score', 'itc_score', 'stage']
    assert df['query'].tolist() == [queries[0]] * 3 + [queries[1]] * 3
    for _, g in df.groupby('query'):
        assert g['rank'].tolist() == [1, 2, 3] and g['path'].is_unique
        assert (g['score'].diff().dropna() <= 1e-6).all(), g
    assert all((sp / 'test' / p).exists() for p in df['path'])
    assert sorted(p.name for p in (tmp_path / 'out').glob('query_*.jpg')) == ['query_0.jpg', 'query_1.jpg']
    assert '8 images' in r.stdout and '8 embedded' in r.stdout, r.stdout


def test_cli_empty_folder(toy, tmp_path):
    "A folder without images: status 1, one message naming the folder on stderr, no traceback."
    sp, run = toy
    (tmp_path / 'empty' / 'sub').mkdir(parents=True)
    r = search('--run', run, '--gallery', tmp_path / 'empty', '--query', 'a person sitting')
    assert r.returncode == 1, r
    assert r.stderr.startswith('tpas_search: error:') and 'no images' in r.stderr and str(tmp_path / 'empty') in r.stderr, r.stderr
    assert 'Traceback' not in r.stderr

