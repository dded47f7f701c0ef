"""The documented commands as a user types them. Every training command of README.md, nbs/90_train.ipynb and
40_training's "Running it" is a profile plus paths; the paper-scale ones (the `paper` profile, papermill and torchrun)
run as written on a generated PAB-layout root and a generated checkpoint in X-VLM's key layout, with `-p max_steps 1`.

What the paper-scale test changes, and why: the paths (data_root, vocab, init_checkpoint, the notebook) point at the
generated files; torchrun starts 1 process instead of 4 (a CPU stands in for the GPUs; the per-device batch of 22 is
kept); and the paper backbone is shrunk to a quarter of its width (Swin-B 128 -> 32 channels at stage 1, BERT 768 -> 192,
heads and feed-forward likewise, Pose Conv 96 -> 24; depths 2-2-18-2 and 6 + 6 layers, 224 px, 49 patches, E = 256 and
56 tokens kept), written as the run folder's own backbone.yaml before the run starts (40_training: a run builds its method
from it). Measured on one thread (CMP, 22 pairs, BERT's 30,522-token vocabulary): a training step took 12-16 s and 6.4 GB
at a quarter of the width, 35-56 s and 11.7 GB at half; full width was not run (about twice the half-width memory, more
than this 23 GB machine holds). Each command took 22-50 s here on two shared cores (start, load, one step, checkpoint, evaluation on test and ucc; peak RSS
5.2 GB), so they run in CI; the whole file took 75-140 s."""
import json, os, re, shlex, subprocess, sys, time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, OMP_NUM_THREADS='1', MPLBACKEND='Agg', PYTHONWARNINGS='ignore')
DOCS = ('README.md', 'nbs/90_train.ipynb', 'nbs/40_training.ipynb')
RUN_PARAMS = {'profile', 'method', 'data_root', 'vocab', 'init_checkpoint'}   # what a documented training command may set
WIDTH = 4                                                                      # the paper backbone's width is divided by this


def doc_text(name: str) -> str:
    "A README's text, or a notebook's markdown cells."
    path = REPO / name
    if path.suffix != '.ipynb': return path.read_text()
    return '\n\n'.join(''.join(c['source']) for c in json.loads(path.read_text())['cells'] if c['cell_type'] == 'markdown')


def shell_commands(text: str) -> list[str]:
    "The commands of the ```sh blocks of a text: continuation lines joined, trailing comments dropped."
    out = []
    for block in re.findall(r'```sh\n(.*?)```', text, flags=re.S):
        for line in block.replace('\\\n', ' ').splitlines():
            line = re.sub(r'\s+#.*$', '', line).strip()
            if line: out.append(' '.join(line.split()))
    return out


def params(argv: list[str]) -> dict:
    "The `-p name value` pairs of a command (and python -m tpas_nb.train's `--profile name`)."
    out = {argv[i + 1]: argv[i + 2] for i, a in enumerate(argv) if a == '-p'}
    if '--profile' in argv: out['profile'] = argv[argv.index('--profile') + 1]
    return out


def training_commands(name: str) -> list[str]:
    "The commands of a document that train: papermill on 90_train, and python / torchrun -m tpas_nb.train."
    return [c for c in shell_commands(doc_text(name)) if '90_train.ipynb' in c or 'tpas_nb.train' in c]


def test_documented_training_commands_are_a_profile_plus_paths():
    "Every training command of the README, 90_train and 40_training sets a profile, a method and paths, nothing else."
    seen = 0
    for name in DOCS:
        cmds = training_commands(name)
        assert cmds, f'{name}: no training command found'
        for c in cmds:
            argv = shlex.split(c)
            if argv[-1].endswith('.yaml'): continue                      # a run folder's own config.yaml
            assert set(params(argv)) <= RUN_PARAMS, f'{name}: {c!r} sets {sorted(set(params(argv)) - RUN_PARAMS)}'
            seen += 1
    assert seen >= 5, seen


def paper_commands() -> list[str]:
    "The distinct paper-scale commands of README.md and 90_train (each must document the papermill and the torchrun one)."
    out = []
    for name in DOCS[:2]:
        cmds = [c for c in shell_commands(doc_text(name)) if 'profile paper' in c]
        assert any(c.startswith('papermill ') for c in cmds) and any(c.startswith('torchrun ') for c in cmds), (name, cmds)
        out += [c for c in cmds if c not in out]
    return out


def test_paper_commands_agree():
    "The README and 90_train document the same paper-scale commands, with the paper profile and every path."
    cmds = paper_commands()
    assert len(cmds) == 2, cmds
    for c in cmds:
        p = params(shlex.split(c))
        assert p['profile'] == 'paper' and {'data_root', 'vocab', 'init_checkpoint'} <= set(p), c


def narrow_paper(width: int = WIDTH):
    "The paper preset with every width divided by `width` (depths, patches, image size, E and L kept)."
    from tpas_nb.config import get_preset
    p = get_preset('paper')
    v, t = p.vision, p.text
    return replace(p, vision=replace(v, embed_dim=v.embed_dim // width, num_heads=tuple(h // width for h in v.num_heads)),
                   text=replace(t, hidden_size=t.hidden_size // width, num_attention_heads=t.num_attention_heads // width,
                                intermediate_size=t.intermediate_size // width),
                   pose_hidden=p.pose_hidden // width)


@pytest.fixture(scope='module')
def paper_files(tmp_path_factory):
    """A PAB-layout root (SynthPAB without its marker, so read as real PAB: 11 people = one batch of 22, no val split),
    a vocab.txt, the narrow backbone and a checkpoint of it in X-VLM's key layout saved as .th."""
    from tpas_nb.config import save_config
    from tpas_nb.data.pab import make_tokenizer, synthpab_vocab
    from tpas_nb.data.synth.corpus import make_synthpab
    from tpas_nb.methods import build_method
    from tpas_nb.models.encoders import to_xvlm_state_dict
    d = tmp_path_factory.mktemp('paper')
    root = make_synthpab(d / 'PAB', train_pairs=11, val_pairs=0, test_pairs=2, ucc_pairs=2, heldout_pairs=0, image_size=64, weather=False,
                         progress=False)   # real PAB's splits: no held-out style
    (root / 'synthpab.json').unlink()
    vocab = d / 'bert-base-uncased' / 'vocab.txt'
    vocab.parent.mkdir(); vocab.write_text('\n'.join(synthpab_vocab()) + '\n')
    backbone = narrow_paper()
    save_config(backbone, d / 'backbone.yaml')
    torch.manual_seed(0)
    sd = to_xvlm_state_dict(build_method('xvlm', preset=backbone, tokenizer=make_tokenizer(vocab)).backbone)
    ckpt = d / '16m_base_model_state_step_199999.th'
    torch.save(sd, ckpt)
    return dict(dir=d, data_root=root, vocab=vocab, init_checkpoint=ckpt, backbone=d / 'backbone.yaml', keys=len(sd))


def as_run(command: str, files: dict) -> list[str]:
    "The documented command with the generated paths put in, torchrun on 1 CPU process, and `-p max_steps 1` added."
    argv = shlex.split(command)
    for i, a in enumerate(argv):
        if argv[i - 1] == '-p' and i + 1 < len(argv) and a in ('data_root', 'vocab', 'init_checkpoint'): argv[i + 1] = str(files[a])
        if a == 'nbs/90_train.ipynb': argv[i] = str(REPO / a)
        if a == '--nproc_per_node': argv[i + 1] = '1'
    if argv[0] == 'torchrun': argv[:1] = [sys.executable, '-m', 'torch.distributed.run']
    if argv[0] == 'papermill': argv[:1] = [sys.executable, '-m', 'papermill']
    return argv + ['-p', 'max_steps', '1']


@pytest.mark.parametrize('which', ['papermill', 'torchrun'])
def test_paper_command_runs_as_written(paper_files, tmp_path, which):
    "The documented paper command starts, loads the X-VLM-layout checkpoint, takes a step of 22 pairs, checkpoints and evaluates."
    from tpas_nb.config import BackboneConfig, load_config
    from tpas_nb.methods import from_flat
    command = next(c for c in paper_commands() if c.startswith(which))
    argv = as_run(command, paper_files)
    method = params(argv)['method']
    run_dir = tmp_path / 'runs' / f'{method}_seed0'                         # out_dir '' -> runs/<method>_seed<seed>
    run_dir.mkdir(parents=True)
    (run_dir / 'backbone.yaml').write_text(paper_files['backbone'].read_text())   # the narrow paper backbone (module docstring)
    t0 = time.time()
    r = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=1800)
    seconds = time.time() - t0
    assert r.returncode == 0, f"{' '.join(argv)}\nexit {r.returncode}\nSTDOUT:\n{r.stdout[-3000:]}\nSTDERR:\n{r.stderr[-6000:]}"
    # the profile's values, and nothing else than the command's paths and max_steps
    cfg = load_config(run_dir / 'config.yaml')
    p = params(argv)
    assert cfg == from_flat('paper', method=method, data_root=p['data_root'], vocab=p['vocab'], init_checkpoint=p['init_checkpoint'],
                            max_steps=1, out_dir='')
    assert (cfg.batch_per_device, cfg.k_test, cfg.data.random_erasing, cfg.optim.lr, cfg.optim.warmup_steps) == (22, 128, 0.6, 1e-4, 500)
    assert load_config(run_dir / 'backbone.yaml', BackboneConfig) == narrow_paper()
    # loaded: every key of the checkpoint went into the backbone
    report = json.loads((run_dir / 'init_report.json').read_text())
    assert report['counts']['missing'] == 0 and report['counts']['unexpected'] == 0, report['counts']
    assert report['counts']['matched'] + report['counts'].get('converted', 0) > 300, report['counts']
    # one step of 22 pairs, a checkpoint, an evaluation
    log = [json.loads(l) for l in (run_dir / 'log.jsonl').read_text().splitlines()]
    assert [x['step'] for x in log] == [1] and all(v == v for k, v in log[0].items() if k.startswith('loss'))
    assert {'checkpoint.safetensors', 'state.pt', 'best.safetensors'} <= {f.name for f in run_dir.iterdir()}
    m = json.loads((run_dir / 'metrics.json').read_text())
    assert (m['train']['steps'], m['train']['global_batch'], m['train']['processes']) == (1, 22, 1)
    assert sorted(m['splits']) == ['test', 'ucc'] and m['selection']['split'] is None          # real PAB has no val split
    assert all(0 <= s['all']['R1'] <= 100 for s in m['splits'].values())
    print(f"{which}: {seconds:.0f} s, peak RSS {m['peak_memory_mib']['cpu_rss'] / 1024:.1f} GB")
    if which == 'papermill': assert (tmp_path / argv[4]).exists()                              # the executed notebook


def test_tpas_validate_reads_seda_official_files(tmp_path):
    "`tpas_validate ROOT` on a root laid out as SeDA's release: records in the official nested format are read; a malformed one is named by file and line."
    from tpas_nb.data.synth.corpus import make_synthpab
    root = make_synthpab(tmp_path / 'PAB', train_pairs=3, val_pairs=0, test_pairs=1, ucc_pairs=0, image_size=32, weather=False, progress=False)
    recs = [json.loads(l) for l in (root / 'annotation/train/attr_0.json').read_text().splitlines()]
    official = root / 'annotation/train_decouple/attr_0.json'
    official.parent.mkdir()
    official.write_text(''.join(json.dumps(dict(r, decoupled_caption=[r['decoupled_caption']])) + '\n' for r in recs))
    (root / 'annotation/train/attr_0.json').unlink(); (root / 'annotation/train').rmdir()
    r = subprocess.run(['tpas_validate', str(root)], capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stderr
    assert re.search(r'^train_decouple\s+6\s', r.stdout, flags=re.M), r.stdout
    lines = official.read_text().splitlines()
    lines[4] = json.dumps(dict(json.loads(lines[4]), decoupled_caption=[[{'appearance': 'a man'}, {}]]))
    official.write_text('\n'.join(lines) + '\n')
    r = subprocess.run(['tpas_validate', str(root)], capture_output=True, text=True, env=ENV)
    assert r.returncode == 1 and 'annotation/train_decouple/attr_0.json:5: decoupled_caption must be' in r.stderr, r.stderr


def test_train_cli_profile_and_train_subset(tmp_path):
    "`python -m tpas_nb.train --profile cpu -p …` trains on a fixed subset of whole people and records it in the run folder."
    from tpas_nb.config import PROFILES, load_config
    from tpas_nb.data.pab import PABFolder, subset_positions
    from tpas_nb.runs import resolve_data_root
    out = tmp_path / 'run'
    tiny = dict(method='cmp', cache_dir=tmp_path / 'cache', train_pairs=16, val_pairs=0, test_pairs=2, ucc_pairs=0, image_size=48,
                epochs=1, max_steps=1, batch_size=8, k_test=4, train_subset=9, train_subset_seed=3, out_dir=out)
    argv = [sys.executable, '-m', 'tpas_nb.train', '--profile', 'cpu', *[a for k, v in tiny.items() for a in ('-p', k, str(v))], '--no-progress']
    r = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, f"exit {r.returncode}\nSTDERR:\n{r.stderr[-5000:]}"
    cfg = load_config(out / 'config.yaml')
    cpu = PROFILES['cpu']                                                    # the profile's values, the subset's own
    assert (cfg.data.train_subset, cfg.data.train_subset_seed, cfg.optim.lr, cfg.init_checkpoint, cfg.wise_alpha) == \
        (9, 3, cpu['optim']['lr'], cpu['init_checkpoint'], cpu['wise_alpha'])
    assert (out / 'tuned.safetensors').exists()                             # WiSE-FT ran (no val split: the last weights were interpolated)
    info = json.loads((out / 'train_subset.json').read_text())
    recs = PABFolder(resolve_data_root(cfg.data, progress=False)).records('train')
    keep = subset_positions(recs, 9, seed=3)
    assert (info['split'], info['size'], info['seed'], info['records'], info['of_records']) == ('train', 9, 3, 10, 32)
    assert info['image_ids'] == sorted(recs[i]['image_id'] for i in keep)
    assert {recs[i]['hard_i_id'] for i in keep} <= set(info['image_ids'])          # whole people: every counterpart is in
