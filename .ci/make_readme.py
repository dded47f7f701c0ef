"""Write README.md from nbs/index.ipynb without Quarto (nbdev_readme needs Quarto, which these machines lack).
Markdown cells are copied, and so is the Markdown that a code cell displays (a table or a sentence rendered from the
committed records); a markdown cell that only introduces a code cell's figure is left out (the figure is for the docs site).
Usage: python .ci/make_readme.py [--check]   (--check: exit 1 if README.md is out of date)"""
import json, sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
cells = json.loads((root / 'nbs/index.ipynb').read_text())['cells']

def markdown_out(cell) -> str:
    "The text/markdown a code cell displays, joined ('' for none)."
    return '\n\n'.join(''.join(o['data']['text/markdown']).strip() for o in cell.get('outputs', [])
                       if 'text/markdown' in o.get('data', {}))

def hidden(cell) -> bool: return cell['cell_type'] == 'code' and ''.join(cell['source']).lstrip().startswith('#| hide')

def introduces_figure(i) -> bool:
    "A markdown cell followed (past hidden cells, such as imports) by a code cell that shows no Markdown (a figure for the docs site)."
    j = i + 1
    while j < len(cells) and hidden(cells[j]): j += 1
    return j < len(cells) and cells[j]['cell_type'] == 'code' and not markdown_out(cells[j])

keep = []
for i, c in enumerate(cells):
    if c['cell_type'] == 'markdown' and not introduces_figure(i): keep.append(''.join(c['source']).strip())
    elif c['cell_type'] == 'code' and (md := markdown_out(c)): keep.append(md)
out = ('<!-- generated from nbs/index.ipynb by .ci/make_readme.py: edit the notebook, not this file -->\n\n'
       + '\n\n'.join(keep) + '\n')
if '--check' in sys.argv:
    if (root / 'README.md').read_text() != out: sys.exit('README.md is out of date: run python .ci/make_readme.py')
else:
    (root / 'README.md').write_text(out)
