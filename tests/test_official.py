"""An official CMP checkpoint, in the key layout the official code writes (tests/fixtures/cmp_official_keys.json, made once
with that code by runs/parity/cmp_parity.py --keys), loads into our CMP on the same configuration: every key consumed,
every value in its place, a wrong shape refused by name (11a_official)."""
import json
from pathlib import Path

import pytest
import torch

from tpas_nb.config import BackboneConfig, VisionConfig, TextConfig
from tpas_nb.methods.base import Method, MethodConfig, TokenIds
from tpas_nb.models.official import load_cmp_checkpoint, official_lr_mult_names, CMP_CONV_BIASES

SPEC = json.loads((Path(__file__).parent / 'fixtures' / 'cmp_official_keys.json').read_text())


def _our_cmp() -> Method:
    "Our CMP on the fixture's configuration ('stripes', the official widths)."
    S = SPEC['config']
    b = BackboneConfig(vision=VisionConfig(img_size=S['image_res'], patch_size=4, window_size=S['window_size'], embed_dim=S['swin_embed_dim'],
                                           depths=tuple(S['depths']), num_heads=tuple(S['swin_heads']), drop_path_rate=0.0),
                       text=TextConfig(vocab_size=S['vocab_size'], hidden_size=S['bert_hidden'], num_text_layers=S['fusion_layer'],
                                       num_cross_layers=S['bert_layers'] - S['fusion_layer'], num_attention_heads=S['bert_heads'],
                                       intermediate_size=S['bert_intermediate'], max_position_embeddings=S['max_position_embeddings'],
                                       max_len=S['max_tokens']),
                       global_pool='stripes', embed_dim=S['embed_dim'], pose_hidden=96, pose_heads=16)
    return Method(b, TokenIds(S['vocab_size'], 0, 100, 101, 102, 103), MethodConfig(pose=True, ihnm=True, global_pool='stripes', embed_dim=S['embed_dim']))


def _official_checkpoint() -> dict:
    "Random tensors with the fixture's names, shapes and dtypes, the MLM decoder tied as in a real state dict; Search.py's file layout."
    g = torch.Generator().manual_seed(0)
    ints = SPEC['dtypes']
    sd = {k: torch.randint(0, 7, s, generator=g) if ints.get(k) == 'int64' else torch.randn(s, generator=g) for k, s in SPEC['keys'].items()}
    p = 'text_encoder.cls.predictions.'
    sd[p + 'decoder.weight'], sd[p + 'decoder.bias'] = sd['text_encoder.bert.embeddings.word_embeddings.weight'], sd[p + 'bias']
    return {'model': sd, 'config': {'embed_dim': SPEC['config']['embed_dim'], 'be_pose_img': True, 'pose_conv': True}}


@pytest.fixture(scope='module')
def loaded(tmp_path_factory):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    method, ckpt = _our_cmp(), _official_checkpoint()
    path = tmp_path_factory.mktemp('official') / 'checkpoint_best.pth'
    torch.save(ckpt, path)
    report = load_cmp_checkpoint(method.backbone, method.pose_branch, path)
    return method, ckpt['model'], report, path


def test_every_key_consumed(loaded):
    method, sd, rep, _ = loaded
    assert (rep.missing, rep.unexpected) == ([], [])
    assert len(rep.matched) + len(rep.converted) + len(rep.dropped) == len(sd)
    assert sorted(rep.converted) == sorted(CMP_CONV_BIASES)
    assert rep.dropped and all(k.endswith(('relative_position_index', 'attn_mask', 'position_ids')) for k in rep.dropped)   # buffers our modules rebuild
    assert set(method.backbone.state_dict()) <= set(rep.matched)                  # every backbone key filled


def test_values_land_in_place(loaded):
    method, sd, _, _ = loaded
    ours = method.state_dict()
    same = {  # official key -> ours, one or more per part of the model
        'vision_encoder.patch_embed.proj.weight': 'backbone.vision_encoder.patch_embed.proj.weight',
        'vision_encoder.layers.0.blocks.1.attn.qkv.weight': 'backbone.vision_encoder.layers.0.blocks.1.attn.qkv.weight',
        'vision_encoder.layers.2.downsample.reduction.weight': 'backbone.vision_encoder.layers.3.downsample.reduction.weight',
        'vision_encoder.layers.3.blocks.0.attn.relative_position_bias_table': 'backbone.vision_encoder.layers.3.blocks.0.attn.relative_position_bias_table',
        'text_encoder.bert.embeddings.word_embeddings.weight': 'backbone.text_encoder.cls.predictions.decoder.weight',
        'text_encoder.bert.encoder.layer.7.crossattention.self.key.weight': 'backbone.text_encoder.bert.encoder.layer.7.crossattention.self.key.weight',
        'text_encoder.cls.predictions.transform.dense.weight': 'backbone.text_encoder.cls.predictions.transform.dense.weight',
        'vision_proj.0.running_var': 'backbone.vision_proj.0.running_var', 'text_proj.2.weight': 'backbone.text_proj.2.weight',
        'itm_head.3.bias': 'backbone.itm_head.3.bias', 'temp': 'backbone.temp',
        'pose_block.norm.weight': 'pose_branch.cross_attn.norm.weight', 'pose_block.attn.k.bias': 'pose_branch.cross_attn.w_k.bias',
        'pose_block.attn.proj.weight': 'pose_branch.cross_attn.proj.weight', 'pose_conv.expand.0.weight': 'pose_branch.pose_conv.0.weight',
        'pose_conv.reduce.1.running_var': 'pose_branch.pose_conv.4.running_var',
    }
    for off, k in same.items():
        assert torch.equal(ours[k], sd[off]), f'{off} -> {k}'
    for conv, rm in (('pose_conv.expand', 'pose_branch.pose_conv.1'), ('pose_conv.reduce', 'pose_branch.pose_conv.4')):
        torch.testing.assert_close(ours[rm + '.running_mean'], sd[conv + '.1.running_mean'] - sd[conv + '.0.bias'])   # the folded bias


def test_wrong_shape_refused(loaded, tmp_path):
    method, sd, _, _ = loaded
    key = 'text_encoder.bert.encoder.layer.6.crossattention.self.value.weight'
    torch.save({'model': {**sd, key: torch.randn(768, 768)}}, tmp_path / 'bad.pth')
    with pytest.raises(ValueError, match=f'shape mismatch for {key}: checkpoint \\(768, 768\\) vs model \\(768, 1024\\)'):
        load_cmp_checkpoint(method.backbone, method.pose_branch, tmp_path / 'bad.pth')


def test_official_lr_set(loaded):
    "The official init_params of the fixture (its lr × lr_mult set), in our names: the same set, the folded conv biases aside."
    import re
    from tpas_nb.models.official import CMP_POSE_KEYS
    to_official = {f'pose_branch.{v}': k for k, v in CMP_POSE_KEYS.items()}
    def official_name(n):
        if n in to_official: return to_official[n]
        return re.sub(r'^vision_encoder\.layers\.(\d+)\.downsample\.', lambda m: f'vision_encoder.layers.{int(m[1]) - 1}.downsample.', n[len('backbone.'):])
    ours = {official_name(n) for n in official_lr_mult_names(loaded[0].backbone, loaded[0].pose_branch)}
    assert ours == set(SPEC['init_params']) - set(CMP_CONV_BIASES)
