"""SeDA's loss terms at step 1 (before any update) on SynthPAB version 4 with the cpu-v4 profile: the project's default
switches against the official code's (FDL through the shared contrastive loss, the official W_p, random batches with the
counterparts loaded beside each record), and how many in-batch negatives share a factor in paired and random batches.

    OMP_NUM_THREADS=1 python runs/parity/seda_loss_share.py runs/parity/seda_loss_share.json
    OMP_NUM_THREADS=1 python runs/parity/seda_loss_share.py --steps 40 runs/parity/seda_loss_share.json   # adds the first 40 updates
"""
import json, sys, tempfile, time
from collections import Counter
import torch

from tpas_nb.config import flat_config
from tpas_nb.methods import method_switches
from tpas_nb.training.trainer import setup_run, setup_model, train_data
from tpas_nb.training.order import micro_batches

ARMS = {   # arm -> flat parameters over the cpu-v4 profile
    'project default': {},
    "fdl_temp='shared'": {'fdl_temp': 'shared'},
    "stp_proj='official'": {'stp_proj': 'official'},
    'paired=False': {'paired': False},
    'official (all three)': {'fdl_temp': 'shared', 'stp_proj': 'official', 'paired': False, 'lr_mult_new': 2.0},
}
SEEDS = (0, 1, 2)

def step1(flat: dict, seed: int) -> dict:
    "The losses of the first batch of epoch 0 (train mode, the checkpoint loaded), and the W_p learning rates."
    cfg = flat_config('cpu-v4', {'method': 'seda', 'seed': seed, 'out_dir': tempfile.mkdtemp(prefix='seda_share_'), **flat}, method_switches('seda'))
    s = setup_run(cfg, progress=False)
    model, new_ids = setup_model(s)
    td = train_data(s, model)
    mbs = micro_batches(len(td.dataset), td.B, td.seed, 0, td.W, td.rank, td.A, td.partner)
    batch = next(iter(td.loader(mbs[:1], 0)))
    model.train()
    torch.manual_seed(seed)
    with torch.no_grad(): out = model(batch)
    wp = {id(p) for p in model.image_stp.w_p.parameters()} | {id(p) for p in model.text_stp.w_p.parameters()}
    return dict({k: round(v.item(), 4) for k, v in out.items()}, wp_new=bool(wp <= new_ids), tau=round(model.backbone.temperature().item(), 4),
                lr_mult_wp=cfg.optim.lr_mult_new if wp <= new_ids else 1.0, B=int(batch['idx'].shape[0]))

def negatives(paired: bool, n_batches: int = 20) -> dict:
    "Mean in-batch negatives per row that share each factor (same person / action / scene), and those whose sub-caption is the same text."
    cfg = flat_config('cpu-v4', {'method': 'seda', 'paired': paired, 'out_dir': tempfile.mkdtemp(prefix='seda_share_')}, method_switches('seda'))
    s = setup_run(cfg, progress=False)
    model, _ = setup_model(s)
    td = train_data(s, model)
    recs = td.dataset.records
    mbs = micro_batches(len(recs), td.B, td.seed, 0, td.W, td.rank, td.A, td.partner)[:n_batches]
    tot, n = Counter(), 0
    for mb in mbs:
        rs = [recs[i] for _, i in mb]
        subs = [r['decoupled_caption'][0] for r in rs]
        lab = dict(appearance=[r['person_id'] for r in rs], action=[r.get('normal', r.get('anomaly')) for r in rs],
                   background=[r['scene'] for r in rs])
        for a in range(len(rs)):
            for b in range(len(rs)):
                if a == b: continue
                for f in lab:
                    if lab[f][a] == lab[f][b]:
                        tot[f] += 1; tot[f + ' (same text)'] += subs[a][f].strip().lower() == subs[b][f].strip().lower()
            n += 1
    return dict({k: round(v / n, 2) for k, v in tot.items()}, negatives_per_row=len(mbs[0]) - 1, batches=len(mbs))

def trajectory(flat: dict, steps: int, seed: int = 0) -> list:
    "The losses of the first `steps` optimiser updates (AdamW and the schedule of the profile, the trainer's parameter groups)."
    from tpas_nb.training.schedule import build_optimizer, build_scheduler
    cfg = flat_config('cpu-v4', {'method': 'seda', 'seed': seed, 'out_dir': tempfile.mkdtemp(prefix='seda_share_'), **flat}, method_switches('seda'))
    s = setup_run(cfg, progress=False)
    model, new_ids = setup_model(s)
    td = train_data(s, model)
    opt = build_optimizer(model, cfg.optim, new_ids)
    sched = build_scheduler(opt, cfg.optim, td.total)
    mbs = micro_batches(len(td.dataset), td.B, td.seed, 0, td.W, td.rank, td.A, td.partner)[:steps]
    model.train()
    out = []
    for batch in td.loader(mbs, 0):
        o = model(batch)
        opt.zero_grad(); o['loss'].backward(); opt.step(); sched.step()
        out.append({k.removeprefix('loss_'): round(v.item(), 4) for k, v in o.items()} | {'tau': round(model.backbone.temperature().item(), 4)})
    return out

if __name__ == '__main__':
    torch.set_num_threads(1)
    t0 = time.time()
    if sys.argv[1:2] == ['--steps']:
        n, path = int(sys.argv[2]), sys.argv[3]
        arms = {k: ARMS[k] for k in ('project default', 'official (all three)')}
        traj = {arm: trajectory(flat, n) for arm, flat in arms.items()}
        doc = json.load(open(path))
        doc['trajectory'] = dict(what=f'losses of the first {n} updates, seed 0 (cpu-v4: lr 5e-4, 50 warm-up steps)', arms=arms, steps=traj,
                                 seconds=round(time.time() - t0))
        json.dump(doc, open(path, 'w'), indent=1)
        for arm, rs in traj.items(): print(arm, [(r['itc'], r['fdl']) for r in rs[::5]])
        sys.exit()
    rows = {arm: [step1(flat, seed) for seed in SEEDS] for arm, flat in ARMS.items()}
    for arm, rs in rows.items():
        print(arm, [{k: r[k] for k in ('loss_itc', 'loss_fdl', 'loss_itm', 'loss_itm_sem', 'loss_mlm', 'loss')} for r in rs])
    neg = {'paired batches (data.paired=True)': negatives(True), 'random batches (data.paired=False)': negatives(False)}
    print(json.dumps(neg, indent=1))
    doc = dict(what="SeDA's losses on the first batch of a cpu-v4 run (SynthPAB v4, the pretrained-v4 start, train mode, no update), "
                    "three seeds, per arm (flat parameters over the cpu-v4 profile); and same-factor in-batch negatives",
               command='OMP_NUM_THREADS=1 python runs/parity/seda_loss_share.py runs/parity/seda_loss_share.json',
               arms=ARMS, seeds=SEEDS, step1=rows,
               share={arm: {k: round(sum(r[f'loss_{k}'] for r in rs) / sum(r['loss'] for r in rs), 3) for k in ('itc', 'fdl', 'itm', 'itm_sem', 'mlm')}
                      for arm, rs in rows.items()},
               negatives=neg, seconds=round(time.time() - t0))
    json.dump(doc, open(sys.argv[1], 'w'), indent=1)
    print(json.dumps(doc['share'], indent=1))
