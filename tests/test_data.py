"End-to-end and bad-input tests of the data command-line tools: tpas_synthpab and tpas_validate (missing and unreadable files, pose maps)."
import json, shutil, subprocess

import pytest

SIZES = ['--train-pairs', '12', '--val-pairs', '2', '--test-pairs', '4', '--ucc-pairs', '2', '--image-size', '48']


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True)


@pytest.fixture(scope='module')
def synth(tmp_path_factory):
    root = tmp_path_factory.mktemp('data') / 'synthpab'
    r = run('tpas_synthpab', str(root), *SIZES, '--workers', '2')
    assert r.returncode == 0, r.stderr
    assert 'SynthPAB written to' in r.stdout and '24 train' not in r.stderr
    return root


@pytest.fixture
def copy(synth, tmp_path):
    dst = tmp_path / 'pab'
    shutil.copytree(synth, dst)
    return dst


def test_synthpab_layout(synth):
    for rel in ['annotation/train/attr_0.json', 'annotation/val/attr.json', 'annotation/test/attr.json',
                'annotation/test/ucc.json', 'annotation/test/heldout.json', 'annotation/multi-weather/multi-weather_dark_snow.json', 'synthpab.json']:
        assert (synth / rel).exists(), rel
    meta = json.loads((synth / 'synthpab.json').read_text())
    assert meta['images'] == {'train': 24, 'val': 4, 'test': 8, 'ucc': 4, 'heldout': 4}   # heldout: half of test by default
    assert meta['styles'] == {'train': 'flat', 'val': 'flat', 'test': 'real', 'ucc': 'real', 'heldout': 'sketch'}
    recs = [json.loads(l) for l in (synth / 'annotation/train/attr_0.json').read_text().splitlines()]
    assert len(recs) == 24
    by_id = {r['image_id']: r for r in recs}
    for r in recs:  # counterparts: same person and scene, the other action kind
        o = by_id[r['hard_i_id']]
        assert o['hard_i_id'] == r['image_id'] and o['scene'] == r['scene'] and o['person_id'] == r['person_id']
        assert ('normal' in r) != ('normal' in o)


def test_validate_ok(synth):
    r = run('tpas_validate', str(synth))
    assert r.returncode == 0, r.stderr
    assert 'valid SynthPAB folder' in r.stdout
    rows = {l.split()[0]: l.split() for l in r.stdout.splitlines()[2:]}
    assert rows['train'][1] == '24' and rows['test'][1] == '8' and rows['weather:rain'][1] == '8'


def test_same_seed_same_bytes(synth, tmp_path):
    other = tmp_path / 'again'
    assert run('tpas_synthpab', str(other), *SIZES, '--workers', '1').returncode == 0
    files = sorted(p.relative_to(synth) for p in synth.rglob('*') if p.is_file() and p.name not in ('synthpab.json', 'vocab.txt'))
    assert files == sorted(p.relative_to(other) for p in other.rglob('*') if p.is_file() and p.name != 'synthpab.json')
    assert all((synth / f).read_bytes() == (other / f).read_bytes() for f in files)


def test_synthpab_refuses_non_empty_folder(synth):
    r = run('tpas_synthpab', str(synth), *SIZES)
    assert r.returncode == 2 and 'is not empty' in r.stderr


def _edit_line(path, n, fn):
    lines = path.read_text().splitlines()
    lines[n - 1] = fn(lines[n - 1])
    path.write_text('\n'.join(lines) + '\n')


def _invalid(root, *needles):
    r = run('tpas_validate', str(root))
    assert r.returncode == 1, r.stdout
    for s in needles: assert s in r.stderr, r.stderr
    return r.stderr


def test_malformed_json_line(copy):
    _edit_line(copy / 'annotation/train/attr_0.json', 3, lambda l: l[:-5])
    _invalid(copy, 'attr_0.json:3: malformed JSON line')


def test_missing_field(copy):
    _edit_line(copy / 'annotation/test/attr.json', 2, lambda l: json.dumps({k: v for k, v in json.loads(l).items() if k != 'scene'}))
    _invalid(copy, 'attr.json:2: missing field', "'scene'")


def test_empty_caption(copy):
    _edit_line(copy / 'annotation/test/ucc.json', 1, lambda l: json.dumps(dict(json.loads(l), caption=[''])))
    _invalid(copy, 'ucc.json:1: empty caption')


def test_missing_image(copy):
    (copy / 'test/5.jpg').unlink()
    _invalid(copy, 'test/attr.json:6: image not found', 'test/5.jpg')


def test_missing_pose_map(copy):
    (copy / 'pose/train/imgs_0/anomaly/4.jpg').unlink()  # first needed by line 9, as the counterpart of normal/4
    _invalid(copy, 'attr_0.json:9: pose map not found', 'pose/train/imgs_0/anomaly/4.jpg')
    assert run('tpas_validate', str(copy), '--no-pose').returncode == 0


def test_unreadable_image(copy):
    (copy / 'test/5.jpg').write_bytes(b'12345678')                                      # 8 bytes named .jpg
    err = _invalid(copy, 'test/attr.json:6: unreadable image', 'test/5.jpg (not an image file PIL recognises)')
    assert 'Traceback' not in err
    r = run('tpas_validate', str(copy), '--no-image-check')                             # existence only
    assert r.returncode == 0 and 'valid SynthPAB folder (images not opened: --no-image-check)' in r.stdout, r.stdout + r.stderr


def test_unreadable_pose_map(copy):
    jpg = (copy / 'pose/test/3.jpg').read_bytes()
    (copy / 'pose/test/3.jpg').write_bytes(jpg[:8])                                      # the first 8 bytes of a JPEG
    _invalid(copy, 'test/attr.json:4: unreadable image', 'pose/test/3.jpg')
    assert run('tpas_validate', str(copy), '--no-pose').returncode == 0


def test_no_pose_maps_valid_with_note(copy):
    shutil.rmtree(copy / 'pose')
    r = run('tpas_validate', str(copy))
    assert r.returncode == 0 and 'valid SynthPAB folder' in r.stdout, r.stderr
    assert f"no pose maps ({copy / 'pose'}): xvlm, gradco train and evaluate on it; cmp, seda read a pose map with every image" in r.stdout, r.stdout
    r = run('tpas_validate', str(copy), '--pose')
    assert r.returncode == 1 and 'attr_0.json:1: pose map not found' in r.stderr and 'write_pose_maps' in r.stderr, r.stderr


def test_missing_counterpart(copy):
    _edit_line(copy / 'annotation/train/attr_0.json', 7, lambda l: json.dumps(dict(json.loads(l), hard_i_id='999_n')))
    _invalid(copy, 'attr_0.json:7: counterpart', "'999_n'")


def test_counterpart_image_missing(copy):
    _edit_line(copy / 'annotation/train/attr_0.json', 1, lambda l: json.dumps(dict(json.loads(l), hard_i='imgs_0/anomaly/404.jpg')))
    _invalid(copy, 'attr_0.json:1: image not found', 'imgs_0/anomaly/404.jpg')


def test_not_a_pab_root(tmp_path):
    _invalid(tmp_path, 'no annotation/ folder')
