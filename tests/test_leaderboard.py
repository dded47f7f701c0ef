"""The leaderboard's protocols end to end on a tiny SynthPAB: the SynthPAB test split with a distractor folder added to
its gallery (a run folder of CMP written by hand, so pose maps are read for the distractors too), Track 4's answer.txt
and query_index.txt written for it and checked against the official format, broken answer files refused with the
file and line named, and this project's settings named as the official leaderboard names them."""
from dataclasses import replace
from pathlib import Path

import pytest

from tpas_nb.config import RunConfig
from tpas_nb.eval.benchmark import benchmark_run
from tpas_nb.eval.leaderboard import (AnswerError, SUBSET_01M, leaderboard_protocol, leaderboard_table, make_distractor_folder,
                                      rank_splits, read_answer, read_query_index, score_answer, write_track4)
from toy_runs import one_thread, tiny_synthpab, untrained_run


@pytest.fixture(scope='module')
def toy(tmp_path_factory):
    "(run folder, distractor folder, tmp): a seeded CMP on a SynthPAB of 4 test pairs, and 12 distractors of another seed."
    tmp = tmp_path_factory.mktemp('leaderboard')
    with one_thread():
        sp = tiny_synthpab(tmp / 'sp')
        dis = make_distractor_folder(tmp / 'distractors', images=12, image_size=48, workers=1)
        untrained_run(tmp / 'run', 'cmp', sp)
        yield tmp / 'run', dis, tmp


def test_answer_txt_for_synthpab_test_with_distractors(toy):
    "answer.txt of the test split + 12 distractors: one CRLF line of 10 distinct gallery names per query of query_index.txt."
    run, dis, tmp = toy
    bench = benchmark_run(run, splits='test', k_tests=[4], progress=False)
    r = rank_splits(run, 'test', distractors=dis)['test']
    m = r.metrics()
    assert (m['n_queries'], m['n_gallery'], m['n_distractors']) == (8, 20, 12)
    assert r.cached == dict(gallery=True, queries=True, distractors=False)         # the split's embeddings are benchmark_run's
    assert m['itc']['all']['mAP'] <= bench['splits']['test']['rankings']['itc']['all']['mAP'] + 1e-9   # ITC: never better with distractors
    w = write_track4(r, tmp / 'track4')
    raw = Path(w['answer']).read_bytes()
    assert raw.endswith(b'\r\n') and raw.count(b'\r\n') == 8 and raw.count(b'\n') == 8 and b'\t' not in raw
    queries = read_query_index(w['query_index'])
    ans = read_answer(w['answer'], queries, r.gallery.image_names)
    assert len(ans) == len(queries) == 8 and all(len(line) == 10 == len(set(line)) for line in ans)
    assert any(n.startswith('distractor_') for line in ans for n in line)
    s = score_answer(ans, w['truth'])
    assert s['R1'] == m['all']['R1'] and s['mAP'] <= m['all']['mAP'] + 1e-9


@pytest.mark.parametrize('name,text,message', [
    ('short', 'a b c d e f g h i\n' * 8, ':1: 9 names'),
    ('tabs', ('\t'.join('abcdefghij') + '\n') * 8, ':1: separate the names by single spaces'),
    ('duplicate', 'a a c d e f g h i j\n' * 8, ":1: 'a' is listed twice"),
    ('lines', 'a b c d e f g h i j\n' * 7, '7 lines for 8 queries'),
    ('extension', 'a.jpg b c d e f g h i j\n' * 8, "without extension: 'a'"),
])
def test_broken_answer_files_are_refused(tmp_path, name, text, message):
    "Each broken file raises an AnswerError naming the file, the line and the fault."
    p = tmp_path / f'{name}.txt'
    p.write_text(text)
    with pytest.raises(AnswerError) as e: read_answer(p, queries=8, gallery=list('abcdefghijk'))
    assert message in str(e.value) and str(p) in str(e.value), str(e.value)


def test_protocol_names(toy):
    "epochs 0, train_subset 100000, the full training split and split ucc are named as the leaderboard names them."
    run, _, _ = toy
    base = RunConfig()
    sub = replace(base, data=replace(base.data, train_subset=SUBSET_01M))
    name = lambda c, s='test', d=False: (leaderboard_protocol(c, s, d) or {}).get('protocol')
    assert name(replace(base, epochs=0)) == 'Zero-shot'
    assert name(sub) == 'Fine-tuned with 0.1M PAB' and name(base) == 'Fine-tuned with 1M PAB'
    assert name(sub, 'ucc') == name(base, 'ucc') == 'UCC OOD' and name(replace(base, epochs=0), 'ucc') is None
    assert leaderboard_protocol(base, 'ucc')['table'].endswith('Trained with 1M PAB pairs')
    assert name(base, 'test', True) == "AICity'26 Track 4" and leaderboard_protocol(base, 'test', True)['ranked_by'] == 'mAP'
    assert name(run) == 'Fine-tuned with 1M PAB' and name(base, 'weather:rain') is None
    assert len(leaderboard_table()) == 7
