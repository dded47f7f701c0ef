"""End-to-end tests of the benchmark notebook 91_benchmark: papermill on a tiny trained run writes a benchmark.json with
every protocol, the embeddings and the weather plot; a run folder without weights fails with a clear message."""
import json, os, shutil, subprocess, sys
from pathlib import Path

import pytest
import torch

from tpas_nb.config import RunConfig, DataConfig, OptimConfig

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, OMP_NUM_THREADS='1', MPLBACKEND='Agg', PYTHONWARNINGS='ignore')
METRICS = {'R1', 'R5', 'R10', 'mAP', 'mINP'}
WEATHERS = ['normal', 'wind', 'rain', 'snow', 'rain_snow', 'dark', 'dark_wind', 'dark_rain', 'dark_snow', 'light']


@pytest.fixture(scope='module')
def smoke_run(tmp_path_factory):
    "A finished xvlm run of 2 steps on a SynthPAB with every split (8 test images, 9 weather copies, 4 ucc images)."
    from tpas_nb.data.synth.corpus import make_synthpab
    from tpas_nb.train import train
    d = tmp_path_factory.mktemp('bench')
    sp = make_synthpab(d / 'sp', train_pairs=8, val_pairs=2, test_pairs=4, ucc_pairs=2, weather=True, progress=False, workers=1)
    config = RunConfig(method='xvlm', data=DataConfig(root=str(sp)), epochs=1, batch_size=8, max_steps=2, k_test=4, eval_batch=8,
                       optim=OptimConfig(lr=1e-3, lr_min=1e-4, warmup_steps=1), out_dir=str(d / 'run'), device='cpu')
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try: return train(config, progress=False)
    finally: torch.set_num_threads(threads)


def papermill(out_nb, *params, timeout=300):
    "Run nbs/91_benchmark.ipynb with `-p name value` pairs from the repository root (the notebook's own kernel)."
    args = [sys.executable, '-m', 'papermill', 'nbs/91_benchmark.ipynb', out_nb, *params, '--no-progress-bar']
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=ENV, cwd=REPO, timeout=timeout)


def ok(r):
    assert r.returncode == 0, f"exit {r.returncode}\nSTDOUT:\n{r.stdout[-3000:]}\nSTDERR:\n{r.stderr[-5000:]}"
    return r


def check_metrics(m, where):
    assert set(m) == METRICS, (where, m)
    assert all(0 <= v <= 100 for v in m.values()), (where, m)


def test_papermill_benchmark(smoke_run, tmp_path):
    "papermill 91_benchmark with k_test '0,4' writes benchmark.json with every protocol, saved embeddings, the weather plot and the ucc factors."
    nb = tmp_path / 'bench.ipynb'
    ok(papermill(nb, '-p', 'run_dir', smoke_run, '-p', 'k_test', '0,4', '-p', 'progress', False, '-p', 'ood_pairs', 2))
    b = json.loads((smoke_run / 'benchmark.json').read_text())
    assert b['rankings'] == ['itc', 'itm@4'] and b['k_tests'] == [0, 4]
    assert sorted(b['splits']) == sorted(['test', 'ucc', 'heldout'] + [f'weather:{w}' for w in WEATHERS[1:]])
    assert list(b['protocols']) == ['pab', 'identity_vs_behaviour', 'weather', 'ucc', 'heldout']
    assert b['weather_conditions'] == WEATHERS
    p = b['protocols']
    for r in b['rankings']:
        for e in ('all', 'normal', 'anomaly'):
            check_metrics(p['pab'][r][e], ('pab', r, e)); check_metrics(p['ucc'][r][e], ('ucc', r, e))
        for e in ('behaviour', 'identity'): check_metrics(p['identity_vs_behaviour'][r][e], (r, e))
        assert list(p['weather'][r]) == WEATHERS + ['mean']
        for e, m in p['weather'][r].items(): check_metrics(m, ('weather', r, e))
        for k in METRICS:
            mean = sum(p['weather'][r][w][k] for w in WEATHERS) / 10
            assert abs(p['weather'][r]['mean'][k] - mean) < 1e-9
        assert p['pab'][r]['all'] == p['weather'][r]['normal'] == b['splits']['test']['rankings'][r]['all']
    assert {s['n_queries'] for s in b['splits'].values()} == {8, 4}
    assert b['embeddings'] == dict(gallery_computed=12, gallery_read=0, queries_computed=3, queries_read=0)   # test, ucc, heldout, 9 weather
    emb = smoke_run / 'embeddings'
    assert len(list(emb.glob('weather_*.pt'))) == 9 and (emb / 'test.pt').exists() and (emb / 'ucc.pt').exists()
    assert len(list(emb.glob('queries_*.pt'))) == 3
    assert (smoke_run / 'benchmark_weather.png').stat().st_size > 0
    assert (smoke_run / 'report.html').read_text().count('<html') == 1        # 51_report's page, written by the benchmark
    cells = json.loads(nb.read_text())['cells']
    assert any(c.get('metadata', {}).get('tags') == ['injected-parameters'] for c in cells)
    outs = [o for c in cells if c['cell_type'] == 'code' for o in c.get('outputs', [])]
    assert sum('image/png' in o.get('data', {}) for o in outs) == 1, 'the weather plot is shown'
    assert sum('text/html' in o.get('data', {}) for o in outs) >= 4, 'summary, protocol, split and ucc-factor tables are rendered'
    ood = json.loads((smoke_run / 'ood_factors.json').read_text())
    assert len(ood) == 8 and all(0 <= r['R@1'] <= 100 and r['gallery'] == 4 for r in ood.values())


def test_papermill_no_weights(smoke_run, tmp_path):
    "A run folder without best.safetensors fails the notebook with a message naming the missing file."
    bad = tmp_path / 'unfinished'
    bad.mkdir()
    shutil.copy(smoke_run / 'config.yaml', bad / 'config.yaml')
    r = papermill(tmp_path / 'x.ipynb', '-p', 'run_dir', bad, '-p', 'progress', False)
    assert r.returncode != 0 and 'no best.safetensors' in r.stdout + r.stderr, r.stderr[-3000:]


def test_benchmark_on_another_pab_folder(smoke_run, tmp_path):
    """A SynthPAB-trained run evaluated on another PAB-layout folder, which is not SynthPAB and has another vocab.txt (or
    none), uses the run's own tokenizer: captions with words the run never saw are split into pieces, characters it never saw
    become [UNK], and the numbers on the copied test split are those on the original."""
    from tpas_nb.eval.benchmark import benchmark_run
    from tpas_nb.runs import Run
    src = Path(json.loads((smoke_run / 'metrics.json').read_text())['data_root'])
    other = tmp_path / 'pab'
    shutil.copytree(src, other)
    (other / 'synthpab.json').unlink()                                       # a real-PAB-like folder: no vocabulary is built for it
    ref = benchmark_run(smoke_run, splits='test', k_tests=4, progress=False, device='cpu', recompute=True)
    for vocab in ('[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nzebra\n', None):
        if vocab is None: (other / 'vocab.txt').unlink()
        else: (other / 'vocab.txt').write_text(vocab)
        res = benchmark_run(smoke_run, splits='test', k_tests=4, progress=False, device='cpu', data_root=str(other))
        assert res['data_root'] == str(other) and not res['synthetic']
        assert res['splits']['test']['rankings'] == ref['splits']['test']['rankings']
    ann = other / 'annotation' / 'test' / 'attr.json'                        # the test split's JSON lines
    recs = [json.loads(l) for l in ann.read_text().splitlines() if l.strip()]
    for r in recs: r['caption'] = [c + ' with a zebra-striped 象 scarf' for c in r['caption']]
    ann.write_text(''.join(json.dumps(r) + '\n' for r in recs))
    res = benchmark_run(smoke_run, splits='test', k_tests=4, progress=False, device='cpu', data_root=str(other))
    assert res['splits']['test']['n_queries'] == ref['splits']['test']['n_queries']
    tok = Run(smoke_run).tokenizer
    assert '[UNK]' in tok.tokenize(recs[0]['caption'][0]) and len(tok.vocab) == len(Run(smoke_run, data_root=str(other)).tokenizer.vocab)
