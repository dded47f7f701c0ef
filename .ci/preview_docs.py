"""A local, offline preview of the docs site, for machines without Quarto (like .ci/make_readme.py for the README).

`nbdev_docs` runs nbdev's notebook processors (`nbdev.processors.FilterDefaults`: front matter, `#| hide` and
`#| export` cells removed, `show_doc` cells added and executed, doc links) and then Quarto. This script runs the
same processors on each notebook, then stands in for Quarto with a small template: the sidebar of nbs/sidebar.yml,
Quarto's cell classes (so nbs/styles.css applies), the `#|` options Quarto reads (echo, output, include,
code-fold), figures embedded as data URIs, and MathJax 3 from the `django-static-mathjax` wheel (offline).

Usage:
  python .ci/preview_docs.py                      # every notebook nbdev_docs renders -> _site_preview/
  python .ci/preview_docs.py index 20_cmp 95_tables --screenshots   # some pages, plus Chromium screenshots
  python .ci/preview_docs.py 03_weather --screenshots --shot weather.html#the-ten-conditions   # and one section
  python .ci/preview_docs.py --no-exec            # fast: skip executing show_doc cells (layout only)
  python .ci/preview_docs.py --lint               # cells that nbdev_docs executes besides imports (nbdev's FAQ)
Exit status 1 when a page fails in nbdev's processing (nbdev_docs would stop there); its HTML is still written,
with the error in a banner. Screenshots need `chromium` (Debian: apt-get install chromium)."""
import argparse, ast, html, json, os, re, shutil, subprocess, sys, time, warnings
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / '_site_preview'
MATHJAX_BUNDLE = 'tex-svg-full.js'  # SVG output: no web fonts, which Chromium will not load from file:// pages


# ---------------------------------------------------------------- site configuration
def site_config(root=ROOT):
    "Settings that the page template needs, from settings.ini (nbdev) and _quarto.yml."
    from nbdev.config import get_config
    cfg = get_config(path=root)
    quarto = yaml.safe_load((root / '_quarto.yml').read_text())
    right = (((quarto.get('website') or {}).get('navbar') or {}).get('right')) or []
    return dict(title=cfg.get('title', cfg.lib_name), nbs=Path(cfg.nbs_path),
                site_url=f"{cfg.get('doc_host', '')}{cfg.get('doc_baseurl', '')}".rstrip('/') + '/',
                navbar_right=[o for o in right if isinstance(o, dict) and o.get('href')])


def sidebar_entries(nbs):
    "website.sidebar.contents of sidebar.yml: a list of file names and {'section':, 'contents':} dicts."
    d = yaml.safe_load((Path(nbs) / 'sidebar.yml').read_text())
    return d['website']['sidebar']['contents']


def sidebar_files(entries):
    "The files in the sidebar, in order, sections flattened."
    res = []
    for e in entries:
        if isinstance(e, str): res.append(e)
        elif 'contents' in e: res += sidebar_files(e['contents'])
        elif 'href' in e: res.append(e['href'])
    return res


def site_notebooks(nbs, root=ROOT):
    "The notebooks nbdev_docs renders (as nbdev's nbglob: names and folders starting with _ or . skipped), relative paths."
    from fastcore.xtras import globtastic
    from nbdev.config import get_config
    found = globtastic(nbs, file_glob='*.ipynb', skip_folder_re='^[_.]', skip_file_re='^[_.]',
                       recursive=get_config(path=root).recursive)
    return sorted(Path(p).relative_to(nbs).as_posix() for p in found)


def html_name(nb_rel):
    "The page nbdev/Quarto write for a notebook: the number prefix dropped (nbdev's _nbpath2html): 22_qcalign.ipynb -> qcalign.html."
    from nbdev.doclinks import _nbpath2html
    return _nbpath2html(Path(nb_rel)).as_posix()


def page_title(nb_path):
    "Title from the notebook's front matter: a raw YAML cell, else the first `# Title` markdown cell (nbdev's rules)."
    from nbdev.frontmatter import _fm2dict, _md2dict
    for c in json.loads(Path(nb_path).read_text())['cells']:
        src = ''.join(c['source'])
        d = _fm2dict(src) if c['cell_type'] == 'raw' else _md2dict(src) if c['cell_type'] == 'markdown' else {}
        if d.get('title'): return d['title']
    return Path(nb_path).stem


# ---------------------------------------------------------------- nbdev's processing (what nbdev_docs does before Quarto)
def _processors(exec_docs, errors):
    "nbdev's FilterDefaults, with exec_show_docs made to record an error and go on (or dropped: exec_docs=False)."
    from nbdev.processors import FilterDefaults, exec_show_docs

    class lenient_exec_show_docs(exec_show_docs):
        def __call__(self, cell):
            outputs = cell.get('outputs')
            try: super().__call__(cell)
            except Exception as e:
                cause = e.__cause__ or e
                errors.append(dict(cell=cell.get('nb_idx_'), nbdev_cell=cell.idx_, error=f'{type(cause).__name__}: {cause}',
                                   source=cell.source.splitlines()[:6]))
                if outputs is not None: cell.outputs = outputs  # not the traceback of the doc-time run
                self.k.exc = None

    class Filter(FilterDefaults):
        def base_procs(self):
            procs = [lenient_exec_show_docs if p is exec_show_docs else p for p in super().base_procs()]
            return [p for p in procs if exec_docs or p is not lenient_exec_show_docs]
    return Filter()


def process_notebook(nb_path, exec_docs=True, root=ROOT):
    "Run nbdev's doc processors on one notebook as nbdev_docs does. Returns (cells, front matter, errors, warnings)."
    from execnb.nbio import read_nb
    errors = []
    nb = read_nb(nb_path)
    for i, c in enumerate(nb.cells): c.nb_idx_ = i  # the cell's index in the notebook (nbdev renumbers as it drops cells)
    old_env, old_cwd = os.environ.get('IN_TEST'), os.getcwd()
    os.environ['IN_TEST'] = '1'  # as nbdev.serve_drv does
    os.chdir(root)               # nbdev_docs runs from the project root
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            _processors(exec_docs, errors)(nb)
    finally:
        os.chdir(old_cwd)
        if old_env is None: os.environ.pop('IN_TEST', None)
        else: os.environ['IN_TEST'] = old_env
    fm = getattr(nb, 'frontmatter_', {}) or {}
    cells = [c for c in nb.cells if not (c.cell_type == 'raw' and c.source.lstrip().startswith('---'))]
    warns = [str(w.message).split('\n---\n')[1].splitlines()[0] if '\n---\n' in str(w.message) else str(w.message)
             for w in caught if 'Found cells containing imports' in str(w.message)]
    return cells, fm, errors, warns


def lint_notebook(nb_path):
    "Code cells that nbdev_docs's exec_show_docs would run although they hold more than imports (nbdev's FAQ warning)."
    from nbdev.process import NBProcessor
    from nbdev.processors import _do_eval, _ast_contains
    nb = NBProcessor(nb_path, procs=[]).nb
    res = []
    for c in nb.cells:
        if c.cell_type != 'code' or not c.source or not _do_eval(c): continue
        if c.directives_.keys() & {'export', 'exports', 'exporti', 'exec_doc'}: continue
        trees = c.parsed_()
        if trees and _ast_contains(trees, (ast.Expr, ast.Assign)) and _ast_contains(trees, (ast.Import, ast.ImportFrom)):
            first = next(l for l in c.source.strip().splitlines() if not l.lstrip().startswith('#|'))
            res.append(dict(cell=c.idx_, first_line=first))
    return res


# ---------------------------------------------------------------- the Quarto stand-in: markdown and cells to HTML
_re_link_attr = re.compile(r'\[([^\]\n]+)\]\(([^)\s]+)\)\{([^}\n]*)\}')
_re_div_open = re.compile(r'^:::+\s*\{?([^}]*)\}?\s*$')
_re_head_attr = re.compile(r'^(#{1,6}\s.*?)\s*\{#([\w.:-]+)\}\s*$', re.MULTILINE)


def _pandoc_attrs(s):
    "Pandoc attributes `.cls #id key=\"v\"` as HTML attributes."
    cls = [t[1:] for t in s.split() if t.startswith('.')]
    ids = [t[1:] for t in s.split() if t.startswith('#')]
    kv = re.findall(r'([\w-]+)=("[^"]*"|\S+)', s)
    out = ([f'class="{" ".join(cls)}"'] if cls else []) + ([f'id="{ids[0]}"'] if ids else [])
    return ' '.join(out + [f'{k}="{v.strip(chr(34))}"' for k, v in kv])


def _pandoc_md(src):
    "The Pandoc/Quarto markdown extensions used by nbdev's output: link attributes, ::: divs, {#id} headings."
    src = _re_link_attr.sub(lambda m: f'<a href="{m[2]}" {_pandoc_attrs(m[3])}>{m[1]}</a>', src)
    src = _re_head_attr.sub(lambda m: f'{m[1]} <span data-id="{m[2]}"></span>', src)
    lines, depth = [], 0
    for line in src.split('\n'):
        m = _re_div_open.match(line)
        if m and m[1].strip():  # ::: {.callout-note} or ::: callout-note
            attrs = _pandoc_attrs(m[1]) or f'class="{m[1].strip()}"'
            lines += ['', f'<div {attrs}>', '']; depth += 1
        elif m and depth:
            lines += ['', '</div>', '']; depth -= 1
        else: lines.append(line)
    return '\n'.join(lines)


def md2html(src):
    "Markdown (with $…$ / $$…$$ kept for MathJax) to HTML, by nbconvert's mistune renderer."
    from nbconvert.filters.markdown_mistune import markdown2html_mistune
    return markdown2html_mistune(_pandoc_md(src))


def _highlight(code, lang='python'):
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name
    try: lexer = get_lexer_by_name(lang)
    except Exception: lexer = get_lexer_by_name('text')
    return highlight(code, lexer, HtmlFormatter(nowrap=True))


_re_ansi = re.compile(r'\x1B(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])')


def _text(o):
    return ''.join(o) if isinstance(o, list) else (o or '')


def _cell_options(source):
    "Quarto's cell options: leading `#| key: value` lines (YAML). Returns (options, code without them)."
    lines = source.split('\n')
    n = 0
    while n < len(lines) and re.match(r'^\s*#\|', lines[n]): n += 1
    opts = {}
    for l in lines[:n]:
        m = re.match(r'^\s*#\|\s*([\w-]+)\s*:\s*(.*?)\s*$', l)
        if m:
            try: opts[m[1]] = yaml.safe_load(m[2]) if m[2] else True
            except yaml.YAMLError: opts[m[1]] = m[2]
    return opts, '\n'.join(lines[n:]).strip('\n')


def _output_html(o, asis=False):
    "One output, as Quarto shows it; `asis`: markdown output becomes page content."
    ot = o.get('output_type')
    if ot == 'stream':
        cls = 'cell-output-stderr' if o.get('name') == 'stderr' else 'cell-output-stdout'
        return f'<div class="cell-output {cls}"><pre><code>{html.escape(_re_ansi.sub("", _text(o.get("text"))))}</code></pre></div>'
    if ot == 'error':
        tb = _re_ansi.sub('', '\n'.join(o.get('traceback') or [f"{o.get('ename')}: {o.get('evalue')}"]))
        return f'<div class="cell-output cell-output-error"><pre><code>{html.escape(tb)}</code></pre></div>'
    data = o.get('data') or {}
    if asis and 'text/markdown' in data: return md2html(_text(data['text/markdown']))
    if 'text/html' in data: body = _text(data['text/html'])
    elif 'text/markdown' in data: body = md2html(_text(data['text/markdown']))
    elif 'image/svg+xml' in data: body = _text(data['image/svg+xml'])
    elif 'image/png' in data or 'image/jpeg' in data:
        mime = 'image/png' if 'image/png' in data else 'image/jpeg'
        b64 = _text(data[mime]).replace('\n', '')
        body = f'<img src="data:{mime};base64,{b64}" class="figure-img">'
    elif 'text/latex' in data: body = f'<div class="math-output">{html.escape(_text(data["text/latex"]))}</div>'
    elif 'text/plain' in data: body = f'<pre><code>{html.escape(_text(data["text/plain"]))}</code></pre>'
    else: return ''
    return f'<div class="cell-output cell-output-display">{body}</div>'


def cell_html(cell, idx):
    "One processed cell, with Quarto's classes and its `#|` options applied."
    if cell.cell_type == 'markdown': return md2html(cell.source)
    if cell.cell_type != 'code': return ''  # raw cells other than the front matter go to other formats only
    opts, code = _cell_options(cell.source)
    if str(opts.get('include', True)).lower() == 'false': return ''
    parts = []
    if str(opts.get('echo', True)).lower() != 'false' and code.strip():
        src = (f'<div class="sourceCode cell-code" id="cb{idx}"><pre class="sourceCode python code-with-copy">'
               f'<code class="sourceCode python">{_highlight(code)}</code></pre></div>')
        fold = opts.get('code-fold')
        if fold not in (None, False, 'false'):
            summary = html.escape(str(opts.get('code-summary', 'Code')))
            src = f'<details class="code-fold"{" open" if fold == "show" else ""}><summary>{summary}</summary>{src}</details>'
        parts.append(src)
    out = opts.get('output', True)
    if str(out).lower() != 'false':
        parts += [_output_html(o, asis=(out == 'asis')) for o in cell.get('outputs', [])]
    if not any(parts): return ''
    if out == 'asis' and str(opts.get('echo', True)).lower() == 'false': return '\n'.join(parts)
    return '<div class="cell">\n' + '\n'.join(parts) + '\n</div>'


def _slug(text, seen):
    "Pandoc's automatic heading identifier (lower case, punctuation dropped, spaces to -), made unique."
    s = re.sub(r'<[^>]+>', '', html.unescape(text)).lower()
    s = re.sub(r'[^\w\s.-]', '', s).strip()
    s = re.sub(r'^[^a-z]+', '', re.sub(r'\s+', '-', s)) or 'section'
    n, base = 0, s
    while s in seen: n += 1; s = f'{base}-{n}'
    seen.add(s)
    return s


def _add_heading_ids(body):
    "Give headings ids (as Pandoc does) and return the body and its table of contents (h2, h3)."
    seen, toc = set(), []
    def f(m):
        lvl, attrs, inner = m[1], re.sub(r'\s*id="[^"]*"', '', m[2]), re.sub(r'<a class="anchor-link"[^>]*>.*?</a>', '', m[3])
        given = re.search(r'<span data-id="([^"]+)"></span>', inner)
        inner = re.sub(r'\s*<span data-id="[^"]+"></span>', '', inner)
        hid = given[1] if given else _slug(inner, seen)
        if lvl in '23': toc.append((int(lvl), hid, re.sub(r'<a [^>]*>|</a>', '', inner)))
        return f'<h{lvl} id="{hid}"{attrs}>{inner}</h{lvl}>'
    body = re.sub(r'<h([1-6])((?:\s[^>]*)?)>(.*?)</h\1>', f, body, flags=re.DOTALL)
    return body, toc


def _relink(body, site_url, nb_pages):
    "Links to the published site and to notebooks become links between preview pages."
    if site_url: body = body.replace(f'href="{site_url}', 'href="')
    def f(m):
        target, frag = m[1].split('#', 1) if '#' in m[1] else (m[1], '')
        name = Path(target).name
        if name in nb_pages: return f'href="{nb_pages[name]}{"#" + frag if frag else ""}"'
        return m[0]
    return re.sub(r'href="([^":]+?\.ipynb(?:#[^"]*)?)"', f, body)


# ---------------------------------------------------------------- the page
MATHJAX_CONFIG = r"""window.MathJax = {
  tex: {inlineMath: [['$', '$'], ['\\(', '\\)']], displayMath: [['$$', '$$'], ['\\[', '\\]']],
        processEscapes: true, tags: 'ams'},
  svg: {fontCache: 'global'},
  startup: {pageReady() {
    return MathJax.startup.defaultPageReady().then(() => {
      document.body.setAttribute('data-mathjax', 'typeset');
      const tops = {};  // heading positions after typesetting, for screenshots of one section
      document.querySelectorAll('main h2[id], main h3[id]').forEach(h => tops[h.id] = Math.round(h.getBoundingClientRect().top + scrollY));
      document.body.setAttribute('data-heading-tops', JSON.stringify(tops));
    });
  }}
};"""


def _sidebar_html(entries, titles, pages, current):
    def item(f):
        name = pages.get(f, html_name(f))
        cls = ' class="active"' if f == current else ''
        return f'<li><a href="{name}"{cls}>{html.escape(titles.get(f, f))}</a></li>'
    out = []
    for e in entries:
        if isinstance(e, str): out.append(item(e))
        elif 'contents' in e:
            out.append(f'<li class="sidebar-section"><span class="sidebar-section-title">{html.escape(str(e.get("section", "")))}</span>'
                       f'<ul>{_sidebar_html(e["contents"], titles, pages, current)}</ul></li>')
        elif 'href' in e:
            out.append(f'<li><a href="{pages.get(e["href"], e["href"])}">{html.escape(str(e.get("text", e["href"])))}</a></li>')
    return '\n'.join(out)


def page_html(site, entries, titles, pages, nb_rel, cells, fm, errors):
    body = '\n'.join(cell_html(c, i) for i, c in enumerate(cells))
    body, toc = _add_heading_ids(body)
    body = _relink(body, site['site_url'], pages)
    title = fm.get('title', titles.get(nb_rel, nb_rel))
    desc = fm.get('description')
    desc_html = f'<div class="description">{md2html(str(desc))}</div>' if desc else ''
    banner = ''
    if errors:
        items = ''.join(f'<li>notebook cell {e["cell"]} (nbdev: "in cell {e["nbdev_cell"]}"): <code>{html.escape(e["error"])}</code><pre>{html.escape(chr(10).join(e["source"]))}</pre></li>'
                        for e in errors)
        banner = (f'<div class="preview-error" role="alert"><strong>nbdev_docs would stop on this page:</strong> '
                  f'its doc processing (exec_show_docs) failed in:<ul>{items}</ul></div>')
    toc_html = ''.join(f'<li class="toc-h{l}"><a href="#{i}">{t}</a></li>' for l, i, t in toc)
    nav_right = ''.join(f'<a href="{html.escape(o["href"])}">{html.escape(o.get("text") or o.get("icon") or o["href"])}</a>'
                        for o in site['navbar_right'])
    return f"""<!DOCTYPE html>
<html lang="en"><head>
<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content=".ci/preview_docs.py (nbdev processors; Quarto stand-in)">
<title>{html.escape(str(title))} – {html.escape(site['title'])}</title>
<link rel="stylesheet" href="preview.css"><link rel="stylesheet" href="styles.css">
<script>{MATHJAX_CONFIG}</script>
<script id="MathJax-script" defer src="mathjax/{MATHJAX_BUNDLE}"></script>
</head><body>
<nav class="navbar"><a class="navbar-brand" href="index.html">{html.escape(site['title'])}</a><span class="navbar-right">{nav_right}</span></nav>
<div class="page-layout">
<nav id="quarto-sidebar" class="sidebar"><ul>{_sidebar_html(entries, titles, pages, nb_rel)}</ul></nav>
<main class="content" id="quarto-document-content">
<header id="title-block-header"><h1 class="title">{html.escape(str(title))}</h1>{desc_html}</header>
{banner}
{body}
</main>
<nav id="TOC" class="toc"><h2>On this page</h2><ul>{toc_html}</ul></nav>
</div></body></html>
"""


def _preview_css():
    from pygments.formatters import HtmlFormatter
    pyg = HtmlFormatter(style='default').get_style_defs(['.sourceCode', '.highlight'])
    return """/* preview_docs.py: a small stand-in for Quarto's cosmo theme */
body { margin: 0; font-family: -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Helvetica, Arial, sans-serif;
       font-size: 16px; line-height: 1.5; color: #373a3c; }
a { color: #2780e3; text-decoration: none; } a:hover { text-decoration: underline; }
.navbar { background: #2780e3; color: #fff; padding: 0.6rem 1.2rem; display: flex; justify-content: space-between; }
.navbar a { color: #fff; font-weight: 500; margin-left: 1rem; } .navbar-brand { margin-left: 0 !important; font-size: 1.2rem; }
.page-layout { display: grid; grid-template-columns: 250px minmax(0, 1fr) 210px; gap: 1.5rem; }
.sidebar { padding: 1rem 0.5rem 1rem 1rem; font-size: 0.92rem; border-right: 1px solid #eee; }
.sidebar ul { list-style: none; padding-left: 0; margin: 0; } .sidebar ul ul { padding-left: 0.8rem; }
.sidebar li { margin: 0.2rem 0; } .sidebar a { color: #555; } .sidebar a.active { color: #2780e3; font-weight: 600; }
.sidebar-section-title { display: block; margin-top: 0.7rem; font-weight: 600; color: #333; }
.toc { padding-top: 1rem; font-size: 0.85rem; } .toc h2 { font-size: 0.9rem; margin: 0 0 0.4rem; }
.toc ul { list-style: none; padding-left: 0; border-left: 1px solid #ddd; } .toc li { padding-left: 0.6rem; }
.toc li.toc-h3 { padding-left: 1.3rem; } .toc a { color: #666; }
main.content { padding: 1rem 0 4rem; min-width: 0; }
h1.title { font-size: 2.1rem; margin-bottom: 0.2rem; }
pre { background: #f7f7f7; padding: 0.6rem 0.8rem; overflow-x: auto; border-radius: 4px; font-size: 0.85rem; }
code { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 0.88em; color: #9753b8; }
pre code, a code { color: inherit; }
.sidebar, .toc { position: sticky; top: 0; align-self: start; max-height: 100vh; overflow-y: auto; }
.cell-output-display { overflow-x: auto; }
mjx-container[display="true"] { overflow-x: auto; overflow-y: hidden; max-width: 100%; }
.cell-output-error pre { background: #fdecea; }
img.figure-img, .cell-output-display img { max-width: 100%; height: auto; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.9rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25rem 0.6rem; text-align: left; }
.preview-error { background: #fdecea; border: 1px solid #e57373; padding: 0.6rem 1rem; border-radius: 4px; margin: 1rem 0; }
details.code-fold summary { cursor: pointer; color: #666; }
""" + pyg + '\n'


def _copy_assets(out, nbs):
    import mathjax  # the django-static-mathjax wheel: MathJax 3 (es5 bundles), no dependencies
    es5 = Path(mathjax.__file__).parent / 'static' / 'mathjax' / 'es5'
    dst = out / 'mathjax'
    if not (dst / MATHJAX_BUNDLE).exists():
        bundles = {p.name for p in es5.glob('*.js')} - {MATHJAX_BUNDLE}
        shutil.copytree(es5, dst, ignore=lambda d, names: [n for n in names if Path(d) == es5 and n in bundles],
                        dirs_exist_ok=True)
    shutil.copy(Path(nbs) / 'styles.css', out / 'styles.css')
    if (Path(nbs) / 'images').is_dir():   # screenshots and figures the pages link to (Quarto copies them too)
        shutil.copytree(Path(nbs) / 'images', out / 'images', dirs_exist_ok=True)
    (out / 'preview.css').write_text(_preview_css())


def resolve_pages(names, nbs):
    "Page arguments (`20_cmp`, `20_cmp.ipynb`, `nbs/20_cmp.ipynb`, `cmp`) as notebook paths relative to nbs."
    all_nbs = site_notebooks(nbs)
    res = []
    for n in names:
        stem = Path(n).name.removesuffix('.ipynb')
        hit = [p for p in all_nbs if Path(p).stem == stem] or [p for p in all_nbs if html_name(p) == stem + '.html']
        if not hit: raise SystemExit(f'preview_docs: no notebook {n!r} in {nbs} (have: {", ".join(all_nbs)})')
        res.append(hit[0])
    return res


def build(pages=None, out=OUT, exec_docs=True, root=ROOT, log=print):
    "Build the preview of `pages` (notebooks relative to nbs; default: every notebook nbdev_docs renders) into `out`."
    site = site_config(root)
    nbs = site['nbs']
    entries = sidebar_entries(nbs)
    notebooks = site_notebooks(nbs)
    pages = notebooks if pages is None else list(pages)
    known = list(dict.fromkeys(sidebar_files(entries) + notebooks))
    titles = {f: page_title(nbs / f) for f in known if (nbs / f).exists()}
    links = {f: html_name(f) for f in known} | {Path(f).name: html_name(f) for f in known}  # by path and by name
    out = Path(out); out.mkdir(parents=True, exist_ok=True)
    _copy_assets(out, nbs)
    report = {}
    for nb_rel in pages:
        t0 = time.time()
        cells, fm, errors, warns = process_notebook(nbs / nb_rel, exec_docs=exec_docs, root=root)
        dst = out / html_name(nb_rel)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(page_html(site, entries, titles, links, nb_rel, cells, fm, errors))
        report[nb_rel] = dict(html=str(dst), seconds=round(time.time() - t0, 1), errors=errors, mixed_import_cells=warns)
        log(f'{nb_rel:24s} -> {dst.relative_to(out)}  {report[nb_rel]["seconds"]:6.1f} s'
            + ''.join(f'\n    ERROR in nbdev doc processing, notebook cell {e["cell"]}: {e["error"]}' for e in errors))
    (out / 'preview_report.json').write_text(json.dumps(report, indent=1))
    return report


# ---------------------------------------------------------------- Chromium
def chromium():
    "The Chromium binary, or None."
    return next((shutil.which(n) for n in ('chromium', 'chromium-browser', 'google-chrome') if shutil.which(n)), None)


def _chromium_args(extra, budget_ms):
    return [chromium(), '--headless', '--no-sandbox', '--disable-gpu', '--hide-scrollbars', '--allow-file-access-from-files',
            '--no-first-run', '--disable-extensions', f'--virtual-time-budget={budget_ms}', *extra]


def screenshot(page, png, width=1280, height=1400, budget_ms=15000, timeout=180):
    """A PNG of `page` (an HTML file) as Chromium shows it after `budget_ms` of virtual time (MathJax has typeset).
    `page.html#heading-id`: the `height` pixels from that heading down (headless Chromium paints blank when it
    scrolls to a fragment itself, so this takes a tall shot and crops it)."""
    png = Path(png); png.parent.mkdir(parents=True, exist_ok=True)
    page, _, frag = str(page).partition('#')
    top = 0
    if frag:
        m = re.search(r'data-heading-tops="([^"]*)"', dump_dom(page, budget_ms, timeout, width, height))
        tops = json.loads(html.unescape(m[1])) if m else {}
        if frag not in tops: raise ValueError(f'{page} has no heading #{frag} (has: {", ".join(tops)})')
        top = max(tops[frag] - 16, 0)
    target, tmp = Path(page), None
    if top + height > 16000:                    # beyond what one Chromium shot reaches: hide what comes before the heading
        tmp = target.with_name(f'.shot_{target.name}')
        hide = ("<script>addEventListener('DOMContentLoaded', () => { let n = document.getElementById(%s);"
                " while (n && n !== document.body) { for (let s = n.previousElementSibling; s; s = s.previousElementSibling)"
                " if (!s.matches('nav, header, .sidebar, .toc')) s.style.display = 'none'; n = n.parentElement; } });</script>" % json.dumps(frag))
        tmp.write_text(target.read_text().replace('</head>', hide + '</head>', 1))
        target, top = tmp, 0
    shot_h = min(top + height, 16000)
    try:
        r = subprocess.run(_chromium_args([f'--window-size={width},{shot_h}', f'--screenshot={png}', target.resolve().as_uri()],
                                          budget_ms), capture_output=True, text=True, timeout=timeout)
    finally:
        if tmp is not None: tmp.unlink(missing_ok=True)
    if not png.exists(): raise RuntimeError(f'chromium wrote no screenshot of {page}: {r.stderr[-2000:]}')
    if top:
        from PIL import Image
        with Image.open(png) as im: im.crop((0, top, width, min(top + height, shot_h))).save(png)
    return png


def dump_dom(page, budget_ms=15000, timeout=180, width=1280, height=1400):
    "The page's DOM after Chromium ran its scripts (MathJax) for `budget_ms` of virtual time."
    r = subprocess.run(_chromium_args([f'--window-size={width},{height}', '--dump-dom', Path(page).resolve().as_uri()], budget_ms),
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0 or not r.stdout: raise RuntimeError(f'chromium --dump-dom failed on {page}: {r.stderr[-2000:]}')
    return r.stdout


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('pages', nargs='*', help='notebooks to build (default: all), e.g. index 20_cmp 95_tables')
    p.add_argument('--shot', action='append', default=[], metavar='PAGE#ID',
                   help='with --screenshots: also a shot from a heading down, e.g. --shot weather.html#dark-and-over-exposure')
    p.add_argument('--out', default=str(OUT), help='output folder (default: _site_preview)')
    p.add_argument('--no-exec', action='store_true', help="do not execute show_doc cells (fast; API docs missing)")
    p.add_argument('--screenshots', action='store_true', help='PNG of each built page in OUT/screenshots (Chromium)')
    p.add_argument('--width', type=int, default=1280); p.add_argument('--height', type=int, default=1400)
    p.add_argument('--lint', action='store_true', help='only list cells nbdev_docs executes besides imports; exit 1 if any')
    a = p.parse_args(argv)
    site = site_config()
    pages = resolve_pages(a.pages, site['nbs']) if a.pages else None
    if a.lint:
        bad = {nb: r for nb in (pages or site_notebooks(site['nbs'])) if (r := lint_notebook(site['nbs'] / nb))}
        for nb, rows in bad.items():
            for r in rows: print(f'{nb}: cell {r["cell"]} mixes imports with other code: {r["first_line"]}')
        print(f'{sum(map(len, bad.values()))} cell(s) in {len(bad)} notebook(s) that nbdev_docs executes besides imports '
              '(move the imports to a cell of their own)')
        return 1 if bad else 0
    report = build(pages, Path(a.out), exec_docs=not a.no_exec)
    if a.screenshots:
        if not chromium(): raise SystemExit('preview_docs: --screenshots needs chromium (apt-get install chromium)')
        for nb_rel, r in report.items():
            png = screenshot(r['html'], Path(a.out) / 'screenshots' / (Path(r['html']).stem + '.png'), a.width, a.height)
            print(f'screenshot {png}')
        for s in a.shot:
            name, _, frag = s.partition('#')
            png = screenshot(Path(a.out) / f'{name}#{frag}', Path(a.out) / 'screenshots' / f'{Path(name).stem}_{frag}.png', a.width, a.height)
            print(f'screenshot {png}')
    failed = [nb for nb, r in report.items() if r['errors']]
    print(f'preview: {len(report)} page(s) in {a.out}/ (open {Path(a.out) / "index.html"})')
    if failed: print(f'{len(failed)} page(s) fail in nbdev doc processing, so nbdev_docs would fail: {", ".join(failed)}')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
