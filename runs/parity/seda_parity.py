"""Parity of this project's SeDA heads and losses with the official SeDA code (https://github.com/ErgastiAlex/SeDA), with the
official switches (stp_proj='official', fdl_temp='shared', itm_neg_floor=1e-5), on the same encoder tokens:

    # 1. the official side, in a venv with transformers 4 (runs/parity/seda_official_keys.py says how): its model on the small
    #    configuration, random image / caption / sub-caption tokens, and what its code computes from them
    OMP_NUM_THREADS=1 /work/venv-seda/bin/python runs/parity/seda_parity.py official /tmp/seda_official /tmp/seda_parity.pt
    # 2. this project: the same weights through official_seda_stp, the same tokens, the differences
    OMP_NUM_THREADS=1 python runs/parity/seda_parity.py ours /tmp/seda_parity.pt runs/parity/seda.json

Compared: the STP factor tokens and global features of images, captions and sub-captions (eval mode: BatchNorm's running
statistics, no dropout; and train mode with the W_p dropout at 0: BatchNorm's batch statistics), ITC and FDL (the six
official contrastive terms) with the learnable τ and label smoothing 0.2. Not compared: the encoders (the CMP parity,
runs/parity/cmp_parity.py), ITM-sem (its negatives are multinomial draws through the cross encoder; the CMP parity covers
the matching loss). Captions have no padding: the official STP weights padding too (21_seda, Deviation (padding)).
"""
import json, os, subprocess, sys
from pathlib import Path
import torch
import torch.nn.functional as F

B, P, L, LS = 6, 50, 12, 7           # batch, image tokens ([CLS] + 7×7 patches), caption and sub-caption lengths
STP_MODULES = ('decoupled_linear_img', 'decoupled_linear_txt', 'modality_proj_img', 'modality_proj_txt', 'vision_proj', 'text_proj')

def official(code_dir: str, out: str):
    sys.path.insert(0, str(Path(__file__).parent))
    from seda_official_keys import official_search, MIRROR
    import torch.distributed as dist
    os.environ.setdefault('MASTER_ADDR', '127.0.0.1'); os.environ.setdefault('MASTER_PORT', '29517')
    dist.init_process_group('gloo', rank=0, world_size=1)              # its contrastive loss all-gathers
    m, _ = official_search(code_dir, seed=0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():                                               # trained-looking BatchNorm statistics and heads
        for head in (m.vision_proj, m.text_proj):
            head[0].running_mean.normal_(0, 0.5, generator=g); head[0].running_var.uniform_(0.5, 2.0, generator=g)
            head[0].weight.uniform_(0.5, 1.5, generator=g); head[0].bias.normal_(0, 0.1, generator=g)
            head[2].weight.normal_(0, 0.02, generator=g)
        m.temp.fill_(0.05)
    patches = torch.randn(B, P - 1, 1024, generator=g)
    img = torch.cat([patches.mean(1, keepdim=True), patches], 1)        # [CLS] = mean of the patches, as its Swin
    txt, sub = torch.randn(B, L, 768, generator=g), torch.randn(3 * B, LS, 768, generator=g)   # sub: app rows, act rows, bg rows
    idx = torch.tensor([0, 1, 2, 2, 3, 4])                              # a duplicate id
    sd = {k: v.clone() for k, v in m.state_dict().items() if k.split('.')[0] in STP_MODULES or k == 'temp'}   # before train mode moves BN's statistics
    res = {}
    for mode in ('eval', 'train'):
        m.train(mode == 'train')
        m.vision_proj[1].p = m.text_proj[1].p = 0.0 if mode == 'train' else 0.5
        with torch.no_grad():
            fi, *zi = m.get_image_feat_decoupled(img)
            ft, *zt = m.get_text_feat_decoupled(txt)
            subs = sub.chunk(3)
            za = [m.get_text_feat_decoupled(s)[1 + k] for k, s in enumerate(subs)]   # each sub-caption's own factor
            itc = m.get_contrastive_loss(fi, ft, idx=idx)
            fdl = sum(m.get_contrastive_loss(zi[k], za[k], idx=idx) + m.get_contrastive_loss(zt[k], za[k], idx=idx) for k in range(3))
        res[mode] = dict(image_feat=fi, text_feat=ft, image_factors=torch.stack(zi, 1), text_factors=torch.stack(zt, 1),
                         anchors=torch.stack(za, 1), itc=itc, fdl=fdl)
    m.eval()
    res['draws'] = official_draws(m, img, txt, idx)
    commit = subprocess.run(['git', '-C', MIRROR, 'rev-parse', 'HEAD'], capture_output=True, text=True).stdout.strip()
    init_std = dict(vision_proj=official_search(code_dir, seed=3)[0].vision_proj[2].weight.std().item())
    torch.save(dict(state_dict=sd, img=img, txt=txt, sub=sub, idx=idx, res=res, commit=commit, init_std=init_std), out)
    print('wrote', out)

class _Stop(Exception): pass

def official_draws(m, img, txt, idx):
    "The official ITM-sem draw probabilities per factor (K×2×B×B: text→image rows, then image→text), read from its torch.multinomial calls."
    out = []
    real = torch.multinomial
    def capture(w, n, *a, **k): rows.append(w / w.sum()); return real(w, n, *a, **k)
    def stop(*a, **k): raise _Stop
    m.get_cross_embeds = stop
    with torch.no_grad():
        _, *zi = m.get_image_feat_decoupled(img)
        _, *zt = m.get_text_feat_decoupled(txt)
    for k in range(3):
        rows = []
        torch.multinomial = capture
        try: m.get_matching_loss(img, torch.ones(img.shape[:2], dtype=torch.long), zi[k], txt, torch.ones(txt.shape[:2], dtype=torch.long), zt[k], idx=idx)
        except _Stop: pass
        finally: torch.multinomial = real
        out.append(torch.stack([torch.stack(rows[:B]), torch.stack(rows[B:])]))
    return torch.stack(out)

def ours(inp: str, out: str):
    from tpas_nb.config import BackboneConfig, VisionConfig, TextConfig
    from tpas_nb.methods import build_method
    from tpas_nb.methods.seda import official_seda_stp, fdl_loss, stp_projection
    from tpas_nb.objectives import itc_loss
    d = torch.load(inp, weights_only=True)
    bb = BackboneConfig(vision=VisionConfig(img_size=64, patch_size=4, window_size=2, embed_dim=128, depths=(1, 1, 1, 1), num_heads=(4, 8, 16, 32)),
                        text=TextConfig(vocab_size=50, hidden_size=768, num_text_layers=1, num_cross_layers=1, num_attention_heads=12,
                                        intermediate_size=64, max_position_embeddings=64),
                        global_pool='cls_avg', embed_dim=2048)       # only the widths matter to STP: D_I 1024, D_T 768, E 2048
    m = build_method('seda', preset=bb, vocab_size=50, stp_proj='official', fdl_temp='shared', itm_neg_floor=1e-5)
    stp, rest = official_seda_stp(d['state_dict'], m)
    assert set(rest) == {'temp'}, rest
    r = m.load_state_dict(stp, strict=False)
    assert not r.unexpected_keys
    with torch.no_grad(): m.backbone.temp.copy_(d['state_dict']['temp'])
    img, txt, sub, idx = d['img'], d['txt'], d['sub'], d['idx']
    mask = torch.ones(B, L, dtype=torch.long)
    sub_txt = sub.view(3, B, LS, 768).transpose(0, 1)                 # B×K×L_s×D_T
    sub_mask = torch.ones(B, 3, LS, dtype=torch.long)
    out_doc = dict(official=dict(repository='https://github.com/ErgastiAlex/SeDA', commit=d['commit'],
                                 code='models/cmp.py get_image_feat_decoupled, get_text_feat_decoupled, get_contrastive_loss; '
                                      'models/model_search.py forward (the six FDL terms)'),
                   switches=dict(stp_proj='official', fdl_temp='shared', stp_weighting='sigmoid', itm_neg_floor=1e-5),
                   inputs=dict(B=B, image_tokens=P, caption_tokens=L, sub_caption_tokens=LS, ids=idx.tolist(), tau=float(d['state_dict']['temp'])),
                   target=1e-5, max_abs_diff={})
    for mode in ('eval', 'train'):
        m.train(mode == 'train')
        for stp_ in (m.image_stp, m.text_stp): stp_.w_p[1].p = 0.0 if mode == 'train' else 0.5
        with torch.no_grad():
            oi, ot = m.stp_image(img), m.stp_text(txt, mask)
            anchors = m.anchor_factors(sub_txt, sub_mask)
            t = m.backbone.temperature()
            mine = dict(image_feat=oi.feat, text_feat=ot.feat, image_factors=oi.factors, text_factors=ot.factors, anchors=anchors,
                        itc=itc_loss(oi.feat, ot.feat, idx, t, m.cfg.label_smoothing),
                        fdl=fdl_loss(oi.factors, ot.factors, anchors, idx, t, m.cfg.label_smoothing))
        ref = d['res'][mode]
        out_doc['max_abs_diff'][mode] = {k: float((mine[k] - ref[k]).abs().max()) for k in mine}
        out_doc.setdefault('values', {})[mode] = dict(itc=[float(ref['itc']), float(mine['itc'])], fdl=[float(ref['fdl']), float(mine['fdl'])])
    m.eval()                                                           # ITM-sem draw probabilities, read from torch.multinomial
    rows, real = [], torch.multinomial
    def capture(w, n, *a, **k): rows.append(w / w.sum(1, keepdim=True)); return real(w, n, *a, **k)
    torch.multinomial = capture
    try:
        with torch.no_grad():
            oi, ot = m.stp_image(img), m.stp_text(txt, mask)
            m.itm_sem_pairs(oi.factors, ot.factors, oi.factors, idx)
    finally: torch.multinomial = real
    mine = torch.stack([torch.stack(rows[2 * k:2 * k + 2]) for k in range(3)])   # K×2×B×B
    ref = d['res']['draws']
    out_doc['itm_sem_draws'] = dict(max_abs_diff=float((mine - ref).abs().max()),
        note="probability of each in-batch negative in ITM-sem's factor hard-negative draw (caption mining), official vs ours; the official "
             "code draws ∝ softmax over all entries + 1e-5 with the positives then zeroed, which itm_neg_floor=1e-5 reproduces (12_objectives)")
    w = stp_projection(3072, 2048, 'official')[2].weight
    out_doc['init'] = dict(official_vision_proj_std=d['init_std']['vision_proj'], ours_w_p_std=w.std().item())
    out_doc['max_abs_value'] = {k: float(v.abs().max()) for k, v in d['res']['eval'].items()}
    out_doc['passed'] = all(v <= 1e-5 for dd in out_doc['max_abs_diff'].values() for v in dd.values()) and out_doc['itm_sem_draws']['max_abs_diff'] <= 1e-5
    out_doc['note'] = "values: [official, ours]; passed: every max |official - ours| <= 1e-5"
    Path(out).write_text(json.dumps(out_doc, indent=1) + '\n')
    print(json.dumps(out_doc['max_abs_diff'], indent=1), 'passed' if out_doc['passed'] else 'FAILED')

if __name__ == '__main__':
    torch.set_num_threads(1)
    {'official': official, 'ours': ours}[sys.argv[1]](*sys.argv[2:])
