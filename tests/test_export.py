"""ONNX export of a run's ITC encoders (nbs/52_export.ipynb) end to end: a CMP run (image + pose map) fine-tuned for two
steps from the shipped checkpoint on a tiny SynthPAB is exported by `tpas_export` (its Python function, `export_cli`);
onnxruntime's features match PyTorch's within TOLERANCE on the SynthPAB test images and captions at two batch sizes, and
rank the gallery identically; bad input exits with status 1 and a one-line message naming the file."""
import contextlib, io, json

import numpy as np
import pytest
import torch

from tpas_nb.config import RunConfig, save_config
from toy_runs import one_thread, tiny_synthpab, trained_run

METHOD = 'cmp'   # the image encoder with two inputs (image, pose map); the notebook checks all four methods


def cli(*args) -> tuple:
    "(exit status, stdout, stderr) of tpas_export with `args`."
    from tpas_nb.export import export_cli
    out, err, status = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try: export_cli([str(a) for a in args])
        except SystemExit as e: status = e.code
    return status, out.getvalue(), err.getvalue()


@pytest.fixture(scope='module')
def exported(tmp_path_factory):
    "(SynthPAB root, run folder, export folder, tpas_export's stdout): one export shared by the tests of this module."
    tmp = tmp_path_factory.mktemp('export')
    sp = tiny_synthpab(tmp / 'sp', train_pairs=8, val_pairs=2)
    run = trained_run(tmp / 'run', METHOD, sp, lr=1e-4, init_checkpoint='pretrained')
    with one_thread(): status, out, err = cli(run, tmp / 'onnx')
    assert status == 0, f"tpas_export exited {status}\nSTDOUT:\n{out}\nSTDERR:\n{err[-4000:]}"
    return sp, run, tmp / 'onnx', out


def test_files_and_spec(exported):
    "The four files; export.json names the inputs with free batch (and length) axes, the run's weights SHA-256 and vocabulary."
    from tpas_nb.export import IMAGE_ONNX, TEXT_ONNX, VOCAB, SPEC, TOLERANCE, read_spec
    from tpas_nb.runs import Run
    sp, run, onnx_dir, out = exported
    assert sorted(p.name for p in onnx_dir.iterdir()) == sorted([IMAGE_ONNX, TEXT_ONNX, VOCAB, SPEC])
    spec = read_spec(onnx_dir)
    assert spec == json.loads((onnx_dir / SPEC).read_text())
    assert spec['method'] == METHOD and spec['weights'] == 'best.safetensors'
    assert spec['weights_sha256'] == Run(run).digest('best')
    S = spec['image_size']
    assert spec['image_encoder']['inputs'] == [dict(name=n, dtype='float32', shape=['batch', 3, S, S]) for n in ('image', 'pose')]
    assert spec['text_encoder']['inputs'] == [dict(name=n, dtype='int64', shape=['batch', 'length']) for n in ('ids', 'mask')]
    assert spec['image_encoder']['outputs'] == spec['text_encoder']['outputs'] == [dict(name='feat', dtype='float32', shape=['batch', spec['feature_dim']])]
    assert (spec['mean'], spec['std'], spec['max_len']) == ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711], 56)
    assert (onnx_dir / VOCAB).read_text() == (run / 'vocab.txt').read_text()
    assert max(spec['check']['max_abs_diff'].values()) < TOLERANCE['atol'], spec['check']
    assert f"{METHOD} run" in out and 'image + pose' in out, out


@pytest.mark.parametrize('batch', [8, 3])
def test_onnx_matches_pytorch_on_synthpab(exported, batch):
    "The SynthPAB test images (with pose maps) and captions: features within TOLERANCE of the evaluator's, identical rankings."
    from tpas_nb.data.pab import PABTestDataset
    from tpas_nb.eval.retrieval import embed_gallery, embed_queries
    from tpas_nb.export import OnnxEncoders, TOLERANCE
    from tpas_nb.runs import Run
    sp, run_dir, onnx_dir, _ = exported
    torch.set_num_threads(1)
    run = Run(run_dir)
    method = run.load_method('best')
    ds = PABTestDataset(sp, 'test', img_size=method.backbone.img_size, pose=True)
    ref_img = embed_gallery(method, ds, batch_size=8, progress=False)['feat'].numpy()                       # G×F
    ref_txt = embed_queries(method, ds.texts, run.tokenizer, run.max_len, batch_size=8)['feat'].numpy()     # Q×F
    enc = OnnxEncoders(onnx_dir, threads=1)
    items = [ds[i] for i in range(len(ds))]
    image, pose = (torch.stack([it[k] for it in items]).numpy() for k in ('image', 'pose'))                # G×3×S×S
    ids, mask = enc.tokenize(ds.texts)                                                                     # Q×L, the exported vocabulary
    img = np.concatenate([enc.embed_images(image[i:i + batch], pose[i:i + batch]) for i in range(0, len(image), batch)])
    txt = np.concatenate([enc.embed_texts(ids[i:i + batch], mask[i:i + batch]) for i in range(0, len(ids), batch)])
    assert (len(img), len(txt)) == (8, len(ds.texts)) and len(txt) >= 8
    np.testing.assert_allclose(img, ref_img, **TOLERANCE)
    np.testing.assert_allclose(txt, ref_txt, **TOLERANCE)
    np.testing.assert_allclose(enc.embed_captions(ds.texts[:3]), ref_txt[:3], **TOLERANCE)
    order = lambda s: np.argsort(-s, axis=1, kind='stable')
    assert (order(txt @ img.T) == order(ref_txt @ ref_img.T)).all()


def test_bad_input(exported, tmp_path):
    "Missing run, not a run, a method without an export, no weights, opset, a file as OUT_DIR: exit 1, one line, no traceback."
    sp, run, onnx_dir, _ = exported
    (tmp_path / 'empty').mkdir()
    for name in ('toy', 'xvlm'):
        (tmp_path / name).mkdir(); save_config(RunConfig(method=name), tmp_path / name / 'config.yaml')
    (tmp_path / 'afile').write_text('')
    cases = [((tmp_path / 'nope', tmp_path / 'o'), 'run folder not found'),
             ((tmp_path / 'empty', tmp_path / 'o'), 'no config.yaml'),
             ((tmp_path / 'toy', tmp_path / 'o'), "method 'toy' has no ONNX export yet"),
             ((tmp_path / 'xvlm', tmp_path / 'o'), 'no checkpoint'),
             ((run, tmp_path / 'o', '--opset', 11), 'opset 18 or later'),
             ((run, tmp_path / 'afile'), 'is not a folder')]
    for args, says in cases:
        status, out, err = cli(*args)
        assert status == 1, (args, status, out, err)
        assert err.startswith('tpas_export: error:') and says in err and 'Traceback' not in err and err.count('\n') == 1, (args, err)
    assert not (tmp_path / 'o').exists()


def test_encoders_refuse_bad_shapes(exported, tmp_path):
    "OnnxEncoders: not an export folder, a missing pose map, a wrong image size, a caption longer than the model's positions."
    from tpas_nb.export import ExportError, OnnxEncoders
    sp, run, onnx_dir, _ = exported
    with pytest.raises(ExportError, match='is not a finished export'): OnnxEncoders(tmp_path)
    enc = OnnxEncoders(onnx_dir)
    S = enc.spec['image_size']
    x = np.zeros((2, 3, S, S), np.float32)
    with pytest.raises(ValueError, match='reads a pose map'): enc.embed_images(x)
    with pytest.raises(ValueError, match=f'must be B×3×{S}×{S}'): enc.embed_images(x[:, :, :8], x[:, :, :8])
    with pytest.raises(ValueError, match='2 <= L <= 64'): enc.embed_texts(np.ones((2, 65), np.int64), np.ones((2, 65), np.int64))
    assert enc.embed_images(x, x).shape == (2, enc.spec['feature_dim'])
