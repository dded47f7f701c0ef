"""What holds GradCO's conflict rate up: `python runs/gradco_internals/limits.py [RUN …] [--batches N]`.

A controlled measurement on finished runs of the round grid_official_v4 (default: every seed of full COL and of D#8 whose
weights are on disk). Each run's method is loaded with its best weights, in eval mode (the runs train with dropout 0), and
read on two kinds of training batches of the paper's size (22, GradCO's implementation details; the runs train on 64): the paired batches it was trained on (its last epoch's, both records of
each person, as GradCO's counterpart batches need) and as many random batches (any negatives). On every batch
the Table 7 conflict rate r_conf (23_col: the share of texts whose InfoNCE attraction to their own image and repulsion from
the hardest in-batch negative have gradients at f^T with a negative cosine) is computed under four readings of the scores,
everything else held:

- `as trained`: the learnt anchors Δ_ij = TF(f^T_i − f^I_j, U^I_j), with the gradient through Δ's dependence on f^T (J_ij);
- `Δ detached from f^T`: the same anchors, J_ij = 0 (only the direct path through f^T_i + Δ_ij);
- `Δ ⟂ (f^T − f^I)`: the anchors with their component along f^T_i − f^I_j removed (Figure 7 has the paper's near 0);
- `no anchors`: the plain expert cosines that retrieval ranks by;
- `as trained, at the text tokens`: the learnt scores, with g⁺ and g⁻ read at the text encoder's output tokens, the
  representation the three streams share, instead of at the stream features f^T (the paper says only "the same
  text-side representation").

It also records, per run, the share of texts whose hardest negative is their own person's other record (the counterpart),
the mean cosine of Δ with f^T − f^I, and for the plain cosines the identity it rests on: cos(g⁺, g⁻) = −cos(P f^I₊, P f^I₋)
with P = I − f^T f^Tᵀ, so a text conflicts exactly when it sees its own image and the hardest negative on the same side
(exact for one stream; here read on the HIA-weighted text feature against the streams' mean image feature).
Writes runs/gradco_internals/limits.json.
"""
import json, os, sys, argparse
os.environ.setdefault('OMP_NUM_THREADS', '1'); os.environ.setdefault('MKL_NUM_THREADS', '1')
from pathlib import Path
import numpy as np, torch, torch.nn.functional as F
torch.set_num_threads(1)
from torch.utils.data import DataLoader
from tpas_nb.runs import Run
from tpas_nb.data.pab import PABTrainDataset, TrainCollate
from tpas_nb.training.order import micro_batches, SeededItems
from tpas_nb.methods.col import attraction_repulsion, gradient_conflict, offloaded_similarity, orthogonal_anchors

HERE = Path(__file__).parent
ROUND = HERE.parent / 'grid_official_v4' / 'gradco'

def scores_fn(m, I, norms, reading):
    "f^T (B×R×E) -> S_final under one reading of the anchors."
    def fn(tf):
        w = m.intent_weights(tf)
        if reading == 'no anchors' or m.anchors is None: return m.hia(tf, I, offload=False, txt_norms=norms).scores
        t_a = m.anchor_space(tf, norms)
        src = t_a.detach() if reading == 'Δ detached from f^T' else t_a
        delta = m.offload_anchors(src, I)                                          # R×B×G×E
        if reading == 'Δ ⟂ (f^T − f^I)':                                           # 23_col, orthogonal_anchors (anchor_ortho's reading)
            f_a = m.anchor_space(I.feats, I.norms)
            delta = torch.stack([orthogonal_anchors(delta[r], t_a[:, r], f_a[:, r]) for r in range(m.num_streams)])
        sims = torch.stack([offloaded_similarity(t_a[:, r], I.feats[:, r], delta[r]) for r in range(m.num_streams)])
        return torch.einsum('rbg,br->bg', sims, w)
    return fn

READINGS = ('as trained', 'Δ detached from f^T', 'Δ ⟂ (f^T − f^I)', 'no anchors')
AT_TOKENS = 'as trained, at the text tokens'   # the same scores, the gradients read at the text encoder's output tokens (B×L·D) instead of f^T

def tokens_fn(m, I, mask):
    "The text encoder's tokens (B×L×D) -> S_final: the text streams, their anchors and HIA, as trained."
    def fn(tok):
        T = m.text_streams(tok, mask)
        return m.hia(T.feats, I, offload=m.anchors is not None, txt_norms=T.norms).scores
    return fn

def measure(path: Path, batches: int, batch_size: int) -> dict:
    run = Run(path); c = run.config
    m = run.load_method('best')
    if not m.cfg.hia_agg_sims: raise ValueError(f"{path}: this measurement reads S_final = Σ_r w_r S_r (hia_agg_sims)")
    ds = PABTrainDataset(run.folder, img_size=m.backbone.img_size, pose=m.needs_pose, counterparts=False, hflip=c.data.hflip,
                         random_erasing=c.data.random_erasing, split=c.data.train_split)
    paired = micro_batches(len(ds), batch_size, c.seed, c.epochs - 1, 1, 0, 1, ds.partner)[:batches]
    g = torch.Generator().manual_seed(c.seed)
    rand = [[(c.epochs - 1, i) for i in torch.randperm(len(ds), generator=g)[:batch_size].tolist()] for _ in range(batches)]   # any negatives
    return {'run': str(path.relative_to(HERE.parent.parent)), 'arm': path.parent.name, 'seed': c.seed, 'batches': batches, 'batch_size': batch_size,
            'texts': batches * batch_size, 'epoch': c.epochs - 1, 'logged_r_conf_last50': logged_r_conf(path),
            **{comp: read_batches(m, ds, run, c, mbs) for comp, mbs in (('paired', paired), ('random', rand))}}

def logged_r_conf(path: Path) -> float | None:
    "The run's own r_conf over its last 50 logged steps (training mode, its paired batches)."
    logged = [json.loads(l) for l in (path / 'log.jsonl').read_text().splitlines() if l.strip()]
    logged = [r['stat_r_conf'] for r in logged if 'stat_r_conf' in r][-50:]
    return float(np.mean(logged)) if logged else None

def read_batches(m, ds, run, c, mbs) -> dict:
    "r_conf under each reading, and the geometry behind it, over the batches `mbs`."
    loader = DataLoader(SeededItems(ds, c.seed), batch_sampler=mbs, collate_fn=TrainCollate(run.tokenizer, run.max_len))
    temp = m.backbone.temperature().detach()
    rates = {r: [] for r in (*READINGS, AT_TOKENS) if m.anchors is not None or r in ('no anchors', AT_TOKENS)}
    same_person, cos_delta, norm_delta, side = [], [], [], []
    for batch in loader:
        with torch.no_grad():
            img, txt, mask = m.encode_tokens(batch)
            I, T = m.image_streams(img), m.text_streams(txt, mask)
        idx = batch['idx']
        for r in rates:
            if r == AT_TOKENS: g = attraction_repulsion(tokens_fn(m, I, mask), txt, temp, idx)
            else: g = attraction_repulsion(scores_fn(m, I, T.norms, r), T.feats, temp, idx)
            rates[r].append(gradient_conflict(*g[:2])['rate'])
        with torch.no_grad():
            S = m.hia(T.feats, I, offload=m.anchors is not None, txt_norms=T.norms).scores
            same = idx[:, None] == idx[None, :]
            hard = S.masked_fill(same, -torch.inf).argmax(1)
            same_person.append((hard == batch['partner']).double().mean().item())   # the counterpart's row (-1: not in the batch)
            if m.anchors is not None:
                t_a, f_a = m.anchor_space(T.feats, T.norms), m.anchor_space(I.feats, I.norms)
                delta = m.offload_anchors(t_a, I)
                d = t_a.transpose(0, 1)[:, :, None] - f_a.transpose(0, 1)[:, None]
                cos_delta.append(F.cosine_similarity(delta, d, dim=-1).mean().item()); norm_delta.append(delta.norm(dim=-1).mean().item())
            # the plain-cosine identity on the HIA-weighted text feature against the streams' mean image feature
            t = F.normalize(torch.einsum('br,bre->be', m.intent_weights(T.feats), T.feats), dim=-1)
            v = F.normalize(I.feats.mean(1), dim=-1)
            P = lambda x: x - (x * t).sum(-1, keepdim=True) * t
            cs = F.cosine_similarity(P(v), P(v[hard]), dim=-1)
            side.append((cs.mean().item(), (cs > 0).double().mean().item()))
    return {'r_conf': {r: float(np.mean(v)) for r, v in rates.items()},
            'hardest_is_counterpart': float(np.mean(same_person)),
            'cos_delta_diff': float(np.mean(cos_delta)) if cos_delta else None,
            'norm_delta': float(np.mean(norm_delta)) if norm_delta else None,
            'cos_tangent_pos_hardneg': float(np.mean([a for a, _ in side])),
            'share_same_side': float(np.mean([b for _, b in side]))}

if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('runs', nargs='*', type=Path)
    ap.add_argument('--batches', type=int, default=24)
    ap.add_argument('--batch-size', type=int, default=22)   # GradCO, implementation details: batch 22 on one V100
    a = ap.parse_args()
    runs = a.runs or [p for arm in ('full', 'd_8', 'd_7') for p in sorted((ROUND / arm).glob('seed*')) if (p / 'best.safetensors').exists()]
    if not runs: sys.exit(f"no finished run with weights under {ROUND}: train one with tpas_grid gradco --root runs/grid_official_v4")
    out = HERE / 'limits.json'
    recs = json.loads(out.read_text()) if out.exists() else {}
    for p in runs:
        rec = measure(p.resolve(), a.batches, a.batch_size)
        recs[rec['run']] = rec
        print(json.dumps(rec))
        out.write_text(json.dumps(recs, indent=1))
