"""The shipped pretrained checkpoints (version 2, `pretrained`, the grids' start; version 3, `pretrained-v3`, the cpu profile's; version 4, `pretrained-v4`):
their files agree with their provenance, they load through the same path as an X-VLM checkpoint into every method, version 3's
stages chain, and (slow) the command of its first stage regenerates that stage's first epoch with the same val metrics."""
import json, os, subprocess
from pathlib import Path

import pytest
import torch

from tpas_nb.data.pab import synthpab_vocab
from tpas_nb.methods import build_method, method_table
from tpas_nb.models.encoders import SHIPPED, load_xvlm_checkpoint, resolve_checkpoint, weights_dir
from tpas_nb.pretrain import checkpoint_paths, corpus_dir, PRETRAIN_CORPORA
from tpas_nb.runs import file_digest as _sha256

REPO = Path(__file__).resolve().parents[1]
PATHS = checkpoint_paths()
PROV = json.loads(PATHS['provenance'].read_text()) if PATHS['provenance'].exists() else None
needs_ckpt = pytest.mark.skipif(PROV is None, reason='no shipped checkpoint (run tpas_pretrain)')
V3 = weights_dir() / SHIPPED['pretrained-v3']['tiny']
PROV3 = json.loads(V3.with_suffix('.json').read_text())


@needs_ckpt
def test_files_match_their_provenance():
    assert _sha256(PATHS['weights']) == PROV['sha256'] and _sha256(PATHS['vocab']) == PROV['vocab_sha256']
    assert PATHS['vocab'].read_text().splitlines() == synthpab_vocab()          # the vocabulary of every SynthPAB folder
    assert PATHS['weights'].stat().st_size < 8 * 2**20                          # a few MiB
    assert PROV['config']['init_checkpoint'] == '' and PROV['config']['method'] == 'xvlm'   # pretrained from scratch
    assert resolve_checkpoint('pretrained', 'tiny') == PATHS['weights']


def test_version3_files_match_their_provenance():
    assert _sha256(V3) == PROV3['sha256'] and _sha256(V3.with_suffix('.vocab.txt')) == PROV3['vocab_sha256']
    assert V3.stat().st_size < 8 * 2**20 and resolve_checkpoint('pretrained-v3', 'tiny') == V3
    stages = PROV3['stages']
    assert [s['stage'] for s in stages] == [1, 2, 3] and stages[0]['config']['init_checkpoint'] == ''   # stage 1 from scratch
    for prev, s in zip(stages, stages[1:]):                        # each stage starts from the previous stage's export
        assert s['config']['init_checkpoint'] == f"{prev['out_dir']}/export/xvlm_tiny_synthpab.safetensors", s['config']['init_checkpoint']
    assert stages[-1]['sha256'] == PROV3['sha256'] and PROV3['command'] == stages[-1]['command']
    assert abs(PROV3['cpu_hours'] - sum(s['train']['wall_s'] for s in stages) / 3600) < 0.01


@needs_ckpt
@pytest.mark.parametrize('name', sorted(SHIPPED))
@pytest.mark.parametrize('method', sorted(method_table().methods))
def test_loads_into_every_method(method, name):
    "Every backbone key of every method comes from the checkpoint (SeDA and GradCO replace the global heads)."
    path = resolve_checkpoint(name, 'tiny')
    m = build_method(method, vocab_size=len(path.with_suffix('.vocab.txt').read_text().splitlines()))
    rep = load_xvlm_checkpoint(m.backbone, path)
    assert rep.missing == [] and rep.converted == [], rep
    assert rep.unexpected == []
    dropped = {k.split('.')[0] for k in rep.dropped if not k.endswith(('relative_position_index', 'attn_mask', 'position_ids'))}
    assert dropped <= {'vision_proj', 'text_proj', 'text_pool'}, dropped          # only heads the method replaces


@needs_ckpt
@pytest.mark.slow
def test_the_command_regenerates_the_first_epoch(tmp_path):
    """Version 3's first stage, `tpas_pretrain` (from scratch on today's corpus), run again for its first epoch (--stop-after
    one epoch) gives the val numbers recorded in the provenance at that step, to 0.5 points of R@1 / mAP / hard-pair (float
    order on another machine or thread count may move a few queries; on the machine that made it the numbers were identical).
    Version 2's corpus is no longer the default one: its provenance keeps the command and corpus it was made with."""
    stage = PROV3['stages'][0]
    first = stage['val_curve'][0]
    env = dict(os.environ, OMP_NUM_THREADS=str(stage['threads']))
    r = subprocess.run(['tpas_pretrain', '--out-dir', str(tmp_path / 'run'), '--dest', str(tmp_path / 'w'), '--no-progress', '--synthpab-version', '3',
                        '--threads', str(stage['threads']), '--stop-after', str(first['step'])],
                       capture_output=True, text=True, cwd=REPO, env=env, timeout=4 * 3600)
    assert r.returncode == 0, r.stderr[-3000:]
    state = torch.load(tmp_path / 'run' / 'state.pt', weights_only=True)
    val = state['val_history'][0]
    assert val['step'] == first['step']
    for k in ('R1', 'mAP', 'hard_pair_acc'): assert abs(val[k] - first[k]) <= 0.5, (k, val[k], first[k])
    c3 = corpus_dir(corpus=PRETRAIN_CORPORA[3])
    assert json.loads((c3 / 'synthpab.json').read_text())['images'] == PRETRAIN_CORPORA[3]['images']


def test_version4_files_match_their_provenance():
    """Version 4's start (`pretrained-v4`): three stages, each from the previous one's export, the second and third on corpus 4b, the
    third training the cross encoder alone (ITC's encoders as the second left them); its CPU hours are wall time × threads."""
    v4 = weights_dir() / SHIPPED['pretrained-v4']['tiny']
    prov = json.loads(v4.with_suffix('.json').read_text())
    assert _sha256(v4) == prov['sha256'] and _sha256(v4.with_suffix('.vocab.txt')) == prov['vocab_sha256']
    assert v4.stat().st_size < 8 * 2**20 and resolve_checkpoint('pretrained-v4', 'tiny') == v4 and prov['version'] == 4
    s1, s2, s3 = prov['stages']
    assert s1['config']['init_checkpoint'] == ''
    for prev, s in ((s1, s2), (s2, s3)):
        assert s['config']['init_checkpoint'] == f"{prev['out_dir']}/export/xvlm_tiny_synthpab.safetensors", s['config']['init_checkpoint']
    assert '--corpus 4b' in s2['command'] and '--corpus 4b --only-cross' in s3['command_cli'] and s3['config']['optim']['lr_mult_base'] == 0.0
    assert s3['sha256'] == prov['sha256'] and prov['command'] == s3['command']
    assert prov['samples_seen_all_stages'] == sum(s['samples_seen'] for s in prov['stages'])
    assert abs(prov['cpu_hours'] - sum(s['train']['wall_s'] * s['threads'] for s in prov['stages']) / 3600) < 0.01
    assert prov['zero_shot']['test']['R1'] > 0 and 'epoch 7' in s1['stopped'] and 'stopped' not in s2   # stage 1 says where and why it stopped
