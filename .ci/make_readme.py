"""Write README.md from nbs/index.ipynb without Quarto (nbdev_readme needs Quarto, which these machines lack).
Markdown cells are copied, except one that introduces a code cell's output (a figure shown on the docs site).
Usage: python .ci/make_readme.py [--check]   (--check: exit 1 if README.md is out of date)"""
import json, sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
cells = json.loads((root / 'nbs/index.ipynb').read_text())['cells']
keep = [''.join(c['source']).strip() for i, c in enumerate(cells)
        if c['cell_type'] == 'markdown' and not (i + 1 < len(cells) and cells[i + 1]['cell_type'] == 'code')]
out = ('<!-- generated from nbs/index.ipynb by .ci/make_readme.py: edit the notebook, not this file -->\n\n'
       + '\n\n'.join(keep) + '\n')
if '--check' in sys.argv:
    if (root / 'README.md').read_text() != out: sys.exit('README.md is out of date: run python .ci/make_readme.py')
else:
    (root / 'README.md').write_text(out)
