"""The `tpas_grid` console script: a dry run lists every run of a grid as missing (a zero-shot arm at its first seed) and writes nothing; a bad
`--set` key fails before anything runs, naming the valid keys; `--status` reports a finished run; a root whose folder
names no round is refused unless the round is given."""
import json, os, subprocess

from tpas_nb.grid import GRIDS, arm_slug, evaluated_once

ENV = dict(os.environ, OMP_NUM_THREADS='1', MPLBACKEND='Agg', PYTHONWARNINGS='ignore')


def tpas_grid(*args, timeout=300):
    "Run the installed console script; return the CompletedProcess."
    return subprocess.run(['tpas_grid', *map(str, args)], capture_output=True, text=True, env=ENV, timeout=timeout)


def test_dry_run_lists_every_run_as_missing(tmp_path):
    root = tmp_path / 'grid'
    r = tpas_grid('cmp', '--dry-run', '--root', root, '--round', 'grid')
    assert r.returncode == 0, r.stderr
    n = 3 * len(GRIDS['cmp']) - 2                       # the zero-shot arm trains nothing: its first seed only (evaluated_once)
    assert f'cmp: {n} of {n} runs not done' in r.stdout, r.stdout
    for arm in GRIDS['cmp']:
        for seed in ((0,) if evaluated_once('cmp', arm) else (0, 1, 2)):
            assert f'{arm}/seed{seed} (missing)' in r.stdout
            assert str(root / 'cmp' / arm_slug(arm) / f'seed{seed}') in r.stdout
    assert 'X-VLM zero-shot/seed1' not in r.stdout
    assert r.stdout.count('would train') == n
    assert not root.exists()


def test_set_rejects_unknown_key(tmp_path):
    r = tpas_grid('cmp', '--dry-run', '--root', tmp_path / 'grid', '--round', 'grid', '--set', 'optim.lrr=1e-3')
    assert r.returncode == 2
    assert "unknown key(s) ['lrr']" in r.stderr and "valid keys: ['betas', 'grad_clip', 'lr'" in r.stderr, r.stderr
    r = tpas_grid('cmp', '--dry-run', '--root', tmp_path / 'grid', '--round', 'grid', '--set', 'seed=3')
    assert r.returncode == 2 and 'set by the grid' in r.stderr, r.stderr
    assert not (tmp_path / 'grid').exists()


def test_status_reads_the_folders(tmp_path):
    root = tmp_path / 'grid'
    done = root / 'cmp' / 'pe' / 'seed1'; done.mkdir(parents=True)
    (done / 'metrics.json').write_text(json.dumps({'train': {'steps': 7, 'wall_s': 12.5}}))
    failed = root / 'cmp' / 'cmp' / 'seed0'; failed.mkdir(parents=True)
    (failed / 'error.txt').write_text('Traceback (most recent call last):\nRuntimeError: boom\n')
    r = tpas_grid('cmp', '--status', '--root', root, '--round', 'grid', '--set', 'epochs=3')
    assert r.returncode == 0, r.stderr
    lines = {tuple(l.split()[:3]) for l in r.stdout.splitlines()}
    assert ('+PE', '1', 'done') in lines and ('CMP', '0', 'failed') in lines and ('+PE', '0', 'missing') in lines, r.stdout
    assert 'RuntimeError: boom' in r.stdout


def test_unknown_round_is_refused(tmp_path):
    r = tpas_grid('cmp', '--dry-run', '--root', tmp_path / 'records')
    assert r.returncode == 2 and "unknown grid round 'records'" in r.stderr and "the rounds: ['grid', 'grid_v2'" in r.stderr, r.stderr
    r = tpas_grid('cmp', '--dry-run', '--root', tmp_path / 'records', '--round', 'grid')
    assert r.returncode == 0 and 'would train' in r.stdout, r.stderr
    assert not (tmp_path / 'records').exists()
