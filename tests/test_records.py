"""The grid records committed under runs/grid and runs/grid_v2 (41_grid, "Keeping the results in git"): every one of
them is a finished run that its round's budget would make again, and git keeps exactly the record files."""
import subprocess
from pathlib import Path

import pytest

from tpas_nb.grid import GRID_ROUNDS, RECORD_FILES, check_records

ROOT = Path(__file__).resolve().parents[1]


def _git(*args) -> str:
    try: return subprocess.run(['git', *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e: pytest.skip(f'not a git checkout: {e}')


@pytest.mark.parametrize('round_', list(GRID_ROUNDS))
def test_records_match_the_grids(round_):
    recs = check_records(ROOT / 'runs' / round_)          # against that round's own budget (grid_budget)
    if round_ == 'grid_v2': assert len(recs) == 129, f'the first round has 129 records, found {len(recs)}'
    stale = recs[~recs.ok]
    assert stale.empty, 'records made with another configuration (move them away and run tpas_grid again):\n' + stale.to_string()


def test_tracked_files_are_records_of_finished_runs():
    tracked = [Path(p) for r in GRID_ROUNDS for p in _git('ls-files', f'runs/{r}').split()]
    assert tracked, 'no grid records are committed'
    assert {p.name for p in tracked} <= set(RECORD_FILES), sorted({p.name for p in tracked} - set(RECORD_FILES))
    folders = {p.parent for p in tracked}
    assert all(len(f.parts) == 5 and f.parts[4].startswith('seed') for f in folders), sorted(folders)[:3]   # runs/ROUND/GRID/ARM/seedK
    unfinished = sorted(str(f) for f in folders if f / 'metrics.json' not in set(tracked))
    assert not unfinished, f'run folders committed without metrics.json: {unfinished}'


@pytest.mark.parametrize('round_', list(GRID_ROUNDS))
def test_gitignore_keeps_records_and_drops_weights(round_):
    run = f'runs/{round_}/cmp/cmp/seed0'
    out = subprocess.run(['git', 'check-ignore', '--no-index', *[f'{run}/{n}' for n in
                          (*RECORD_FILES, 'state.pt', 'best.safetensors', 'checkpoint.safetensors', 'vocab.txt')]],
                         cwd=ROOT, capture_output=True, text=True)
    if out.returncode == 128: pytest.skip(f'not a git checkout: {out.stderr.strip()}')
    ignored = {Path(p).name for p in out.stdout.split()}
    assert ignored == {'state.pt', 'best.safetensors', 'checkpoint.safetensors', 'vocab.txt'}, ignored
