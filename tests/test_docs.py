"""The docs site as a reader gets it, checked without Quarto: .ci/preview_docs.py runs nbdev's doc processors (what
nbdev_docs runs before Quarto) and a small Quarto stand-in; these tests read the HTML it writes, and (slow, with
Chromium) look at the pages after MathJax has typeset them."""
import html, importlib.util, json, os, re, shutil, subprocess, sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / 'nbs'
spec = importlib.util.spec_from_file_location('preview_docs', ROOT / '.ci' / 'preview_docs.py')
pd_ = importlib.util.module_from_spec(spec); spec.loader.exec_module(pd_)

FAST_PAGES = ['index.ipynb', '03_weather.ipynb']  # cheap to process (~5 s): a figure, $$…$$ and $…$, show_doc


def build(tmp, *pages, no_exec=False):
    "Run the preview CLI in its own process (nbdev executes notebook cells while processing)."
    args = [sys.executable, str(ROOT / '.ci' / 'preview_docs.py'), *pages, '--out', str(tmp)] + (['--no-exec'] if no_exec else [])
    r = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env={**os.environ, 'MPLBACKEND': 'Agg'})
    return r, json.loads((Path(tmp) / 'preview_report.json').read_text()) if (Path(tmp) / 'preview_report.json').exists() else {}


def cells(nb):
    return json.loads((NBS / nb).read_text())['cells']


def src(c): return ''.join(c['source'])


def directives(c): return re.findall(r'^\s*#\|\s*([\w-]+)', src(c), re.M)


def visible_text(page_html):
    "What a reader reads: scripts and styles dropped, tags stripped, entities decoded."
    body = re.sub(r'<(script|style)\b.*?</\1>', '', page_html, flags=re.S)
    return html.unescape(re.sub(r'<[^>]+>', '', body))


def prose(page_html):
    "Text outside code: <pre> blocks and inline <code> dropped."
    return visible_text(re.sub(r'<(pre|code)\b.*?</\1>', '', page_html, flags=re.S))


def code_blocks(page_html):
    return [visible_text(m) for m in re.findall(r'<pre\b.*?</pre>', page_html, flags=re.S)]


def norm(s): return re.sub(r'\s+', ' ', s).strip()


# ---------------------------------------------------------------- configuration (no build)
def test_quarto_config_is_what_nbdev_docs_needs():
    cfg = pd_.site_config()
    q = yaml.safe_load((ROOT / '_quarto.yml').read_text())
    assert (NBS / '_quarto.yml').resolve() == (ROOT / '_quarto.yml').resolve()  # nbdev_docs copies nbs/_quarto.yml
    assert {'nbdev.yml', 'sidebar.yml'} <= set(q['metadata-files'])  # title, site-url (nbdev.yml) and the sidebar
    assert q['project']['type'] == 'website' and q['format']['html']['html-math-method'] == 'mathjax'
    assert (NBS / q['format']['html']['css']).exists()
    from nbdev.config import get_config
    assert get_config(path=ROOT).custom_sidebar  # else nbdev_docs overwrites nbs/sidebar.yml with a generated one
    assert cfg['site_url'].startswith('https://') and cfg['site_url'].endswith('/tpas_nb/')


def test_sidebar_lists_every_notebook():
    entries = pd_.sidebar_entries(NBS)
    files = pd_.sidebar_files(entries)
    missing = set(pd_.site_notebooks(NBS)) - set(files)
    assert not missing, f'notebooks missing from nbs/sidebar.yml (they would be pages no reader finds): {sorted(missing)}'
    assert not [f for f in files if not (NBS / f).exists()], 'sidebar.yml names a notebook that does not exist'
    assert len(files) == len(set(files)), 'a notebook is twice in the sidebar'
    assert files[0] == 'index.ipynb'


def test_page_names_unique():
    names = {}
    for nb in pd_.site_notebooks(NBS): names.setdefault(pd_.html_name(nb), []).append(nb)
    clashes = {k: v for k, v in names.items() if len(v) > 1}
    assert not clashes, f'notebooks that nbdev_docs writes to the same page: {clashes}'


# ---------------------------------------------------------------- the Quarto stand-in, on small inputs
def test_markdown_extensions_and_cell_options():
    from execnb.nbio import mk_cell
    h = pd_.md2html('[source](https://x/y.py#L3){target="_blank" style="float:right"} and $a_1 * b_2$\n\n'
                    '::: {.callout-note}\nNote *this*\n:::\n\n$$\\sum_i x_i$$')
    assert '<a href="https://x/y.py#L3" target="_blank" style="float:right">source</a>' in h
    assert '<div class="callout-note">' in h and '<em>this</em>' in h and ':::' not in h
    assert '$a_1 * b_2$' in h and '$$\\sum_i x_i$$' in h  # math left to MathJax, not read as emphasis
    opts, code = pd_._cell_options('#| echo: false\n#| output: asis\nshow_doc(f)')
    assert opts == {'echo': False, 'output': 'asis'} and code == 'show_doc(f)'
    out = {'output_type': 'execute_result', 'data': {'text/markdown': '### f\n\n*doc*', 'text/plain': 'x'}}
    c = mk_cell('#| echo: false\n#| output: asis\nshow_doc(f)'); c.outputs = [out]
    assert pd_.cell_html(c, 0).strip().startswith('<h3') and 'show_doc' not in pd_.cell_html(c, 0)
    c = mk_cell('#| output: false\nprint(1)'); c.outputs = [{'output_type': 'stream', 'name': 'stdout', 'text': 'ONE'}]
    assert 'print' in pd_.cell_html(c, 0) and 'ONE' not in pd_.cell_html(c, 0) and '#|' not in pd_.cell_html(c, 0)
    c = mk_cell('#| include: false\nx = 1'); assert pd_.cell_html(c, 0) == ''
    body, toc = pd_._add_heading_ids('<h2 id="X-1">1. Fine-grained cost<a class="anchor-link" href="#X-1">¶</a></h2><h3>sinkhorn</h3>')
    assert body == '<h2 id="fine-grained-cost">1. Fine-grained cost</h2><h3 id="sinkhorn">sinkhorn</h3>'
    assert [t[1] for t in toc] == ['fine-grained-cost', 'sinkhorn']
    site = 'https://tpas-nb.github.io/tpas_nb/'
    assert pd_._relink(f'<a href="{site}qcalign.html#sinkhorn"> <a href="40_training.ipynb#x">', site, {'40_training.ipynb': 'train.html'}) \
        == '<a href="qcalign.html#sinkhorn"> <a href="train.html#x">'


# ---------------------------------------------------------------- a real build of a few pages
@pytest.fixture(scope='module')
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp('site')
    r, report = build(out, *[Path(p).stem for p in FAST_PAGES])
    assert r.returncode == 0, r.stdout + r.stderr
    return out, report


def test_pages_built_without_processing_errors(site):
    out, report = site
    assert sorted(report) == sorted(FAST_PAGES)
    for nb, r in report.items():
        assert not r['errors'], f'{nb}: nbdev doc processing failed: {r["errors"]}'
        assert Path(r['html']).exists() and Path(r['html']).name == pd_.html_name(nb)


@pytest.mark.parametrize('nb', FAST_PAGES)
def test_page_reads_as_the_site(site, nb):
    out, report = site
    page = Path(report[nb]['html']).read_text()
    text, pros = visible_text(page), prose(page)
    # no raw Quarto / nbdev syntax: directives in code, fenced divs, shortcodes, link attributes
    assert not [b for b in code_blocks(page) if re.search(r'^\s*#\|', b, re.M)], 'a #| directive is shown in code'
    assert '#|' not in pros and not re.search(r'^\s*:::', text, re.M) and '{{<' not in text and '{target=' not in text
    # front matter: the title and the summary line, once
    first = next(c for c in cells(nb) if c['cell_type'] == 'markdown')
    title = re.search(r'^#\s+(.+?)\s*$', src(first), re.M)[1]
    summary = re.search(r'^>\s+(.+?)\s*$', src(first), re.M)[1]
    assert re.search(r'<h1 class="title">(.*?)</h1>', page)[1] == html.escape(title)
    assert page.count('<h1') == 1 and 'class="description"' in page
    assert norm(re.sub(r'[`*]', '', summary))[:40] in norm(text)
    # hidden and exported cells are gone; each exported public function or class has its show_doc heading
    for c in cells(nb):
        if c['cell_type'] != 'code' or not ({'hide', 'export'} & set(directives(c))): continue
        code = norm(re.sub(r'^\s*#\|.*$', '', src(c), flags=re.M))
        if len(code) > 40: assert code not in norm(text), f'a hidden/exported cell is shown: {code[:60]}'
        if 'export' in directives(c):
            for name in re.findall(r'^(?:def|class)\s+([A-Za-z]\w*)', src(c), re.M):
                assert re.search(rf'<h3 id="{name.lower()}(-\d+)?">{name}</h3>', page), f'no show_doc for {name}'
    # figures: every image output of a visible cell, embedded in the page
    n_img = sum(1 for c in cells(nb) if c['cell_type'] == 'code' and not {'hide', 'export'} & set(directives(c))
                for o in c.get('outputs', []) if any(k.startswith('image/') for k in o.get('data', {})))
    imgs = re.findall(r'<img [^>]*src="([^"]+)"', page)
    assert len(imgs) == n_img and all(s.startswith('data:image/') and len(s) > 1000 for s in imgs)
    # equations: every $$…$$ of the notebook, left in the prose for MathJax, which is a local file
    n_display = sum(src(c).count('$$') for c in cells(nb) if c['cell_type'] == 'markdown')
    assert pros.count('$$') == n_display and n_display % 2 == 0
    mj = re.search(r'<script id="MathJax-script"[^>]*src="([^"]+)"', page)[1]
    assert not mj.startswith('http') and (out / mj).stat().st_size > 1_000_000
    assert "inlineMath: [['$', '$']" in page
    # styles: the site's styles.css, copied as is
    assert 'href="styles.css"' in page and (out / 'styles.css').read_text() == (NBS / 'styles.css').read_text()


def test_sidebar_in_every_page(site):
    out, report = site
    entries = pd_.sidebar_entries(NBS)
    files = pd_.sidebar_files(entries)
    sections = [e['section'] for e in entries if isinstance(e, dict) and 'section' in e]
    for nb, r in report.items():
        page = Path(r['html']).read_text()
        nav = re.search(r'<nav id="quarto-sidebar".*?</nav>', page, re.S)[0]
        assert re.findall(r'<a href="([^"]+)"', nav) == [pd_.html_name(f) for f in files]  # same pages, same order
        assert re.findall(r'class="sidebar-section-title">([^<]+)<', nav) == [html.escape(s) for s in sections]
        assert re.findall(r'class="active">([^<]+)<', nav) == [html.escape(pd_.page_title(NBS / nb))]
        for title in (pd_.page_title(NBS / f) for f in files): assert html.escape(title) in nav


def test_every_sidebar_page_exists(tmp_path):
    "All pages, without executing show_doc cells (fast): each sidebar link and each link between pages resolves."
    r, report = build(tmp_path, no_exec=True)
    assert r.returncode == 0, r.stdout + r.stderr
    files = pd_.sidebar_files(pd_.sidebar_entries(NBS))
    assert set(files) <= set(report)
    for f in files: assert (tmp_path / pd_.html_name(f)).exists(), f
    for p in tmp_path.glob('*.html'):
        for href in re.findall(r'href="([^"#:]+\.html)(?:#[^"]*)?"', p.read_text()):
            assert (tmp_path / href).exists(), f'{p.name} links to {href}, which is not a page'


# ---------------------------------------------------------------- cells nbdev_docs executes

def test_no_executed_cell_mixes_imports_with_code():
    "nbdev_docs runs every cell holding an import: such cells must hold imports only (fast, no execution)."
    bad = {nb: [f"cell {r['cell']}: {r['first_line']}" for r in rows] for nb in pd_.site_notebooks(NBS)
           if (rows := pd_.lint_notebook(NBS / nb))}
    assert not bad, f'cells that nbdev_docs executes besides imports (move the imports to a cell of their own): {bad}'


# ---------------------------------------------------------------- slow: everything nbdev_docs processes, and Chromium
@pytest.mark.slow
def test_every_notebook_passes_nbdev_doc_processing(tmp_path):
    pages = pd_.site_notebooks(NBS)
    r, report = build(tmp_path, *[Path(nb).stem for nb in pages])  # ~30 s: nbdev executes each notebook's import cells
    assert sorted(report) == sorted(pages), r.stdout + r.stderr
    failed = {nb: v['errors'][0]['error'] for nb, v in report.items() if v['errors']}
    assert not failed, f'nbdev_docs would stop on: {failed}'


def _method_and_tables_pages():
    tables = '95_tables.ipynb' if (NBS / '95_tables.ipynb').exists() else '30_retrieval.ipynb'
    return ['index.ipynb', '20_cmp.ipynb', tables, '03_weather.ipynb']


@pytest.mark.slow
@pytest.mark.skipif(pd_.chromium() is None, reason='needs chromium (apt-get install chromium)')
def test_screenshots_and_typeset_math(tmp_path):
    import numpy as np
    from PIL import Image
    pages = _method_and_tables_pages()
    r, report = build(tmp_path, *[Path(p).stem for p in pages])
    assert set(report) == set(pages), r.stdout + r.stderr
    keep = None if os.environ.get('CI') else ROOT / '_site_preview' / 'screenshots'  # by hand: also where people look
    for nb in pages:
        page = Path(report[nb]['html'])
        png = pd_.screenshot(page, tmp_path / 'screenshots' / f'{page.stem}.png', width=1280, height=1400)
        img = Image.open(png).convert('RGB')
        assert img.size == (1280, 1400)
        a = np.asarray(img, dtype=np.float32)
        assert a.std() > 20 and (a.mean(-1) < 128).mean() > 0.01, f'{png} is (nearly) blank'
        if keep: keep.mkdir(parents=True, exist_ok=True); shutil.copy(png, keep / png.name)
        dom = pd_.dump_dom(page)
        body = re.sub(r'<(script|style)\b.*?</\1>', '', dom, flags=re.S)
        assert 'data-mathjax="typeset"' in dom, f'MathJax did not finish on {page.name}'
        assert '$$' not in prose(body), f'untypeset $$ on {page.name}'
        assert '<mjx-merror' not in body, f'a TeX error on {page.name}'
        n_math = sum(len(re.findall(r'\$\$.+?\$\$|\$[^$\n]+\$', src(c), re.S)) for c in cells(nb) if c['cell_type'] == 'markdown')
        assert body.count('<mjx-container') >= n_math, f'{page.name}: {body.count("<mjx-container")} typeset of {n_math}'


# ---------------------------------------------------------------- numbers rendered from records stay current
def _markdown_outputs(nb: dict) -> list[str]:
    return [''.join(o['data']['text/markdown']) for c in nb['cells'] if c['cell_type'] == 'code'
            for o in c.get('outputs', []) if 'text/markdown' in o.get('data', {})]

def test_readme_numbers_are_the_records(tmp_path):
    "Every number the README prints is Markdown a cell of nbs/index.ipynb renders from the committed records: executed again, "
    "the cells give what the notebook stores (and make_readme --check holds the README to the notebook)."
    from execnb.nbio import read_nb
    from execnb.shell import CaptureShell
    nb = json.loads((NBS / 'index.ipynb').read_text())
    stored = _markdown_outputs(nb)
    assert stored, 'index.ipynb renders no Markdown from the records'
    shell, fresh = CaptureShell(), []
    cwd = os.getcwd()
    try:
        os.chdir(NBS)
        for c in nb['cells']:
            if c['cell_type'] != 'code' or 'set_matplotlib_formats' in ''.join(c['source']): continue
            outs = shell.run(''.join(c['source']))
            fresh += [''.join(o['data']['text/markdown']) for o in outs if 'text/markdown' in o.get('data', {})]
    finally: os.chdir(cwd)
    assert fresh == stored, 'nbs/index.ipynb is out of date with the records: execute it again (jupyter nbconvert --execute --inplace nbs/index.ipynb), then python .ci/make_readme.py'
