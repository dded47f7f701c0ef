"""The official SeDA checkpoint layout (tests/fixtures/seda_official_keys.json, written by the official code through
runs/parity/seda_official_keys.py) against this project's SeDA (21_seda): its STP keys map onto image_stp / text_stp with
their shapes, nothing dropped or rejected, and the rest is the official CMP layout key for key."""
import json
from pathlib import Path

import pytest
import torch

from tpas_nb.config import BackboneConfig, VisionConfig, TextConfig
from tpas_nb.methods import build_method
from tpas_nb.methods.seda import OFFICIAL_STP, official_seda_stp

FIX = Path(__file__).parent / 'fixtures'
SEDA = json.loads((FIX / 'seda_official_keys.json').read_text())
STP_MODULES = set(OFFICIAL_STP)


pytestmark = pytest.mark.usefixtures('one_thread')   # tests/conftest.py: torch on one thread for each test


def small_backbone() -> BackboneConfig:
    "This project's backbone at the fixture's small configuration (Swin 2-2-2-2 of final width 1024, BERT 6+6 layers of width 768)."
    v, t = SEDA['config']['vision'], SEDA['config']['text']
    return BackboneConfig(
        vision=VisionConfig(img_size=v['image_res'], patch_size=4, window_size=v['window_size'], embed_dim=v['embed_dim'],
                            depths=tuple(v['depths']), num_heads=tuple(v['num_heads'])),
        text=TextConfig(vocab_size=t['vocab_size'], hidden_size=t['hidden_size'], num_text_layers=t['fusion_layer'],
                        num_cross_layers=t['num_hidden_layers'] - t['fusion_layer'], num_attention_heads=t['num_attention_heads'],
                        intermediate_size=t['intermediate_size'], max_position_embeddings=t['max_position_embeddings'], max_len=24),
        global_pool='cls_avg', embed_dim=SEDA['config']['model']['embed_dim'], pose_hidden=96, pose_heads=16)


def stp_tensors(keys: dict) -> dict:
    "Random tensors of the fixture's shapes for the official STP modules' keys (the rest: names only)."
    g = torch.Generator().manual_seed(0)
    return {k: (torch.randn(s, generator=g) if not k.endswith('num_batches_tracked') else torch.tensor(7))
            for k, s in keys.items() if k.split('.')[0] in STP_MODULES}


def test_seda_layout_is_cmp_plus_stp():
    "The official SeDA layout is the official CMP layout plus W_d and W_m; text_proj (W_p^T) reads D_T + 3 D_I."
    cmp_file = FIX / 'cmp_official_keys.json'
    if not cmp_file.exists(): pytest.skip('tests/fixtures/cmp_official_keys.json (the official CMP layout) is not there')
    cmp = json.loads(cmp_file.read_text())['keys']
    seda = SEDA['keys']
    assert set(cmp) <= set(seda)
    assert {k.split('.')[0] for k in set(seda) - set(cmp)} == {'decoupled_linear_img', 'decoupled_linear_txt', 'modality_proj_img', 'modality_proj_txt'}
    differ = {k for k in cmp if cmp[k] != seda[k]}
    assert differ == {'text_proj.0.weight', 'text_proj.0.bias', 'text_proj.0.running_mean', 'text_proj.0.running_var', 'text_proj.2.weight'}
    assert seda['text_proj.2.weight'] == [2048, 768 + 3 * 1024]


def test_official_lr_mult_covers_stp():
    "Every official STP parameter is in init_params (trained at lr × lr_mult 2), as this project's new layers under optim.lr_mult_new."
    init = set(SEDA['init_params'])
    stp = {k for k in SEDA['keys'] if k.split('.')[0] in STP_MODULES and not k.endswith(('running_mean', 'running_var', 'num_batches_tracked'))}
    assert stp and stp <= init
    # the official multiplier also reaches pretrained layers: Swin stages 2-3, BERT layers 4, 5, 10, 11, the MLM head, the ITM head
    assert any(k.startswith('vision_encoder.layers.2.') for k in init) and any(k.startswith('text_encoder.bert.encoder.layer.10.') for k in init)
    assert not any(k.startswith('text_encoder.bert.encoder.layer.0.') for k in init)


@pytest.mark.parametrize('use_ca', [False, True])
def test_official_stp_keys_load(use_ca):
    "The fixture's STP keys fill this SeDA's image_stp / text_stp exactly (stp_proj='official'), with their shapes and values."
    keys = {**SEDA['keys'], **(SEDA['keys_use_ca'] if use_ca else {})}
    sd = stp_tensors(keys)
    m = build_method('seda', preset=small_backbone(), vocab_size=SEDA['config']['text']['vocab_size'], stp_proj='official',
                     stp_weighting='cross_attention' if use_ca else 'sigmoid')
    names = {k: None for k in keys}                          # the rest travels by name only
    stp, rest = official_seda_stp({**names, **sd}, m)
    assert set(rest) == {k for k in keys if k.split('.')[0] not in STP_MODULES}
    ours = {k for k in m.state_dict() if k.startswith(('image_stp.', 'text_stp.'))}
    assert set(stp) == ours                                  # nothing dropped, nothing rejected
    r = m.load_state_dict(stp, strict=False)
    assert r.unexpected_keys == [] and not [k for k in r.missing_keys if k.startswith(('image_stp.', 'text_stp.'))]
    assert torch.equal(m.text_stp.w_p[2].weight, sd['text_proj.2.weight'])
    assert torch.equal(m.image_stp.w_p[0].running_var, sd['vision_proj.0.running_var'])
    assert torch.equal(m.image_stp.w_d.weight, sd['decoupled_linear_img.weight'])
    if use_ca:
        k_, v_ = sd['cross_attn_txt.wkv.weight'].chunk(2)
        assert torch.equal(m.text_stp.attn.w_k.weight, k_) and torch.equal(m.text_stp.attn.w_v.weight, v_)


def test_paper_wp_rejects_official_keys():
    "A SeDA with the paper's Linear W_p cannot take the official BN → Dropout → Linear head, and says which switch fits."
    m = build_method('seda', preset=small_backbone(), vocab_size=SEDA['config']['text']['vocab_size'])
    with pytest.raises(ValueError, match="stp_proj='official'"):
        official_seda_stp(stp_tensors(SEDA['keys']), m)


def test_xvlm_heads_do_not_reach_official_wp():
    "The official SeDA starts from X-VLM 16M, whose vision_proj / text_proj are single Linears: their names are not in the official "
    "SeDA layout (BN → Dropout → Linear), so its load_state_dict(strict=False) leaves W_p at its N(0, 1e-5) draw; here W_p is new too."
    xvlm = json.loads((FIX / 'xvlm_base_16m_keys.json').read_text())['keys']
    heads = {k for k in xvlm if k.split('.')[0] in ('vision_proj', 'text_proj')}
    assert heads == {'vision_proj.weight', 'vision_proj.bias', 'text_proj.weight', 'text_proj.bias'}
    assert not heads & set(SEDA['keys'])


def test_whole_official_seda_checkpoint_loads(tmp_path):
    "A checkpoint with every key of the official SeDA layout loads into this SeDA (load_seda_checkpoint): nothing dropped but the "
    "buffers our modules rebuild, nothing missing, nothing rejected, and values in place on both the STP and the CMP side."
    from tpas_nb.methods.seda import load_seda_checkpoint
    g = torch.Generator().manual_seed(0)
    ints = ('relative_position_index', 'num_batches_tracked', 'position_ids')
    sd = {k: torch.randint(0, 7, s, generator=g) if k.endswith(ints) else torch.randn(s, generator=g) for k, s in SEDA['keys'].items()}
    p = 'text_encoder.cls.predictions.'
    sd[p + 'decoder.weight'], sd[p + 'decoder.bias'] = sd['text_encoder.bert.embeddings.word_embeddings.weight'], sd[p + 'bias']   # tied, as saved
    torch.save({'model': sd}, tmp_path / 'checkpoint_best.pth')
    m = build_method('seda', preset=small_backbone(), vocab_size=SEDA['config']['text']['vocab_size'], stp_proj='official')
    rep = load_seda_checkpoint(m, tmp_path / 'checkpoint_best.pth')
    assert (rep.missing, rep.unexpected) == ([], [])
    assert len(rep.matched) + len(rep.converted) + len(rep.dropped) == len(sd)
    assert all(k.endswith(('relative_position_index', 'attn_mask', 'position_ids')) for k in rep.dropped)
    ours = m.state_dict()
    assert torch.equal(ours['image_stp.w_m.weight'], sd['modality_proj_img.weight'])
    assert torch.equal(ours['text_stp.w_p.2.weight'], sd['text_proj.2.weight'])
    assert torch.equal(ours['backbone.text_encoder.bert.encoder.layer.7.crossattention.self.key.weight'],
                       sd['text_encoder.bert.encoder.layer.7.crossattention.self.key.weight'])
    assert torch.equal(ours['pose_branch.cross_attn.w_k.bias'], sd['pose_block.attn.k.bias'])
