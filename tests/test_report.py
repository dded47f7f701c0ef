"""`tpas_report` end to end on a tiny SynthPAB (6 test pairs and the nine weather copies) and a run folder written by
hand: the page's structure checked against the ground truth without a browser (sections, 10 framed images each,
worst first, filter attributes, nothing loaded from elsewhere), the command line, and the filters run in headless
Chromium (skipped where /usr/bin/chromium is absent: `apt-get install -y chromium`)."""
import re
from pathlib import Path

import pytest
import torch

from tpas_nb.eval.leaderboard import rank_splits
from tpas_nb.eval.retrieval import positive_mask, sorted_relevance
from tpas_nb.report import CHROMIUM, browse, parse_report, report_cli, write_report
from toy_runs import one_thread, tiny_synthpab, untrained_run

WEATHER_SPLITS = ['test'] + [f'weather:{w}' for w in ('wind', 'rain', 'snow', 'rain_snow', 'dark', 'dark_wind', 'dark_rain',
                                                      'dark_snow', 'light')]


@pytest.fixture(scope='module')
def toy(tmp_path_factory):
    "(run folder, tmp): a freshly initialised, seeded X-VLM on a SynthPAB of 6 test pairs with weather copies."
    tmp = tmp_path_factory.mktemp('report')
    with one_thread():
        sp = tiny_synthpab(tmp / 'sp', test_pairs=6, weather=True)
        untrained_run(tmp / 'run', 'xvlm', sp, eval_batch=12)
        weather = write_report(tmp / 'run', tmp / 'weather.html', splits='weather')
        yield tmp / 'run', tmp, weather


def test_page_structure_matches_the_ground_truth(toy):
    "12 queries x 10 images; each frame's class is the ground truth's; worst first; filters cover every value; self-contained."
    run, tmp, _ = toy
    page = write_report(run, tmp / 'test.html').read_text(encoding='utf-8')
    rep = parse_report(page)
    secs = rep['sections']
    assert len(secs) == 12 and all(len(s['figures']) == 10 for s in secs)
    r = rank_splits(run, 'test')['test']
    g = r.gallery
    first = sorted_relevance(r.scores, positive_mask(g.text_image_ids, g.image_ids))[0].to(torch.uint8).argmax(1) + 1
    n_partner = 0
    for s in secs:
        q = int(s['attrs']['q'])
        assert int(s['attrs']['rank']) == int(first[q]) and s['attrs']['kind'] == g.text_kinds[q]
        for f in s['figures']:
            gi = int(f['g'])
            want = 'hit' if g.image_ids[gi] == g.text_image_ids[q] else 'partner' if g.image_person_ids[gi] == g.text_person_ids[q] else 'miss'
            assert want in f['cls'] and not {'hit', 'partner', 'miss'} - {want} & set(f['cls']), (q, gi, f['cls'])
            n_partner += want == 'partner'
        assert [int(f['rank']) for f in s['figures']] == list(range(1, 11))
        assert (s['truth'] is None) == (int(s['attrs']['rank']) <= 10)
    order = sorted_relevance(r.scores, positive_mask(g.text_image_ids, g.image_ids))[1][:, :10]           # Q×10, as the page ranks
    cp = positive_mask(g.text_person_ids, g.image_person_ids) & ~positive_mask(g.text_image_ids, g.image_ids)
    assert n_partner == int(cp.gather(1, order).sum()) > 0                                                 # every partner in a top 10 is marked
    keys = [(-int(s['attrs']['rank']), float(s['attrs']['margin'])) for s in secs]
    assert keys == sorted(keys), 'queries must be worst first'
    for f in ('kind', 'action', 'scene', 'split'):
        assert all(s['attrs'][f] for s in secs)
        assert set(rep['options'][f'f-{f}'][1:]) == {s['attrs'][f] for s in secs} and rep['options'][f'f-{f}'][0] == ''
    assert 'id="f-fail"' in page and 'id="shown"' in page
    assert rep['thumb_classes'] == rep['css_thumbs'] and len(rep['css_thumbs']) == 12
    assert rep['srcs'] == [] and rep['links'] == [] and not re.search(r'https?://|url\((?!data:)|@import', page)
    assert f"<td>{r.metrics()['all']['R1']:.2f}</td>" in page


def test_weather_page_and_command_line(toy, capsys):
    "--split weather: 120 queries, one selector entry per split; --itc-only --k 5; a folder that is not a run exits 1."
    run, tmp, weather = toy
    rep = parse_report(weather.read_text(encoding='utf-8'))
    assert len(rep['sections']) == 120 and rep['options']['f-split'] == [''] + WEATHER_SPLITS
    out = report_cli([str(run), '--out', str(tmp / 'cli.html'), '--itc-only', '--k', '5', '--max-queries', '7'])
    assert 'wrote' in capsys.readouterr().out
    secs = parse_report(out.read_text(encoding='utf-8'))['sections']
    assert len(secs) == 7 and {len(s['figures']) for s in secs} == {5}
    assert 'ITC similarity only' in out.read_text(encoding='utf-8')
    with pytest.raises(SystemExit) as e: report_cli([str(tmp), '--out', str(tmp / 'x.html')])
    err = capsys.readouterr().err
    assert e.value.code == 1 and err.startswith('tpas_report: error:') and 'no config.yaml' in err, err
    with pytest.raises(SystemExit) as e: report_cli([str(run), '--split', 'ucc', '--out', str(tmp / 'x.html')])
    assert e.value.code == 1 and "['ucc'] not found" in capsys.readouterr().err


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f'{CHROMIUM} not installed (apt-get install -y chromium): the filters need a browser')
def test_filters_hide_queries_in_chromium(toy):
    "A URL fragment sets the filters; after the page's script ran, only the matching queries are visible and counted."
    _, _, weather = toy
    all_secs = parse_report(weather.read_text(encoding='utf-8'))['sections']
    dom = browse(weather, 'kind=anomaly&split=weather:rain')
    vis = [s for s in parse_report(dom)['sections'] if not s['hidden']]
    want = [s for s in all_secs if s['attrs']['kind'] == 'anomaly' and s['attrs']['split'] == 'weather:rain']
    assert len(vis) == len(want) == 6 and all(s['attrs']['split'] == 'weather:rain' and s['attrs']['kind'] == 'anomaly' for s in vis)
    assert re.search(r'showing <span id="shown">6</span> of 120 queries', dom)
    dom = browse(weather, 'fail=1&split=test')
    vis = [s for s in parse_report(dom)['sections'] if not s['hidden']]
    assert len(vis) == sum(s['attrs']['rank'] != '1' and s['attrs']['split'] == 'test' for s in all_secs)
    assert all(s['attrs']['rank'] != '1' for s in vis)
