"""`tpas_search --serve` end to end: an X-VLM run trained for two steps on a tiny SynthPAB serves the page of the SynthPAB
test images; a typed sentence in headless Chromium gives the ranked list the API gives, a click shows the image's caption
and pose map; 50 queries in a row over HTTP; bad input (an empty query, an unknown route, a missing image, a missing run
folder, a busy port, an empty folder) gets a status and a message, and the server keeps running. Shared on 0.0.0.0 the page
asks for its token (none or a wrong one: 403, in a browser too; the right one: the page works, and a cookie carries it
from then on), and it indexes only folders under its root, however the path is spelt. The browser tests are skipped,
saying why, where /usr/bin/chromium is absent (Debian: apt-get install chromium)."""
import json, os, re, shutil, socket, statistics, subprocess, sys, time, urllib.error, urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest

from toy_runs import tiny_synthpab, trained_run

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, OMP_NUM_THREADS='1', MPLBACKEND='Agg', PYTHONWARNINGS='ignore')
CLI = [shutil.which('tpas_search')] if shutil.which('tpas_search') else [sys.executable, '-m', 'tpas_nb.search']
CHROMIUM = '/usr/bin/chromium' if Path('/usr/bin/chromium').exists() else shutil.which('chromium')
FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
         '--disable-component-update', '--disable-sync']
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason='no /usr/bin/chromium: the browser tests need it (apt-get install chromium)')


@pytest.fixture(scope='module')
def toy(tmp_path_factory):
    "(SynthPAB root, run folder): 8 training pairs, 4 test pairs (8 images), X-VLM trained for 2 steps."
    tmp = tmp_path_factory.mktemp('serve')
    sp = tiny_synthpab(tmp / 'sp', train_pairs=8, val_pairs=2)
    return sp, trained_run(tmp / 'run', 'xvlm', sp)


def start(*args, timeout=180):
    "(process, url, printed lines) of `tpas_search --serve --port 0 ARGS` once it listens."
    p = subprocess.Popen(CLI + ['--serve', '--port', '0', *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=ENV, cwd=REPO)
    lines, t = [], time.time()
    while time.time() - t < timeout:
        line = p.stdout.readline()
        if not line and p.poll() is not None: break
        lines.append(line.rstrip())
        if line.startswith('serving the search page at '): return p, line.split()[5], lines
    p.kill()
    raise AssertionError('tpas_search --serve did not start:\n' + '\n'.join(lines))


@pytest.fixture(scope='module')
def page(toy):
    "(url, printed lines, process) of the page serving the 8 SynthPAB test images (ITM re-ranking of the top 4); it may index in tmp."
    sp, run = toy
    p, url, lines = start('--run', run, '--gallery', sp / 'test', '--k-test', 4, '--allow-root', sp.parent)
    yield url, lines, p
    assert p.poll() is None, 'the server died during the tests:\n' + p.stdout.read()
    p.terminate(); p.wait(30)


def ask(url, post=None, headers={}):
    "(HTTP status, JSON or bytes) of a GET, or of a JSON POST."
    data = json.dumps(post).encode() if post is not None else None
    req = urllib.request.Request(url, data, {**({'Content-Type': 'application/json'} if data else {}), **headers})
    try: r = urllib.request.urlopen(req, timeout=120)
    except urllib.error.HTTPError as e: r = e
    body = r.read()
    return r.status, json.loads(body) if r.headers.get_content_type() == 'application/json' else body


def api_results(url, q, **kw) -> list:
    "(rank, path, stage) of the API's answer to `q`, with the page's defaults."
    st, r = ask(url + 'api/search?' + urlencode(dict(q=q, **kw)))
    assert st == 200, r
    return [(str(x['rank']), x['path'], x['stage']) for x in r['results']]


def test_serve_prints_the_index_and_the_address(page):
    "Before it listens, the command says what it indexed, how long it took and how much memory it holds."
    url, lines, _ = page
    assert re.fullmatch(r'http://127\.0\.0\.1:\d+/', url), url
    head = '\n'.join(lines)
    assert '8 images of' in head and 'indexed in' in head and '8 embedded' in head and 'peak memory' in head, head
    assert '8 with captions' in head, head                                 # a SynthPAB split: its annotation is read


def test_50_queries_in_a_row(page, toy, capsys):
    "50 sentences, with and without ITM: every answer ranked and complete, the server alive; latency printed."
    url, _, proc = page
    sp, _ = toy
    words = ['a man', 'a woman', 'someone', 'a girl in red', 'a bald man in a white t-shirt']
    acts = ['lying on the ground', 'running on a beach', 'falling down', 'sitting on the grass', 'waving', 'being hit']
    ms = []
    for i in range(50):
        q = f"{words[i % len(words)]} {acts[i % len(acts)]}" + ' quickly' * (i // 30)
        t = time.perf_counter()
        st, r = ask(url + 'api/search?' + urlencode(dict(q=q, topk=5, itm=i % 2)))
        ms.append(1000 * (time.perf_counter() - t))
        assert st == 200, r
        assert [x['rank'] for x in r['results']] == [1, 2, 3, 4, 5] and all((sp / 'test' / x['path']).is_file() for x in r['results'])
        assert {x['stage'] for x in r['results']} == ({'itm', 'itc'} if i % 2 else {'itc'}), r   # top 4 re-ranked, the 5th by ITC
    assert proc.poll() is None
    with capsys.disabled():                                                      # shown in the CI log
        print(f"\n50 queries over HTTP, 8 images: median {statistics.median(ms):.0f} ms, max {max(ms):.0f} ms", end=' ')


def test_bad_requests_do_not_stop_the_server(page, toy):
    "An empty query (400), an unknown route, a missing image and a path outside the folder (404), a folder without images "
    "and an unreadable image (400, named); then a search still answers, on the folder indexed before."
    url, _, proc = page
    sp, _ = toy
    tmp = sp.parent
    for path, status, says in [('api/search?q=', 400, 'the query is empty'), ('api/search?q=+++', 400, 'the query is empty'),
                               ('api/search?q=man&topk=-1', 400, 'topk'), ('no/such/page', 404, 'no such page'),
                               ('image/999.jpg', 404, 'not an image of the indexed folder'),
                               ('image/' + quote('../annotation/test/attr.json', safe=''), 404, 'not an image of the indexed folder'),
                               ('pose/999.jpg', 404, 'not an image')]:
        st, r = ask(url + path)
        assert st == status and says in r['detail'], (path, st, r)
    (tmp / 'empty').mkdir()
    st, r = ask(url + 'api/index', dict(folder=str(tmp / 'empty')))
    assert st == 400 and 'no images' in r['detail'], r
    (tmp / 'bad').mkdir(); shutil.copy(sp / 'test' / '0.jpg', tmp / 'bad'); (tmp / 'bad' / 'x.png').write_bytes(b'not a png')
    st, r = ask(url + 'api/index', dict(folder=str(tmp / 'bad')))
    assert st == 400 and str(tmp / 'bad' / 'x.png') in r['detail'] and 'cannot read this image' in r['detail'], r
    st, r = ask(url + 'api/search?' + urlencode(dict(q='a person lying on the ground')))
    assert st == 200 and r['n_images'] == 8 and len(r['results']) == 8, r
    assert proc.poll() is None


@pytest.mark.parametrize('problem', ['missing run', 'busy port', 'empty folder'])
def test_serve_refuses_to_start(toy, tmp_path, capsys, problem):
    "Status 1 and one line on stderr naming the problem, nothing served (search_cli called in this process: no import time)."
    from tpas_nb.search import search_cli
    sp, run = toy
    args = ['--run', run, '--gallery', sp / 'test']
    busy = None
    if problem == 'missing run': args[1], says = tmp_path / 'no_run', f"{tmp_path / 'no_run'}: run folder not found"
    if problem == 'empty folder': (tmp_path / 'empty').mkdir(); args[3], says = tmp_path / 'empty', 'no images'
    if problem == 'busy port':
        busy = socket.socket(); busy.bind(('127.0.0.1', 0)); busy.listen()
        args, says = args + ['--port', busy.getsockname()[1]], '--port 0 for a free one'
    try:
        with pytest.raises(SystemExit) as e: search_cli(['--serve', '--port', '0', *map(str, args)])
    finally:
        if busy: busy.close()
    out = capsys.readouterr()
    assert e.value.code == 1, out
    assert out.err.startswith('tpas_search: error:') and says in out.err and len(out.err.splitlines()) == 1, out.err
    assert 'serving' not in out.out


class Browser:
    "Headless Chromium driven over the DevTools protocol: one page, typed text, key presses, clicks, JavaScript."
    def __init__(self, profile: Path):
        import websocket
        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f'--user-data-dir={profile}', '--remote-debugging-port=0',
                                      '--window-size=1200,900', 'about:blank'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file, t = profile / 'DevToolsActivePort', time.time()
        while not (port_file.exists() and len(port_file.read_text().split()) >= 2):
            assert time.time() - t < 60 and self.proc.poll() is None, 'chromium did not start its DevTools server'
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f'http://127.0.0.1:{port}/json/list', timeout=30) as r:
            target = next(t for t in json.load(r) if t['type'] == 'page')
        self.ws = websocket.create_connection(target['webSocketDebuggerUrl'], timeout=60, suppress_origin=True)
        self.n = 0

    def call(self, method: str, **params) -> dict:
        self.n += 1
        self.ws.send(json.dumps(dict(id=self.n, method=method, params=params)))
        while True:                                            # skip events until our answer
            m = json.loads(self.ws.recv())
            if m.get('id') == self.n:
                if 'error' in m: raise RuntimeError(f"{method}: {m['error']}")
                return m.get('result', {})

    def js(self, expression: str):
        r = self.call('Runtime.evaluate', expression=expression, returnByValue=True, awaitPromise=True)
        if 'exceptionDetails' in r: raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r['result'].get('value')

    def wait(self, expression: str, timeout: float = 60):
        t = time.time()
        while time.time() - t < timeout:
            if v := self.js(expression): return v
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {expression}; page text: {self.js('document.body.innerText')[:2000]}")

    def goto(self, url: str, until: str = "!!document.getElementById('q')"):
        "Open `url` and wait until the new document is loaded and `until` holds (default: the search box is there)."
        self.js('window.__left = 1')
        self.call('Page.navigate', url=url)
        self.wait(f"!window.__left && document.readyState === 'complete' && ({until})")

    def type(self, text: str): self.call('Input.insertText', text=text)

    def press(self, key: str, code: int):
        self.call('Input.dispatchKeyEvent', type='keyDown', key=key, code=key, windowsVirtualKeyCode=code, nativeVirtualKeyCode=code,
                  **({'text': '\r'} if key == 'Enter' else {}))
        self.call('Input.dispatchKeyEvent', type='keyUp', key=key, code=key, windowsVirtualKeyCode=code, nativeVirtualKeyCode=code)

    def click(self, selector: str):
        x, y = self.js(f"(r => [r.x + r.width / 2, r.y + r.height / 2])(document.querySelector({json.dumps(selector)}).getBoundingClientRect())")
        for kind in ('mouseMoved', 'mousePressed', 'mouseReleased'):
            self.call('Input.dispatchMouseEvent', type=kind, x=x, y=y, button='left', clickCount=1)

    def close(self):
        self.ws.close(); self.proc.terminate(); self.proc.wait(30)


RESULTS_JS = "[...document.querySelectorAll('#results li')].map(li => [li.dataset.rank, li.dataset.path, li.dataset.stage])"


@needs_chromium
def test_browser_typed_query_click_and_errors(page, toy, tmp_path):
    "Type a sentence and press Enter: the list in the DOM is the API's ranking; clicking the first image shows its "
    "caption (the annotation's) and its pose map; Escape closes it; an empty query shows the server's message on the page."
    pytest.importorskip('websocket', reason='websocket-client drives Chromium over the DevTools protocol (pip install websocket-client)')
    url, _, proc = page
    sp, _ = toy
    from tpas_nb.data.pab import PABFolder
    captions = {Path(r['image']).name: r['caption'][0] for r in PABFolder(sp).records('test')}
    b = Browser(tmp_path / 'profile')
    try:
        b.goto(url)
        assert '8 images of' in b.wait("document.getElementById('info').textContent.includes('images of') && document.getElementById('info').textContent")
        q = 'a woman in a red jacket lying on the ground'
        b.js("document.getElementById('q').focus()"); b.type(q); b.press('Enter', 13)
        assert b.wait("['done', 'error'].includes(document.getElementById('status').dataset.state) && document.getElementById('status').dataset.state") == 'done', \
            b.js("document.getElementById('error').textContent")
        shown = [tuple(x) for x in b.js(RESULTS_JS)]
        assert shown == api_results(url, q, topk=20, itm=1) and len(shown) == 8, shown
        assert [s for _, _, s in shown] == ['itm'] * 4 + ['itc'] * 4
        assert b.js("location.search").startswith('?q=a+woman')                  # the address holds the query: a link to it
        b.click('#results li')
        b.wait("document.getElementById('detail').classList.contains('open') && document.getElementById('d-caption').textContent.includes('caption')")
        assert b.js("document.getElementById('d-caption').textContent") == f"its caption: “{captions[shown[0][1]]}”"
        assert q in b.js("document.getElementById('d-query').textContent")
        assert b.wait("(i => i.complete && i.naturalWidth > 0 && getComputedStyle(document.getElementById('d-posefig')).display !== 'none')(document.getElementById('d-pose'))")
        assert b.js("document.getElementById('d-pose').src").endswith(f'/pose/{shown[0][1]}')
        b.press('Escape', 27)
        assert b.js("document.getElementById('detail').classList.contains('open')") is False
        b.goto(url + '?q=')                                                   # an empty query: the message on the page
        b.wait("document.getElementById('status').dataset.state === 'error'")
        assert 'the query is empty' in b.js("document.getElementById('error').textContent")
        assert b.js(RESULTS_JS) == []
        b.goto(url + '?q=man&topk=ten')
        b.wait("document.getElementById('status').dataset.state === 'error'")
        assert 'topk' in b.js("document.getElementById('error').textContent")
    finally: b.close()
    assert proc.poll() is None


class _Results(HTMLParser):
    "(data-rank, data-path, data-stage) of each <li> of a dumped page."
    def __init__(self):
        super().__init__(); self.items = []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == 'li' and 'data-rank' in a: self.items.append((a['data-rank'], a['data-path'], a['data-stage']))


@needs_chromium
def test_browser_query_in_the_address(page, tmp_path):
    "chromium --dump-dom of /?q=…&topk=3&itm=0: the page runs the search on load; its list is the API's."
    url, _, _ = page
    q = dict(q='a man running on a beach', topk=3, itm=0)
    r = subprocess.run([CHROMIUM, *FLAGS, f'--user-data-dir={tmp_path / "profile"}', '--virtual-time-budget=20000', '--dump-dom',
                        f"{url}?{urlencode(q)}"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    p = _Results(); p.feed(r.stdout)
    assert p.items == api_results(url, **q) and len(p.items) == 3 and {s for *_, s in p.items} == {'itc'}, (p.items, r.stdout[-3000:])
    assert 'data-state="done"' in r.stdout


@pytest.fixture(scope='module')
def shared(toy):
    "(url with the token, the url without it, printed lines, process) of the page shared on 0.0.0.0 (root: the SynthPAB root)."
    sp, run = toy
    p, url, lines = start('--run', run, '--gallery', sp / 'test', '--k-test', 4, '--host', '0.0.0.0')
    yield url, url.split('?')[0], lines, p
    assert p.poll() is None, 'the shared server died during the tests:\n' + p.stdout.read()
    p.terminate(); p.wait(30)


def test_shared_page_needs_its_token(shared, toy, tmp_path):
    "Off loopback: a token is made and printed; every route refuses (403) a request without it or with a wrong one; the header "
    "works; 'Index another folder' refuses a folder outside the root, however spelt (directly, through .., through a link)."
    url, base, lines, proc = shared
    sp, _ = toy
    token = re.fullmatch(r'http://127\.0\.0\.1:\d+/\?token=([\w-]{43})', url)[1]
    assert any('beyond this machine: every request needs the token' in l and f'/?token={token}' in l for l in lines), lines
    assert f'the page indexes only folders under {sp.resolve()}' in '\n'.join(lines)
    for path in ('', 'api/info', 'api/search?q=a+man', 'image/0.jpg', 'pose/0.jpg', 'api/item?path=0.jpg', 'no/such/page'):
        sep = '&' if '?' in path else '?'
        for suffix, says in (('', 'no token'), (f'{sep}token=not-{token}', 'wrong token')):
            st, r = ask(base + path + suffix)
            assert st == 403 and r['detail'].startswith(says), (path, suffix, st, r)
    auth = {'Authorization': f'token {token}'}
    st, r = ask(base + 'api/search?q=a+man&topk=3', headers=auth)
    assert st == 200 and len(r['results']) == 3, r
    outside = tmp_path / 'outside'; shutil.copytree(sp / 'test', outside)
    (sp / 'escape').symlink_to(outside, target_is_directory=True)
    try:
        for folder, via in ((outside, ''), (sp / '..' / '..' / tmp_path.name / 'outside', f' (that is {outside.resolve()})'),
                            (sp / 'escape', f' (that is {outside.resolve()})')):
            st, r = ask(base + 'api/index', dict(folder=str(folder)), headers=auth)
            assert st == 403 and r['detail'].startswith(f"{folder}{via} is outside {sp.resolve()}, the folder this page may index in"), (folder, r)
    finally: (sp / 'escape').unlink()
    st, r = ask(base + 'api/index', dict(folder=str(sp / 'test')), headers=auth)          # inside the root: indexed (from its cache)
    assert st == 200 and r['n_images'] == 8, r
    assert proc.poll() is None


@needs_chromium
def test_browser_token_and_root(shared, toy, tmp_path):
    "In Chromium: the page without the token and with a wrong one is refused (403, a page saying which); with the printed "
    "address it works (a typed query, its images loaded: the cookie carries the token to the API), and later without the "
    "token in the address too; indexing a folder outside the root shows the refusal, naming the root, on the page."
    pytest.importorskip('websocket', reason='websocket-client drives Chromium over the DevTools protocol (pip install websocket-client)')
    url, base, _, proc = shared
    sp, _ = toy
    status = "performance.getEntriesByType('navigation')[0].responseStatus"
    b = Browser(tmp_path / 'profile')
    try:
        for address, says in ((base, 'no token'), (base + '?token=wrong', 'wrong token')):
            b.goto(address, until="!!document.getElementById('refused')")
            assert b.js(status) == 403 and b.js("document.getElementById('refused').textContent").startswith(says), b.js('document.body.innerText')
            assert b.js("document.getElementById('q')") is None
        b.goto(url)
        assert '8 images of' in b.wait("document.getElementById('info').textContent.includes('images of') && document.getElementById('info').textContent")
        b.js("document.getElementById('q').focus()"); b.type('a woman lying on the ground'); b.press('Enter', 13)
        assert b.wait("['done', 'error'].includes(document.getElementById('status').dataset.state) && document.getElementById('status').dataset.state") == 'done', \
            b.js("document.getElementById('error').textContent")
        assert len(b.js(RESULTS_JS)) == 8
        assert b.wait("[...document.querySelectorAll('#results img')].every(i => i.complete && i.naturalWidth > 0)")   # images: the cookie
        assert 'token=' in b.js('location.search')                                      # the address stays a working link
        b.goto(base + '?q=a+man&topk=3')                                                 # the token only in the cookie
        assert b.wait("document.getElementById('status').dataset.state === 'done'") and len(b.js(RESULTS_JS)) == 3
        outside = tmp_path / 'elsewhere'; outside.mkdir()
        assert str(sp.resolve()) in b.js("document.getElementById('folder').placeholder")
        b.js(f"document.getElementById('folder').value = {json.dumps(str(outside))}")
        b.click('#folderform button')
        b.wait("document.getElementById('status').dataset.state === 'error'")
        err = b.js("document.getElementById('error').textContent")
        assert err.startswith(f"{outside} is outside {sp.resolve()}, the folder this page may index in"), err
        assert len(b.js(RESULTS_JS)) == 3                                                # the folder indexed before is kept
    finally: b.close()
    assert proc.poll() is None
