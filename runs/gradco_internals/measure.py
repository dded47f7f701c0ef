"""GradCO's Table 7 internals over a short controlled run: `python runs/gradco_internals/measure.py VARIANT [VARIANT …] [--steps N]`.

Each variant trains GradCO from the shipped version-4 start (profile cpu-v4, the gradco grid's wise_alpha 1.0 and
lr_mult_new 5.0, seed 0, one thread) for N steps with `log_stats=True`, then writes runs/gradco_internals/<variant>.json:
the flat config diff, the logged internals every few steps, their means over the last steps, V_L, and on the val split
R@1 / mAP, the gallery margin on the scores GradCO ranks by and the ITM pair check. Weights go to a scratch folder.
"""
import json, os, sys, argparse, shutil, tempfile
os.environ.setdefault('OMP_NUM_THREADS', '1'); os.environ.setdefault('MKL_NUM_THREADS', '1')
from pathlib import Path
import numpy as np, torch
torch.set_num_threads(1)
from tpas_nb.config import flat_config
from tpas_nb.methods import method_switches
from tpas_nb.train import train
from tpas_nb.runs import Run
from tpas_nb.data.pab import PABTestDataset
from tpas_nb.eval.retrieval import embed_gallery, embed_queries
from tpas_nb.eval.diagnostics import embedding_diagnostics, itm_pair_check, loss_volatility

HERE = Path(__file__).parent
GRID = {'wise_alpha': 1.0, 'lr_mult_new': 5.0}                       # GRID_ROUNDS['grid_calib_v4']'s gradco setting (41_grid)
FIXES = {'scale': {'top_gate_scale': True}, 'raw': {'anchor_space': 'raw'}, 'both': {'top_gate_scale': True, 'anchor_space': 'raw'}}
ARMS = {'full': {}, 'no_anchors': {'anchors': False}, 'no_ldir': {'gamma': 0.0}}   # GRADCO_ARMS 'full', 'D#8', 'D#7'
VARIANTS = {f'{a}' if f == 'old' else f'{a}+{f}': {**sa, **sf} for a, sa in ARMS.items() for f, sf in {'old': {}, **FIXES}.items()}
VARIANTS['full+both+mult2'] = {**FIXES['both'], 'lr_mult_new': 2.0}   # the new layers' lr × 2, the official X-VLM / CMP code's lr_mult (profile 'paper')
for _a in ('full', 'no_ldir'):   # the anchors without their query residual (23_col, query_residual; Fig. 7), beside +scale
    VARIANTS[f'{_a}+scale+nores'] = {**ARMS[_a], **FIXES['scale'], 'anchor_query_residual': False}
    VARIANTS[f'{_a}+scale+ortho'] = {**ARMS[_a], **FIXES['scale'], 'anchor_ortho': True}   # Δ ⟂ f^T − f^I in training (23_col, orthogonal_anchors)

def measure(variant: str, steps: int, seed: int = 0, every: int = 4, last: int = 50) -> dict:
    flat = {'method': 'gradco', 'seed': seed, 'max_steps': steps, 'log_stats': True, **GRID, **VARIANTS[variant]}
    work = Path(tempfile.mkdtemp(prefix='gi_')) / variant.replace('+', '_')
    cfg = flat_config('cpu-v4', {**flat, 'out_dir': str(work)}, method_switches('gradco'))
    train(cfg, progress=False, final_splits=())
    log = [json.loads(l) for l in (work / 'log.jsonl').read_text().splitlines() if l.strip()]
    keys = sorted({k for r in log for k in r if k.startswith(('stat_', 'loss'))})
    run = Run(work)
    method = run.load_method('best').eval()
    val = PABTestDataset(run.folder, 'val', img_size=method.backbone.img_size, pose=method.needs_pose, check=False)
    emb = embedding_diagnostics(embed_queries(method, val.texts, run.tokenizer, run.max_len, progress=False),
                                embed_gallery(method, val, progress=False), val.text_image_ids, val.image_ids, method)
    itm = itm_pair_check(method, run.folder, run.tokenizer, run.max_len, split='val', queries=400)
    metrics = json.loads((work / 'metrics.json').read_text())
    rec = {'variant': variant, 'flat': {k: v for k, v in flat.items()}, 'profile': 'cpu-v4', 'steps': steps, 'seed': seed,
           'last_window': last,
           'last': {k.removeprefix('stat_'): float(np.mean([r[k] for r in log[-last:] if k in r])) for k in keys},
           'first': {k.removeprefix('stat_'): log[0][k] for k in keys if k in log[0]},
           'V_L': loss_volatility(log, 'loss', 100), 'V_L_window': 100,
           'val': {'R1': metrics['splits']['val']['all']['R1'], 'mAP': metrics['splits']['val']['all']['mAP'],
                   'itc_R1': metrics['splits']['val']['itc']['all']['R1'], 'itc_mAP': metrics['splits']['val']['itc']['all']['mAP']},
           'val_margin': emb['margin'], 'val_pos_distance': emb['pos_distance'], 'val_itm': itm,
           'train_wall_s': metrics['train']['wall_s'],
           'over_steps': [{'step': r['step'], **{k.removeprefix('stat_'): r[k] for k in keys if k in r}} for r in log if r['step'] % every == 0 or r['step'] == 1]}
    (HERE / f"{variant.replace('+', '_')}.json").write_text(json.dumps(rec, indent=1))
    shutil.rmtree(work.parent, ignore_errors=True)
    return rec

if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('variants', nargs='+', choices=sorted(VARIANTS))
    ap.add_argument('--steps', type=int, default=312)                 # two epochs of the 624-step grid run
    a = ap.parse_args()
    for v in a.variants:
        r = measure(v, a.steps)
        print(v, {k: round(r['last'][k], 3) for k in ('r_conf', 'margin_batch', 'mu_delta', 'gate_txt_max') if k in r['last']},
              'V_L', round(r['V_L'], 4), 'val', r['val'], 'margin', round(r['val_margin'], 3), flush=True)
