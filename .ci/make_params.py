"""Write the method-switch block of nbs/90_train.ipynb's parameters cell from the registered method configs
(tpas_nb.runs.switch_parameters): a switch is declared once, in its config dataclass.
Usage: python .ci/make_params.py [--check]   (--check: exit 1 if the block is out of date)"""
import json, sys
from pathlib import Path

from tpas_nb.runs import SWITCHES_HEADER, switch_parameters

path = Path(__file__).resolve().parent.parent / 'nbs' / '90_train.ipynb'
nb = json.loads(path.read_text())
cell = next(c for c in nb['cells'] if 'parameters' in c.get('metadata', {}).get('tags', []))
src = ''.join(cell['source'])
head = src.split(SWITCHES_HEADER)[0].rstrip('\n')
new = head + '\n' + switch_parameters() + '\n'
if '--check' in sys.argv:
    if src != new: sys.exit(f'the method switches of {path.name} are out of date: run python .ci/make_params.py')
else:
    cell['source'] = new.splitlines(keepends=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')
