#!/usr/bin/env python
"""Official-code parity of CMP: the authors' model and tpas_nb's `cmp` on the same weights, batch, negatives and mask.

Rerun (one command, from the repository root, about five minutes on one CPU thread):

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python runs/parity/cmp_parity.py

It writes runs/parity/cmp.json. The official side needs transformers 4.x, so it runs in a second process under
/work/venv-official (override with --official-python), made once with

    python -m venv --system-site-packages /work/venv-official
    /work/venv-official/bin/pip install --no-deps 'transformers==4.44.2' 'tokenizers==0.19.1' 'huggingface_hub==0.24.7' prettytable

(--no-deps: the venv keeps the system torch; the script checks that both processes report the same torch version).
The official code is read from the git mirror of github.com/Shuyu-XJTU/CMP (--mirror), extracted with `git archive HEAD`
into a temporary folder and imported from there unchanged. Only four things are supplied from outside it: the random
text encoder it would otherwise read from a BERT folder (saved with its own `save_pretrained`), a single-process gloo
group for its all-gathers, and `torch.multinomial` answering with the ITM negatives chosen here, so that both models
read the same negatives; and the tie of the MLM decoder's bias to `cls.predictions.bias`, which its models/bert.py makes
(`self.decoder.bias = self.bias`) and transformers 4.44's `from_pretrained` undoes (the weight tie survives).

Steps: the official process builds `models.model_search.Search` on a small configuration (SMALL below), perturbs every
weight and BatchNorm statistic, saves `{'model': state_dict, 'config': config}` as its Search.py does, and records its
tokens, features, losses (train mode, every dropout at 0, so BatchNorm uses batch statistics) and its evaluation
(eval mode, `evaluation_itc` / `evaluation_itm` / `mAP` of its eval.py). This process loads that checkpoint into
tpas_nb's CMP with `tpas_nb.models.official.load_cmp_checkpoint`, computes the same quantities and writes the max abs
differences, once with the switches set to the official behaviour and once per project default.

`--keys FILE` (official process only) writes the names and shapes of the official state dict on SMALL: the fixture
tests/fixtures/cmp_official_keys.json was made with it.
"""
from __future__ import annotations
import argparse, json, os, re, subprocess, sys, tempfile
from pathlib import Path

MIRROR = '/work/.mirror/Shuyu-XJTU+CMP/repo'
REPO_URL = 'https://github.com/Shuyu-XJTU/CMP'
SMALL = dict(image_res=224, swin_embed_dim=128, depths=[2, 2, 2, 2], swin_heads=[4, 8, 16, 32], window_size=7,
             bert_hidden=768, bert_heads=12, bert_intermediate=1024, bert_layers=12, fusion_layer=6, vocab_size=1000,
             max_position_embeddings=64, embed_dim=2048, max_tokens=24, batch=5, gallery=10, k_test=3)
# Swin must end 1024 wide and BERT be 768 wide: the official pose block (dim 1024, 16 heads) and stripe projections
# (3072 = 3·1024 = 4·768 inputs) are hard-coded to them. Depth and vocabulary are what SMALL shrinks.
PAD, UNK, CLS, SEP, MASK = 0, 100, 101, 102, 103    # BERT's special ids


# ---------------------------------------------------------------------------------------------------------------------
# shared inputs (both processes build them from the same seed)
def make_inputs(torch):
    "Images, pose maps, captions (padded to max_tokens, as the official tokenizer calls), counterparts, EDA copies, MLM mask, ITM negatives."
    g = torch.Generator().manual_seed(1)
    B, G, L, V, R = SMALL['batch'], SMALL['gallery'], SMALL['max_tokens'], SMALL['vocab_size'], SMALL['image_res']

    def captions(lengths):
        ids = torch.zeros(len(lengths), L, dtype=torch.long)
        for b, n in enumerate(lengths):
            ids[b, 0], ids[b, n - 1] = CLS, SEP
            ids[b, 1:n - 1] = torch.randint(200, V, (n - 2,), generator=g)
        return ids, (ids != PAD).long()

    img = lambda n: torch.randn(n, 3, R, R, generator=g)
    x = dict(image=img(B), pose=img(B), hard_image=img(B), hard_pose=img(B), idx=torch.tensor([0, 1, 2, 3, 3]))
    x['text_ids'], x['text_mask'] = captions([24, 14, 9, 19, 12])
    x['text_eda_ids'], x['text_eda_mask'] = captions([20, 11, 24, 8, 15])
    x['hard_text_ids'], x['hard_text_mask'] = captions([13, 24, 10, 16, 21])
    npos = 3                                                        # masked positions per caption (official: masked_pos B×n)
    pos = torch.stack([1 + torch.randperm(int(m.sum()) - 2, generator=g)[:npos] for m in x['text_mask']]).sort(1).values
    masked = x['text_ids'].clone()
    masked.scatter_(1, pos[:, :2], MASK)                            # two [MASK]s and one random word per caption
    masked.scatter_(1, pos[:, 2:], torch.randint(200, V, (B, 1), generator=g))
    x['masked_ids'], x['masked_pos'], x['text_ids_masked'] = x['text_ids'].gather(1, pos), pos, masked
    def negatives():                                                # one other-id row per text (images) and per image (texts)
        rows = lambda b: [j for j in range(B) if x['idx'][j] != x['idx'][b]]
        pick = lambda b: rows(b)[int(torch.randint(len(rows(b)), (1,), generator=g))]
        return torch.tensor([pick(b) for b in range(B)]), torch.tensor([pick(b) for b in range(B)])
    x['neg_main'], x['neg_eda'] = negatives(), negatives()
    x['gallery_image'], x['gallery_pose'] = img(G), img(G)
    x['gallery_ids'] = torch.tensor([0, 1, 2, 3, 4, 4, 5, 6, 7, 8])
    x['query_ids'], x['query_mask'] = captions([24, 7, 16, 12, 20, 10, 22, 9, 18, 13])
    x['query_pids'] = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 4])
    return x


# ---------------------------------------------------------------------------------------------------------------------
# the official process (transformers 4.x)
def official_side(src: Path, out: Path, keys_file: str | None):
    import torch, torch.distributed as dist
    from torch import nn
    sys.path.insert(0, str(src)); os.chdir(src)
    from models.bert import BertConfig, BertForMaskedLM
    from models.model_search import Search
    import eval as official_eval
    torch.set_num_threads(1)
    os.environ.setdefault('MASTER_ADDR', '127.0.0.1'); os.environ.setdefault('MASTER_PORT', str(29500 + os.getpid() % 1000))
    dist.init_process_group('gloo', rank=0, world_size=1)           # its ITC all-gathers, on one process

    S = SMALL
    (out / 'swin.json').write_text(json.dumps(dict(vision_width=S['swin_embed_dim'] * 8, image_res=S['image_res'], h=S['image_res'],
        w=S['image_res'], window_size=S['window_size'], embed_dim=S['swin_embed_dim'], depths=S['depths'],
        num_heads=S['swin_heads'], drop_rate=0, drop_path_rate=0)))
    bert = dict(architectures=['BertForMaskedLM'], attention_probs_dropout_prob=0.0, hidden_act='gelu', hidden_dropout_prob=0.0,
                hidden_size=S['bert_hidden'], initializer_range=0.02, intermediate_size=S['bert_intermediate'], layer_norm_eps=1e-12,
                max_position_embeddings=S['max_position_embeddings'], model_type='bert', num_attention_heads=S['bert_heads'],
                num_hidden_layers=S['bert_layers'], pad_token_id=PAD, type_vocab_size=2, vocab_size=S['vocab_size'],
                fusion_layer=S['fusion_layer'], encoder_width=S['swin_embed_dim'] * 8)
    (out / 'bert.json').write_text(json.dumps(bert))
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig.from_json_file(str(out / 'bert.json'))).save_pretrained(str(out / 'bert'), safe_serialization=False)   # the "pretrained" BERT it reads
    config = dict(vision_config=str(out / 'swin.json'), text_config=str(out / 'bert.json'), text_encoder=str(out / 'bert'),
                  load_params=False, embed_dim=S['embed_dim'], itc_dp=0.0, temp=0.07, label_smooth=0.2, k_test=S['k_test'],
                  max_tokens=S['max_tokens'], be_hard=True, be_pose_img=True, pose_conv=True, batch_size_test_text=4)
    torch.manual_seed(0)
    model = Search(config=config)
    head = model.text_encoder.cls.predictions                       # models/bert.py ties decoder.bias to bias (`self.decoder.bias = self.bias`);
    assert head.decoder.weight is model.text_encoder.bert.embeddings.word_embeddings.weight
    head.decoder.bias = head.bias                                   # transformers 4.44's from_pretrained unties it: restore the code's own link
    with torch.no_grad():                                           # perturb: no weight at its initial value, BN statistics off 0/1
        g = torch.Generator().manual_seed(2)
        for n, p in model.named_parameters(): p.add_(0.02 * torch.randn(p.shape, generator=g))
        for n, b in model.named_buffers():
            if n.endswith('running_mean'): b.copy_(0.1 * torch.randn(b.shape, generator=g))
            if n.endswith('running_var'): b.copy_(1 + 0.5 * torch.rand(b.shape, generator=g))
            if n.endswith('num_batches_tracked'): b.fill_(7)
    sd = model.state_dict()
    if keys_file:
        Path(keys_file).write_text(json.dumps({
            'provenance': f"{REPO_URL} commit {open(out / 'commit').read().strip()}: models/model_search.py Search(config) with "
                          f"be_pose_img, pose_conv and be_hard on, state_dict() as Search.py saves it under 'model'; "
                          f"small configuration of runs/parity/cmp_parity.py (SMALL)",
            'config': SMALL, 'keys': {k: list(v.shape) for k, v in sd.items()},
            'init_params': [n for n, _ in model.named_parameters() if n in model.init_params],   # trained at lr × lr_mult (optim.py)
            'dtypes': {k: str(v.dtype).replace('torch.', '') for k, v in sd.items() if v.dtype != torch.float32}}, indent=1) + '\n')
    torch.save({'model': sd, 'config': config}, out / 'checkpoint_best.pth')   # Search.py's save_obj
    (out / 'init_params.json').write_text(json.dumps([n for n, _ in model.named_parameters() if n in model.init_params]))

    x = make_inputs(torch)
    for m in model.modules():
        if isinstance(m, nn.Dropout): m.p = 0.0
    # evaluation first: the training-mode calls below move the BatchNorm running statistics
    class Tok:                                                      # what its evaluation_itc asks of a tokenizer: ids padded to max_tokens
        def __call__(self, texts, **kw):
            rows = torch.stack(texts)
            return type('T', (), dict(input_ids=rows, attention_mask=(rows != PAD).long(), to=lambda s, d: s))()
    class Loader(list): pass
    loader = Loader([(x['gallery_image'][i:i + 4], x['gallery_pose'][i:i + 4], x['gallery_ids'][i:i + 4]) for i in range(0, SMALL['gallery'], 4)])
    loader.dataset = type('D', (), dict(text=list(x['query_ids']), g_pids=x['gallery_ids'].tolist(), q_pids=x['query_pids'].tolist()))()
    model.eval()
    with torch.no_grad():
        sims, img_emb, txt_emb, txt_atts = official_eval.evaluation_itc(model, loader, Tok(), 'cpu', config)
        score = official_eval.evaluation_itm(model, 'cpu', config, argparse.Namespace(distributed=False), sims, img_emb, txt_emb, txt_atts)
        metrics = official_eval.mAP(score, loader.dataset.g_pids, loader.dataset.q_pids)
    res = {}
    res['eval_similarity'], res['eval_scores'] = sims, torch.as_tensor(score)
    res['eval_order'] = torch.as_tensor(score).argsort(1, descending=True)
    res['eval_metrics'] = torch.tensor([float(metrics[k]) for k in ('R1', 'R5', 'R10', 'mAP', 'mINP')])
    queue = []
    real_multinomial = torch.multinomial
    def injected(weights, num_samples, *a, **k):                    # the negatives chosen in make_inputs, in the order asked
        j = queue.pop(0); assert weights[j] > 0, 'injected a negative of the same id'
        return torch.tensor([j])
    model.train()
    torch.multinomial = injected
    try:
        image_embeds, image_atts = model.get_vision_embeds(x['image'])
        pose, _ = model.get_vision_embeds(model.pose_conv(x['pose']))
        image_embeds = model.pose_block(image_embeds, pose)
        text_embeds = model.get_text_embeds(x['text_ids'], x['text_mask'])
        image_feat, text_feat = model.get_image_feat(image_embeds), model.get_text_feat(text_embeds)
        res['image_tokens'], res['text_tokens'] = image_embeds, text_embeds
        res['itc_similarity'] = nn.functional.normalize(image_feat, dim=-1) @ nn.functional.normalize(text_feat, dim=-1).t()
        res['itc_loss'] = model.get_contrastive_loss(image_feat, text_feat, idx=x['idx'])
        queue[:] = [*x['neg_main'][0].tolist(), *x['neg_main'][1].tolist()]
        itm = model.get_matching_loss(image_embeds, image_atts, image_feat, text_embeds, x['text_mask'], text_feat, idx=x['idx'])
        eda_embeds = model.get_text_embeds(x['text_eda_ids'], x['text_eda_mask'])
        eda_feat = model.get_text_feat(eda_embeds)
        res['itc_eda_loss'] = model.get_contrastive_loss(image_feat, eda_feat, idx=x['idx'])
        queue[:] = [*x['neg_eda'][0].tolist(), *x['neg_eda'][1].tolist()]
        res['itm_eda_loss'] = model.get_matching_loss(image_embeds, image_atts, image_feat, eda_embeds, x['text_eda_mask'], eda_feat, idx=x['idx'])
        res['mlm_loss'] = model.get_mlm_loss(x['text_ids_masked'], x['text_mask'], image_embeds, image_atts, x['masked_pos'], x['masked_ids'])
        hard, hard_atts = model.get_vision_embeds(x['hard_image'])
        hard = model.pose_block(hard, model.get_vision_embeds(model.pose_conv(x['hard_pose']))[0])
        hard_text = model.get_text_embeds(x['hard_text_ids'], x['hard_text_mask'])
        res['itm_loss'] = itm + model.get_matching_loss_hard(image_embeds, image_atts, hard, hard_atts, text_embeds, x['text_mask'],
                                                             hard_text, x['hard_text_mask'])
        B = len(x['idx'])                                           # ITM logits of all B×B pairs (rows texts, columns images)
        txt_rep = text_embeds.repeat_interleave(B, 0); att_rep = x['text_mask'].repeat_interleave(B, 0)
        img_rep = image_embeds.repeat(B, 1, 1)
        res['itm_logits'] = model.itm_head(model.get_cross_embeds(img_rep, torch.ones(img_rep.shape[:2], dtype=torch.long),
                                                                  txt_rep, att_rep)[:, 0]).view(B, B, 2)
        queue[:] = [*x['neg_main'][0].tolist(), *x['neg_main'][1].tolist(), *x['neg_eda'][0].tolist(), *x['neg_eda'][1].tolist()]
        total = model(x['image'], x['text_ids'], x['text_mask'], x['text_ids_masked'], x['masked_pos'], x['masked_ids'], x['idx'],
                      x['text_eda_ids'], x['text_eda_mask'], x['pose'], x['hard_image'], x['hard_pose'], x['hard_text_ids'], x['hard_text_mask'])
        res['forward_itc'], res['forward_itm'], res['forward_mlm'] = total     # Search.forward's own sums, for the record's sanity check
    finally:
        torch.multinomial = real_multinomial

    torch.save({k: v.detach() for k, v in res.items()}, out / 'official.pt')
    (out / 'versions.json').write_text(json.dumps({'torch': torch.__version__, 'transformers': __import__('transformers').__version__}))


# ---------------------------------------------------------------------------------------------------------------------
# this project's side (transformers 5)
def ours(out: Path, stripes_padding: bool, itm_weighting: str, score_fusion: str) -> dict:
    "Our CMP on the official checkpoint, the same quantities as official_side."
    import dataclasses, torch
    from torch import nn
    import torch.nn.functional as F
    from tpas_nb.config import BackboneConfig, VisionConfig, TextConfig
    from tpas_nb.methods.base import Method, MethodConfig, TokenIds
    import tpas_nb.methods.base as base
    from tpas_nb.models.official import load_cmp_checkpoint, official_lr_mult_names
    from tpas_nb.eval.retrieval import rank, retrieval_metrics
    S = SMALL
    bcfg = BackboneConfig(vision=VisionConfig(img_size=S['image_res'], patch_size=4, window_size=S['window_size'], embed_dim=S['swin_embed_dim'],
                                              depths=tuple(S['depths']), num_heads=tuple(S['swin_heads']), drop_path_rate=0.0),
                          text=TextConfig(vocab_size=S['vocab_size'], hidden_size=S['bert_hidden'], num_text_layers=S['fusion_layer'],
                                          num_cross_layers=S['bert_layers'] - S['fusion_layer'], num_attention_heads=S['bert_heads'],
                                          intermediate_size=S['bert_intermediate'], max_position_embeddings=S['max_position_embeddings'],
                                          max_len=S['max_tokens'], hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
                          global_pool='stripes', embed_dim=S['embed_dim'], pose_hidden=96, pose_heads=16)
    mcfg = MethodConfig(pose=True, ihnm=True, global_pool='stripes', embed_dim=S['embed_dim'], label_smoothing=0.2,
                        itm_weighting=itm_weighting, stripes_padding=stripes_padding)
    torch.manual_seed(0)
    method = Method(bcfg, TokenIds(S['vocab_size'], PAD, UNK, CLS, SEP, MASK), mcfg)
    report = load_cmp_checkpoint(method.backbone, method.pose_branch, out / 'checkpoint_best.pth')
    report.lr_mult_names = official_lr_mult_names(method.backbone, method.pose_branch)   # its official init_params, in our names
    for m in method.modules():
        if isinstance(m, nn.Dropout): m.p = 0.0
    x = make_inputs(torch)
    negs = [x['neg_main'], x['neg_eda']]
    method.itm_negatives = lambda enc, idx, temp: negs.pop(0)       # the injected negatives, main ITM first, then EDA's
    labels = torch.full_like(x['text_ids'], -100).scatter(1, x['masked_pos'], x['masked_ids'])
    real_mask = base.mask_tokens
    base.mask_tokens = lambda *a, **k: (x['text_ids_masked'], labels)   # the injected MLM mask
    res = {}
    # evaluation first, as on the official side (training mode moves the BatchNorm running statistics)
    method.eval()
    with torch.no_grad():
        img_emb = method.embed_images(x['gallery_image'], x['gallery_pose'])
        txt_emb = method.embed_texts(x['query_ids'], x['query_mask'])
        scores = rank(method, txt_emb, img_emb, k_test=S['k_test'], score_fusion=score_fusion)
        m = retrieval_metrics(scores, x['query_pids'], x['gallery_ids'])
    res['eval_similarity'] = txt_emb.feat @ img_emb.feat.t()
    res['eval_order'] = scores.argsort(1, descending=True)
    res['eval_metrics'] = torch.tensor([m[k] for k in ('R1', 'R5', 'R10', 'mAP', 'mINP')])
    try:
        method.train()
        batch = {k: x[k] for k in ('image', 'pose', 'text_ids', 'text_mask', 'idx', 'hard_image', 'hard_pose', 'hard_text_ids',
                                    'hard_text_mask', 'text_eda_ids', 'text_eda_mask')}
        losses = method(batch)
        enc = method.encode(batch)
    finally:
        base.mask_tokens = real_mask
    B = len(x['idx'])
    res['image_tokens'], res['text_tokens'] = enc.img, enc.txt
    res['itc_similarity'] = enc.img_feat @ enc.txt_feat.t()
    for k in ('itc', 'itm', 'mlm', 'itc_eda', 'itm_eda'): res[f'{k}_loss'] = losses[f'loss_{k}']
    bb = method.backbone
    res['itm_logits'] = bb.itm_logits(bb.fuse(enc.txt.repeat_interleave(B, 0), enc.mask.repeat_interleave(B, 0), enc.img.repeat(B, 1, 1))).view(B, B, 2)
    return {k: v.detach() for k, v in res.items()}, report


QUANTITIES = {  # record name -> (key of both result dicts, what it is)
    'image tokens': ('image_tokens', 'f_V, B×P×D_I after the pose block (train mode: Pose Conv BatchNorm on batch statistics)'),
    'text tokens': ('text_tokens', 'text-encoder output B×L×D_T at every position, padding included'),
    'ITC similarity': ('itc_similarity', 'cosines of the global features, B×B'),
    'ITC loss': ('itc_loss', 'L_itc, label smoothing 0.2'),
    'ITM logits (all pairs)': ('itm_logits', 'ITM head on every (text, image) pair of the batch, B×B×2'),
    'ITM loss': ('itm_loss', 'L_itm: in-batch negatives + identity hard negatives (official: the two means summed)'),
    'ITC-EDA loss': ('itc_eda_loss', 'L_itc of the images with the EDA captions'),
    'ITM-EDA loss': ('itm_eda_loss', 'L_itm of the EDA captions, in-batch negatives'),
    'MLM loss': ('mlm_loss', 'L_mlm on the injected mask'),
    'eval ITC similarity': ('eval_similarity', 'Q×G, eval mode, queries padded to max_tokens'),
    're-ranked order': ('eval_order', 'gallery order per query after ITM re-ranking of the top k_test (0 = identical)'),
    'R1, R5, R10, mAP, mINP': ('eval_metrics', 'text-to-image metrics in percent'),
}
PROFILES = {  # name -> (stripes_padding, itm_weighting, score_fusion)
    'official': (True, 'official', 'itm+itc'),
    'default stripes_padding=False': (False, 'official', 'itm+itc'),
    "default itm_weighting='mean'": (True, 'mean', 'itm+itc'),
    "default score_fusion='itm'": (True, 'official', 'itm'),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--official-side', nargs=2, metavar=('SRC', 'OUT'), help=argparse.SUPPRESS)
    ap.add_argument('--keys', help='(official process) also write the official key/shape fixture to this file')
    ap.add_argument('--official-python', default='/work/venv-official/bin/python')
    ap.add_argument('--mirror', default=MIRROR)
    ap.add_argument('--out', default=str(Path(__file__).with_name('cmp.json')))
    a = ap.parse_args()
    if a.official_side: return official_side(Path(a.official_side[0]), Path(a.official_side[1]), a.keys)

    import torch
    torch.set_num_threads(1)
    commit = subprocess.run(['git', '-C', a.mirror, 'rev-parse', 'HEAD'], capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d) / 'src', Path(d) / 'out'
        src.mkdir(); out.mkdir()
        subprocess.run(f"git -C {a.mirror} archive HEAD | tar -x -C {src}", shell=True, check=True)
        (out / 'commit').write_text(commit)
        env = {**os.environ, 'OMP_NUM_THREADS': '1', 'MKL_NUM_THREADS': '1'}
        cmd = [a.official_python, str(Path(__file__).resolve()), '--official-side', str(src), str(out)] + (['--keys', str(Path(a.keys).resolve())] if a.keys else [])
        subprocess.run(cmd, check=True, env=env)
        versions = json.loads((out / 'versions.json').read_text())
        assert versions['torch'] == torch.__version__, f"the official venv runs torch {versions['torch']}, this process {torch.__version__}"
        off = torch.load(out / 'official.pt', weights_only=True)
        import transformers
        record = dict(official=dict(repo=REPO_URL, commit=commit, transformers=versions['transformers']),
                      ours=dict(transformers=transformers.__version__), torch=torch.__version__, config=SMALL,
                      quantities={k: v[1] for k, v in QUANTITIES.items()},
                      profiles={}, target=1e-5)
        sanity = None
        for name, (pad, weighting, fusion) in PROFILES.items():
            res, rep = ours(out, pad, weighting, fusion)
            diffs = {q: float((res[key].double() - off[key].double()).abs().max()) for q, (key, _) in QUANTITIES.items()}
            record['profiles'][name] = dict(switches={'method_args.stripes_padding': pad, 'method_args.itm_weighting': weighting,
                                                      'rank(score_fusion=…)': fusion}, max_abs_diff=diffs)
            if name == 'official':
                record['load_report'] = {f: len(getattr(rep, f)) for f in ('matched', 'converted', 'dropped', 'missing', 'unexpected')}
                record['official_metrics'] = dict(zip(('R1', 'R5', 'R10', 'mAP', 'mINP'), off['eval_metrics'].tolist()))
                from tpas_nb.models.official import CMP_POSE_KEYS, CMP_CONV_BIASES
                to_official = {f'pose_branch.{v}': k for k, v in CMP_POSE_KEYS.items()}
                rename = lambda n: to_official.get(n) or re.sub(r'^vision_encoder\.layers\.(\d+)\.downsample\.',
                                                                lambda m: f'vision_encoder.layers.{int(m[1]) - 1}.downsample.', n[len('backbone.'):])
                official_set = set(json.loads((out / 'init_params.json').read_text())) - set(CMP_CONV_BIASES)   # folded: no parameter of ours
                ours_set = {rename(n) for n in rep.lr_mult_names}
                record['lr_mult_set'] = dict(official=len(official_set), ours=len(ours_set), equal=ours_set == official_set)
                sanity = {'itc': float(off['forward_itc'] - off['itc_loss'] - 0.8 * off['itc_eda_loss']),
                          'itm': float(off['forward_itm'] - off['itm_loss'] - 0.8 * off['itm_eda_loss']),
                          'mlm': float(off['forward_mlm'] - off['mlm_loss'])}
        record['official_forward_minus_parts'] = sanity   # Search.forward's sums against the parts compared here (0 = they are its terms)
    Path(a.out).write_text(json.dumps(record, indent=1) + '\n')
    worst = max(record['profiles']['official']['max_abs_diff'].values())
    print(json.dumps(record['profiles']['official']['max_abs_diff'], indent=1))
    print(f"official profile: worst max abs diff {worst:.2e} (target {record['target']:.0e}) -> {a.out}")


if __name__ == '__main__':
    main()
