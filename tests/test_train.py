"""End-to-end tests of training: the papermill notebook 90_train, exact resume after a SIGKILL, two CPU processes
(gloo) against one (the trainer, the contrastive terms gathered over processes, arms with parameters without gradient),
and evaluation sharded over two processes against one process."""
import json, os, subprocess, sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tpas_nb.config import RunConfig, DataConfig, OptimConfig, save_config

REPO = Path(__file__).resolve().parents[1]
WORKER = str(REPO / 'tests' / 'train_worker.py')
ENV = dict(os.environ, OMP_NUM_THREADS='1', MPLBACKEND='Agg', PYTHONWARNINGS='ignore')
SYNTH = dict(synth_train_pairs=16, synth_val_pairs=5, synth_test_pairs=5, synth_ucc_pairs=3, synth_image_size=48, synth_weather=False)


@pytest.fixture(scope='module')
def cache(tmp_path_factory):
    "One tiny SynthPAB cache shared by the tests of this module."
    return tmp_path_factory.mktemp('cache')


def tiny_config(cache, out, **kw) -> RunConfig:
    "A run of a few seconds: 32 training images, batch 8, k_test 4."
    data = DataConfig(cache_dir=str(cache), **SYNTH)
    base = dict(method='cmp', out_dir=str(out), data=data, epochs=2, batch_size=8, seed=0, k_test=4, eval_batch=4,
                optim=OptimConfig(lr=1e-3, lr_min=1e-4, warmup_steps=2))
    return RunConfig(**{**base, **kw})


def run(*args, timeout=300, **kw):
    "Run a command with one thread per process; return the CompletedProcess."
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=ENV, cwd=REPO, timeout=timeout, **kw)


def worker(*args, nproc=1, timeout=300):
    "tests/train_worker.py under python, or under torchrun with `nproc` CPU processes."
    launch = [sys.executable] if nproc == 1 else [sys.executable, '-m', 'torch.distributed.run', '--standalone', f'--nproc_per_node={nproc}']
    return run(*launch, WORKER, *args, timeout=timeout)


def ok(r):
    assert r.returncode == 0, f"exit {r.returncode}\nSTDOUT:\n{r.stdout[-3000:]}\nSTDERR:\n{r.stderr[-5000:]}"
    return r


def weights(run_dir, name='checkpoint.safetensors') -> dict:
    return load_file(str(Path(run_dir) / name))


def no_seconds(d):
    "A metrics dict without its timing entries."
    return {k: no_seconds(v) if isinstance(v, dict) else v for k, v in d.items() if k not in ('seconds',)}


def test_parameters_cell_parses_cleanly(caplog):
    "papermill reads every parameter of 90_train without a parse warning, and the defaults are the default profile's, from_flat's too."
    import logging, papermill as pm
    from tpas_nb.config import DEFAULT_PROFILE
    from tpas_nb.methods import from_flat
    with caplog.at_level(logging.WARNING):
        params = pm.inspect_notebook(str(REPO / 'nbs' / '90_train.ipynb'))
    assert not [r for r in caplog.records if 'Unable to parse' in r.getMessage()], caplog.text
    assert {'profile', 'method', 'init_checkpoint', 'epochs', 'lr', 'itm_frac'} <= set(params)
    defaults = {k: eval(p['default']) for k, p in params.items()}
    assert defaults['profile'] == DEFAULT_PROFILE == 'cpu-v4-official' and defaults['method'] == 'cmp' and defaults['seed'] == 0
    flat = {k: v for k, v in defaults.items() if k not in ('profile', 'progress', 'threads', 'out_dir')}
    assert from_flat(DEFAULT_PROFILE, **flat) == from_flat(method='cmp', seed=0)    # every other default defers to the profile
    assert from_flat().data.synth_version == 4 and from_flat().init_checkpoint == 'pretrained-v4'   # the calibrated, frozen version


def test_papermill_smoke(cache, tmp_path):
    "papermill runs 90_train with tiny parameters and leaves a complete run folder and a notebook with figures."
    out, nb = tmp_path / 'run', tmp_path / 'cmp.ipynb'
    params = dict(method='cmp', train_pairs=16, val_pairs=5, test_pairs=5, ucc_pairs=3, cache_dir=cache / 'pm', epochs=1,
                  batch_size=8, max_steps=3, warmup_steps=1, k_test=4, out_dir=out, progress=True)
    args = [a for k, v in params.items() for a in ('-p', k, v)]
    r = ok(run(sys.executable, '-m', 'papermill', 'nbs/90_train.ipynb', nb, *args, '--no-progress-bar', '--log-output'))
    log_out = r.stdout + r.stderr                                    # the README's --log-output: plain lines, no HTML bars
    assert '<progress' not in log_out and '<div' not in log_out, log_out[-3000:]
    assert 'step 3/3 (epoch 1/1)' in log_out, log_out[-3000:]
    names = {p.name for p in out.iterdir()}
    assert {'config.yaml', 'checkpoint.safetensors', 'state.pt', 'best.safetensors', 'log.jsonl', 'metrics.json',
            'loss_curves.png', 'retrieval_examples.png'} <= names, names
    m = json.loads((out / 'metrics.json').read_text())
    assert sorted(m['splits']) == ['heldout', 'test', 'ucc', 'val']
    for split in m['splits'].values():
        for subset in ('all', 'normal', 'anomaly', 'identity'):
            assert set(split[subset]) == {'R1', 'R5', 'R10', 'mAP', 'mINP'}
        assert 0 <= split['hard_pair_acc'] <= 100
    assert m['train']['steps'] == 3 and m['selection']['split'] == 'val'
    log = [json.loads(l) for l in (out / 'log.jsonl').read_text().splitlines()]
    assert [r['step'] for r in log] == [1, 2, 3] and all({'loss_itc', 'loss_itm', 'loss_mlm', 'lr', 'temperature'} <= set(r) for r in log)
    cells = json.loads(nb.read_text())['cells']
    assert any(c.get('metadata', {}).get('tags') == ['injected-parameters'] for c in cells)
    pngs = [o for c in cells if c['cell_type'] == 'code' for o in c.get('outputs', []) if 'image/png' in o.get('data', {})]
    assert len(pngs) == 2, 'the loss curves and the retrieval examples are shown'


def test_papermill_bad_method(cache, tmp_path):
    "An unknown method name fails the notebook with the list of valid names."
    r = run(sys.executable, '-m', 'papermill', 'nbs/90_train.ipynb', tmp_path / 'x.ipynb', '-p', 'method', 'clip',
            '-p', 'cache_dir', cache / 'pm', '-p', 'train_pairs', 16, '-p', 'val_pairs', 5, '-p', 'test_pairs', 5,
            '-p', 'ucc_pairs', 3, '-p', 'out_dir', tmp_path / 'run', '--no-progress-bar')
    assert r.returncode != 0 and "valid methods" in r.stderr + r.stdout


def test_resume_after_kill_is_exact(cache, tmp_path):
    "CMP killed (SIGKILL) right after its epoch-1 checkpoint and resumed ends with the weights of an uninterrupted run."
    full, part = tmp_path / 'full', tmp_path / 'part'
    save_config(tiny_config(cache, full), tmp_path / 'full.yaml')
    save_config(tiny_config(cache, part), tmp_path / 'part.yaml')
    ok(worker('train', tmp_path / 'full.yaml'))
    killed = worker('train', tmp_path / 'part.yaml', '--kill-after-epoch', 1)
    assert killed.returncode == -9, (killed.returncode, killed.stderr[-2000:])
    assert not (part / 'metrics.json').exists()
    steps_before = len((part / 'log.jsonl').read_text().splitlines())
    ok(worker('train', tmp_path / 'part.yaml'))
    assert steps_before == 4                                   # 32 images / batch 8 = 4 steps per epoch
    a, b = weights(full), weights(part)
    assert sorted(a) == sorted(b)
    diff = [k for k in a if not torch.equal(a[k], b[k])]
    assert not diff, f"{len(diff)} tensors differ, e.g. {diff[:5]}"
    assert all(torch.equal(x, y) for x, y in zip(weights(full, 'best.safetensors').values(), weights(part, 'best.safetensors').values()))
    ma, mb = (json.loads((d / 'metrics.json').read_text()) for d in (full, part))
    assert no_seconds(ma['splits']) == no_seconds(mb['splits'])
    strip = lambda p: [{k: v for k, v in json.loads(l).items() if k != 'samples_per_s'} for l in p.read_text().splitlines()]
    assert strip(full / 'log.jsonl') == strip(part / 'log.jsonl')


def test_two_processes_match_one(cache, tmp_path):
    "Two gloo processes on global batches of 8 give the weights of one process on the same batches (4 + 4, accumulated)."
    one, two = tmp_path / 'one', tmp_path / 'two'
    kw = dict(method='toy', epochs=1, max_steps=4, optim=OptimConfig(lr=1e-2, lr_min=1e-3, warmup_steps=0))
    save_config(tiny_config(cache, one, grad_accum=2, **kw), tmp_path / 'one.yaml')
    save_config(tiny_config(cache, two, grad_accum=1, **kw), tmp_path / 'two.yaml')
    ok(worker('train', tmp_path / 'one.yaml', '--toy'))
    ok(worker('train', tmp_path / 'two.yaml', '--toy', nproc=2))
    m2 = json.loads((two / 'metrics.json').read_text())
    assert m2['train']['processes'] == 2 and json.loads((one / 'metrics.json').read_text())['train']['processes'] == 1
    a, b = weights(one), weights(two)
    assert sorted(a) == sorted(b)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=lambda m: f"{k}: {m}")
    la = [json.loads(l) for l in (one / 'log.jsonl').read_text().splitlines()]
    lb = [json.loads(l) for l in (two / 'log.jsonl').read_text().splitlines()]
    assert [r['step'] for r in la] == [r['step'] for r in lb] == [1, 2, 3, 4]
    for x, y in zip(la, lb): assert abs(x['loss'] - y['loss']) < 1e-5, (x, y)


# the contrastive terms only: ITM negatives and MLM masks are drawn per process (as in X-VLM), so they differ by design
CONTRASTIVE = {'cmp': {'itc': 1.0, 'itm': 0.0, 'mlm': 0.0},
               'seda': {'itc': 1.0, 'itm': 0.0, 'mlm': 0.0, 'fdl': 1.0, 'itm_sem': 0.0},
               'gradco': {'itc': 1.0, 'itm': 0.0, 'mlm': 0.0, 'dir': None}}
EXTRA = {'gradco': {'counterpart_batches': False}}   # with GradCO's counterpart batches the whole gradient still agrees to 1e-5 of its norm, but one
                                                     # gate's tiny gradient differs by 1.7e-4 relative (cancellation); the per-parameter check uses random batches


@pytest.mark.parametrize('method', sorted(CONTRASTIVE))
def test_gathered_contrastive_terms_match_one_process(cache, tmp_path, method):
    """Two gloo processes with 4 pairs each give the loss and every gradient of one process on the same batch of 8 (dropout
    off): ITC (CMP), ITC and FDL (SeDA), ITC on S_final and L_dir over the offload anchors of all pairs (GradCO). The features
    are gathered over the processes with their gradients (gather_with_grad); per-process ITC (the behaviour before) puts
    CMP's gradients 18% away."""
    for name, nproc in (('one', 1), ('two', 2)):
        save_config(tiny_config(cache, tmp_path / name, method=method, method_args={'loss_weights': CONTRASTIVE[method], **EXTRA.get(method, {})},
                                epochs=1, max_steps=1), tmp_path / f'{name}.yaml')
        ok(worker('grads', tmp_path / f'{name}.yaml', '--out', tmp_path / f'{name}.pt', nproc=nproc))
    one, two = (torch.load(tmp_path / f'{n}.pt') for n in ('one', 'two'))
    assert (one['processes'], one['gather'], two['processes'], two['gather']) == (1, False, 2, True)
    terms = [k for k in ('loss', 'loss_itc', 'loss_fdl', 'loss_dir') if k in one['losses']]
    assert len(terms) == {'cmp': 2, 'seda': 3, 'gradco': 3}[method]
    for k in terms: assert abs(one['losses'][k] - two['losses'][k]) <= 2e-6 * max(1.0, abs(one['losses'][k])), (k, one['losses'], two['losses'])
    a, b = one['grads'], two['grads']
    assert sorted(a) == sorted(b)                              # the same parameters have a gradient (the others: None on both)
    total = torch.cat([g.flatten() for g in a.values()]).norm()
    assert torch.cat([(a[k] - b[k]).flatten() for k in a]).norm() <= 1e-5 * total
    for k in a:
        if a[k].norm() > 1e-5 * total: assert (a[k] - b[k]).norm() <= 1e-4 * a[k].norm(), k


@pytest.mark.parametrize('arm', ['D#12', 'D#13'])
def test_arms_without_gradient_train_on_two_processes(cache, tmp_path, arm):
    """GradCO D#12 (ITC weight 0: τ gets no gradient) and D#13 (ITM weight 0: the ITM head gets none) stopped DDP at the
    second forward ("Expected to have finished reduction in the prior iteration"); with find_unused_parameters
    (make_accelerator) they train on two processes with gradient accumulation, and those parameters stay as on one process:
    never stepped, never decayed."""
    from tpas_nb.methods.gradco import GRADCO_ARMS
    args = {'loss_weights': GRADCO_ARMS[arm]['loss_weights']}
    for name, nproc in (('one', 1), ('two', 2)):
        save_config(tiny_config(cache, tmp_path / name, method='gradco', method_args=args, epochs=1, max_steps=2, grad_accum=2),
                    tmp_path / f'{name}.yaml')
        ok(worker('train', tmp_path / f'{name}.yaml', nproc=nproc))
    a, b = weights(tmp_path / 'one'), weights(tmp_path / 'two')
    idle = [k for k in a if (k == 'backbone.temp' if arm == 'D#12' else k.startswith('backbone.itm_head.'))]
    assert len(idle) == (1 if arm == 'D#12' else 6)
    for k in idle: assert torch.equal(a[k], b[k]), k
    if arm == 'D#12': assert b['backbone.temp'].item() == torch.tensor(0.07).item()
    log = [json.loads(l) for l in (tmp_path / 'two' / 'log.jsonl').read_text().splitlines()]
    assert [r['step'] for r in log] == [1, 2] and all(('loss_itc' if arm == 'D#12' else 'loss_itm') in r for r in log)


def test_sharded_evaluation_is_exact(cache, tmp_path):
    "evaluate_run on two processes gives exactly the metrics of one process (no duplicated or dropped gallery items)."
    out = tmp_path / 'run'
    save_config(tiny_config(cache, out, epochs=1, max_steps=2), tmp_path / 'run.yaml')
    ok(worker('train', tmp_path / 'run.yaml'))
    ok(worker('eval', out, '--out', tmp_path / 'one.json'))
    ok(worker('eval', out, '--out', tmp_path / 'two.json', nproc=2))
    one, two = (json.loads((tmp_path / f).read_text()) for f in ('one.json', 'two.json'))
    assert (one.pop('world_size'), two.pop('world_size')) == (1, 2)
    for split in ('test', 'ucc', 'val'):
        assert one[split]['n_gallery'] % 8, 'a gallery that does not split evenly into 2 processes × batches of 4'
    assert no_seconds(one) == no_seconds(two)


def test_parameters_cell_lists_every_switch():
    "The method switches of 90_train's parameters cell are those of the registered method configs (.ci/make_params.py)."
    r = run(sys.executable, REPO / '.ci' / 'make_params.py', '--check')
    assert r.returncode == 0, r.stderr + r.stdout


@pytest.mark.slow
@pytest.mark.parametrize('arm', ['cmp', 'gradco', 'seda_ca', 'cmp_qct'])
def test_loss_curves_as_before(cache, tmp_path, arm):
    """A fixed-seed 20-step run gives the loss curve that the code before the run-folder/trainer/method-hooks refactor gave
    (tests/fixtures/loss_curves_9c08c06.json: 5 epochs of 16 pairs, batch 8, one torch thread); the attention and InfoNCE
    rewrites change the float summation order, hence the tolerance. Issue 15's new defaults (GradCO's counterpart batches, pretrained
    stream heads and scaled top gate, SeDA's summed ITM-sem) are switched off, and so is c7f0175's ITM draw that skips the IHNM
    partner: the old behaviour is a switch away."""
    before = {'itm_draw_partner': True}   # the in-batch ITM draw may pick the IHNM partner, as before c7f0175 (off since: the papers' batches hold other people)
    method, args = {'cmp': ('cmp', before), 'cmp_qct': ('cmp', {**before, 'qct_weight': 0.5}),
                    'gradco': ('gradco', {'counterpart_batches': False, 'stream_heads': 'fresh', 'top_gate_scale': False}),  # as before issue 15
                    'seda_ca': ('seda', {**before, 'stp_weighting': 'cross_attention', 'itm_sem_sum': False})}[arm]   # ITM-sem's mean, as before
    want = json.loads((REPO / 'tests' / 'fixtures' / 'loss_curves_9c08c06.json').read_text())['curves'][arm]
    synth = dict(SYNTH, synth_test_pairs=6)
    config = RunConfig(method=method, method_args=args, out_dir=str(tmp_path / arm), data=DataConfig(cache_dir=str(cache / 'curves'), **synth),
                       epochs=5, batch_size=8, seed=0, k_test=4, eval_batch=4, optim=OptimConfig(lr=1e-3, lr_min=1e-4, warmup_steps=2))
    save_config(config, tmp_path / 'c.yaml')
    ok(worker('train', tmp_path / 'c.yaml'))
    got = [json.loads(l) for l in (tmp_path / arm / 'log.jsonl').read_text().splitlines()]
    assert len(got) == len(want) == 20
    for g, w in zip(got, want):
        assert set(w) <= set(g), (w, g)
        for k, v in w.items(): assert abs(g[k] - v) <= 1e-5 * max(1.0, abs(v)), (arm, g['step'], k, g[k], v)


def test_misspelt_switch_is_refused_with_no_prior_import():
    # a fresh interpreter that imports from_flat only: it brings the method table with it (issue 29)
    code = ("from tpas_nb.methods import from_flat\n"
            "try: from_flat(method='cmp', poes=True)\n"
            "except ValueError as e: print(e)\n"
            "else: raise SystemExit('accepted')\n"
            "print(from_flat(method='cmp', pose=False).method_args['pose'])")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env={**os.environ, 'OMP_NUM_THREADS': '1'})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "unknown parameter 'poes'" in out.stdout and "not a switch of method 'cmp'" in out.stdout, out.stdout
    assert out.stdout.strip().endswith('False'), out.stdout


def test_cross_encoder_alone_leaves_the_rest_frozen(cache, tmp_path):
    "lr_mult_base 0: every parameter outside the optimizer stops asking for gradients, and only the cross encoder's change."
    from tpas_nb.training.trainer import Trainer
    from tpas_nb.training.schedule import cross_ids
    optim = OptimConfig(lr=1e-3, lr_min=1e-4, warmup_steps=0, lr_mult_base=0.0)
    t = Trainer.from_config(tiny_config(cache, tmp_path / 'only_cross', method='xvlm', epochs=1, optim=optim), progress=False)
    names = {id(p): n for n, p in t.model.named_parameters()}
    cross = {names[i] for i in cross_ids(t.model)}
    assert cross and {n for n, p in t.model.named_parameters() if p.requires_grad} == cross
    before = {n: p.detach().clone() for n, p in t.model.named_parameters()}
    t.fit()
    changed = {n for n, p in t.model.named_parameters() if not torch.equal(before[n], p.detach())}
    assert changed and changed <= cross, sorted(changed - cross)[:5]
