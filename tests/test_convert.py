"""Your own dataset (05_convert) end to end: a tiny CUHK-PEDES written here in the published format (reid_raw.json,
imgs/), converted, validated, `xvlm` trained for two steps and evaluated under the identity protocol (metrics.json);
RSTPReid and ICFG-PEDES samples through the converter and the validator; `tpas_convert`'s errors."""
import contextlib, io, json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from tpas_nb.config import RunConfig, DataConfig, OptimConfig
from tpas_nb.data.convert import convert, convert_cli, check_method_data, ConvertError
from tpas_nb.data.pab import PABError, PABFolder, validate_pab
from tpas_nb.methods import method_switches

COLOURS = [(200, 40, 40), (40, 70, 200), (40, 150, 60), (225, 200, 40), (25, 25, 25), (240, 240, 240), (235, 130, 30), (128, 128, 128)]
NAMES = ['red', 'blue', 'green', 'yellow', 'black', 'white', 'orange', 'grey']


def person_image(path: Path, pid: int, k: int):
    "A 40×80 pedestrian: the person's shirt and trousers colours, a background and a shift that change per image."
    rng = np.random.default_rng([pid, k])
    im = Image.new('RGB', (40, 80), tuple(int(v) for v in rng.integers(150, 256, 3)))
    d, x = ImageDraw.Draw(im), 20 + int(rng.integers(-4, 5))
    d.ellipse([x - 5, 4, x + 5, 14], fill=(225, 185, 150))
    d.rectangle([x - 8, 15, x + 8, 44], fill=COLOURS[pid % 8])
    d.rectangle([x - 7, 45, x + 7, 76], fill=COLOURS[(3 * pid + 1) % 8])
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path)


def captions(pid: int) -> list[str]:
    top, bottom = NAMES[pid % 8], NAMES[(3 * pid + 1) % 8]
    return [f'A person in a {top} shirt and {bottom} trousers.', f'The pedestrian wears a {top} top and {bottom} pants.']


def write_source(root: Path, annotation: str, image_key: str, splits: dict, images: int, n_captions: int, path_of) -> Path:
    "A dataset in the published layout: root/<annotation> (a JSON list, one record per image) and root/imgs/."
    recs, pid = [], 0
    for split, n in splits.items():
        for _ in range(n):
            pid += 1
            for k in range(images):
                rel = path_of(split, pid, k)
                person_image(root / 'imgs' / rel, pid, k)
                rec = {'split': split, 'captions': captions(pid)[:n_captions], image_key: rel, 'id': pid}
                if image_key == 'file_path': rec['processed_tokens'] = [c.lower().split() for c in rec['captions']]
                recs.append(rec)
    (root / annotation).write_text(json.dumps(recs))
    return root


def cuhk(root):  # CUHK-PEDES: reid_raw.json, file_path, train/val/test, 2 captions per image
    return write_source(root, 'reid_raw.json', 'file_path', {'train': 4, 'val': 2, 'test': 3}, 3, 2, lambda s, p, k: f'CUHK01/{p:04d}{k:03d}.png')


def cli(*args):
    "(exit status, stdout, stderr) of tpas_convert with `args`."
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try: convert_cli([str(a) for a in args]); code = 0
        except SystemExit as e: code = e.code
    return code, out.getvalue(), err.getvalue()


def test_cuhk_pedes_convert_train_evaluate(tmp_path):
    "CUHK-PEDES → PAB (tpas_convert), valid without pose maps; xvlm trains two steps and metrics.json has the identity-protocol test R@1."
    from tpas_nb.train import train
    src = cuhk(tmp_path / 'CUHK-PEDES')
    code, out, err = cli('cuhk-pedes', src, tmp_path / 'pab')
    assert code == 0, err
    root = tmp_path / 'pab'
    stats = {s['split']: s for s in validate_pab(root, pose=False)}
    assert {k: (v['records'], v['images'], v['ids'], v['queries']) for k, v in stats.items()} == \
        {'train': (24, 12, 4, 24), 'val': (6, 6, 2, 12), 'test': (9, 9, 3, 18)}
    test = [json.loads(l) for l in (root / 'annotation/test/attr.json').read_text().splitlines()]
    assert [r['image_id'] for r in test] == [7, 7, 7, 8, 8, 8, 9, 9, 9]                   # the person id: any image of the person is a positive
    assert all((root / r['image']).is_symlink() for r in test)
    assert (root / 'vocab.txt').exists()                                                   # built from the training captions

    cfg = RunConfig(method='xvlm', data=DataConfig(root=str(root)), epochs=1, batch_size=8, max_steps=2, k_test=4, eval_batch=8,
                    out_dir=str(tmp_path / 'run'), device='cpu', init_checkpoint='', optim=OptimConfig(lr=1e-3, lr_min=1e-4, warmup_steps=1))
    threads = torch.get_num_threads(); torch.set_num_threads(1)
    try: run = train(cfg, progress=False)
    finally: torch.set_num_threads(threads)
    m = json.loads((Path(run) / 'metrics.json').read_text())
    t = m['splits']['test']
    assert (t['n_queries'], t['n_gallery']) == (18, 9) and m['train']['steps'] == 2
    assert 0 <= t['all']['R1'] <= 100 and 0 < t['all']['mAP'] <= 100
    assert t['identity']['R1'] == t['all']['R1'] and t['normal']['R1'] == t['all']['R1'] and t['anomaly'] is None
    assert t['hard_pair_acc'] is None                                                      # no same-person, other-action image
    print(f"test R@1 {t['all']['R1']:.2f}, mAP {t['all']['mAP']:.2f} (identity protocol, 18 queries, 9 images, 3 persons)")

    with pytest.raises(ConvertError, match='write_pose_maps'): check_method_data(root, 'cmp', method_switches('cmp'))
    cmp = RunConfig(**{**cfg.__dict__, 'method': 'cmp', 'out_dir': str(tmp_path / 'cmp')})
    with pytest.raises(PABError, match='pose map not found'): train(cmp, progress=False)   # the trainer stops at the first missing map


def test_rstpreid_and_icfg_pedes(tmp_path):
    "RSTPReid (data_captions.json, img_path, 2 captions) and ICFG-PEDES (ICFG-PDES.json, train/test, 1 caption) convert and validate."
    rstp = write_source(tmp_path / 'RSTPReid', 'data_captions.json', 'img_path', {'train': 3, 'val': 2, 'test': 2}, 5, 2,
                        lambda s, p, k: f'{p:04d}_c{k + 1}_{100 + k}.jpg')
    icfg = write_source(tmp_path / 'ICFG-PEDES', 'ICFG-PDES.json', 'file_path', {'train': 3, 'test': 2}, 2, 1,
                        lambda s, p, k: f'{s}/{p:04d}/{p:04d}_{k:03d}_c{k}.jpg')
    r = {s['split']: (s['images'], s['ids'], s['queries']) for s in validate_pab(convert('rstpreid', rstp, tmp_path / 'r', mode='copy'), pose=False)}
    assert r == {'train': (15, 3, 30), 'val': (10, 2, 20), 'test': (10, 2, 20)}
    assert (tmp_path / 'r/imgs/0004_c1_100.jpg').read_bytes() == (rstp / 'imgs/0004_c1_100.jpg').read_bytes()   # copied, not re-encoded
    i = {s['split']: (s['images'], s['ids'], s['queries']) for s in validate_pab(convert('ICFG_PEDES', icfg, tmp_path / 'i'), pose=False)}
    assert i == {'train': (6, 3, 6), 'test': (4, 2, 4)}
    assert PABFolder(tmp_path / 'i').records('test')[0]['scene'] == 'unlabelled'


def test_cli_errors(tmp_path):
    "A wrong format name exits 2; a missing annotation file, malformed JSON, an empty caption and a missing image exit 1 naming the file."
    src = cuhk(tmp_path / 'CUHK-PEDES')
    code, _, err = cli('cuhk', src, tmp_path / 'o1')
    assert code == 2 and "unknown format 'cuhk'; valid: cuhk-pedes, icfg-pedes, rstpreid" in err, err
    code, _, err = cli('rstpreid', src, tmp_path / 'o2')
    assert code == 1 and err.startswith('tpas_convert: error:') and 'no rstpreid annotation file: looked for data_captions.json' in err, err
    good = (src / 'reid_raw.json').read_text()
    (src / 'reid_raw.json').write_text(good.replace('"id": 3,', '"id": 3,,', 1))
    code, _, err = cli('cuhk-pedes', src, tmp_path / 'o3')
    assert code == 1 and 'reid_raw.json:1:' in err and 'malformed JSON' in err, err
    recs = json.loads(good); recs[4]['captions'][1] = '   '
    (src / 'reid_raw.json').write_text(json.dumps(recs))
    code, _, err = cli('cuhk-pedes', src, tmp_path / 'o4')
    assert code == 1 and "reid_raw.json: record 5 (CUHK01/0002001.png): empty caption" in err, err
    (src / 'reid_raw.json').write_text(good); (src / 'imgs/CUHK01/0009002.png').unlink()
    code, _, err = cli('cuhk-pedes', src, tmp_path / 'o5')
    assert code == 1 and f"image not found: {src / 'imgs/CUHK01/0009002.png'}" in err and not (tmp_path / 'o5').exists(), err
    assert 'Traceback' not in err


def test_unreadable_image_refused_before_a_run(tmp_path):
    "An 8-byte file named as an image: tpas_convert refuses it by record; written anyway (--no-image-check), tpas_validate and a run refuse it by line, before the first step."
    from tpas_nb.data.pab import validate_cli
    from tpas_nb.train import train
    src = cuhk(tmp_path / 'CUHK-PEDES')
    bad = src / 'imgs/CUHK01/0008001.png'                                                  # person 8, a test image
    bad.write_bytes(b'12345678')
    code, out, err = cli('cuhk-pedes', src, tmp_path / 'refused')
    assert code == 1 and not (tmp_path / 'refused').exists(), err
    assert f"reid_raw.json: record 23 (CUHK01/0008001.png): unreadable image {bad} (not an image file PIL recognises)" in err, err
    code, out, err = cli('cuhk-pedes', src, tmp_path / 'pab', '--no-image-check')
    assert code == 0 and 'valid PAB folder (cuhk-pedes, images linked, not opened (--no-image-check), ids = persons)' in out, out + err
    root = tmp_path / 'pab'
    want = f"{root / 'annotation/test/attr.json'}:5: unreadable image {root / 'imgs/CUHK01/0008001.png'} (not an image file PIL recognises)"
    verr = io.StringIO()
    with contextlib.redirect_stderr(verr), pytest.raises(SystemExit) as e: validate_cli([str(root)])
    assert e.value.code == 1 and verr.getvalue().startswith(f"tpas_validate: INVALID: {want};"), verr.getvalue()
    cfg = RunConfig(method='xvlm', data=DataConfig(root=str(root)), epochs=1, batch_size=8, max_steps=2, k_test=4, eval_batch=8,
                    out_dir=str(tmp_path / 'run'), device='cpu', init_checkpoint='', optim=OptimConfig(lr=1e-3, lr_min=1e-4, warmup_steps=1))
    with pytest.raises(PABError) as e: train(cfg, progress=False)                          # the test split: checked before the first step
    assert str(e.value) == verr.getvalue().removeprefix('tpas_validate: INVALID: ').rstrip('\n')
    assert not (tmp_path / 'run/log.jsonl').exists() and not (tmp_path / 'run/state.pt').exists()


def test_missing_pose_map_refused_before_a_run(tmp_path):
    "A converted folder with pose maps but one missing: tpas_validate names the line, --no-pose passes, cmp refuses before its first step; without any pose maps the folder is valid with a note."
    from tpas_nb.data.convert import write_pose_maps
    from tpas_nb.data.pab import validate_cli
    from tpas_nb.train import train
    root = convert('cuhk-pedes', cuhk(tmp_path / 'CUHK-PEDES'), tmp_path / 'pab')

    def validate(*args):
        o, e = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
            try: validate_cli([str(root), *args]); code = 0
            except SystemExit as x: code = x.code
        return code, o.getvalue(), e.getvalue()

    code, out, err = validate()
    assert code == 0 and f"no pose maps ({root / 'pose'}): xvlm, gradco train and evaluate on it; cmp, seda read a pose map" in out, out + err
    images = dict.fromkeys(r['image'] for s in ('train', 'val', 'test') for r in PABFolder(root).records(s))
    (tmp_path / 'kp.jsonl').write_text(''.join(json.dumps({'image': i, 'landmarks': None}) + '\n' for i in images))
    assert write_pose_maps(root, tmp_path / 'kp.jsonl') == 27
    assert validate()[0] == 0
    gone = root / 'pose/imgs/CUHK01/0005000.png'                                            # person 5, the first val image
    gone.unlink()
    code, out, err = validate()
    want = f"{root / 'annotation/val/attr.json'}:1: pose map not found: {gone}; cmp, seda read a pose map with every image (pose=True)"
    assert code == 1 and err.startswith(f"tpas_validate: INVALID: {want}"), err
    assert validate('--no-pose')[0] == 0
    cfg = RunConfig(method='cmp', method_args=dict(ihnm=False), data=DataConfig(root=str(root)), epochs=1, batch_size=8, max_steps=2,
                    k_test=4, eval_batch=8, out_dir=str(tmp_path / 'run'), device='cpu', init_checkpoint='',
                    optim=OptimConfig(lr=1e-3, lr_min=1e-4, warmup_steps=1))
    with pytest.raises(PABError) as e: train(cfg, progress=False)                          # the val split: checked before the first step
    assert str(e.value) == err.removeprefix('tpas_validate: INVALID: ').rstrip('\n')
    assert not (tmp_path / 'run/log.jsonl').exists() and not (tmp_path / 'run/state.pt').exists()
