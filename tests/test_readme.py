"""The README's first screen as a newcomer meets it: its Python example runs as written, and its sections come in the
order the README promises (Install, Run, Test, From Python), each with one code block."""
import os, re, subprocess, sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / 'README.md').read_text()


def section(name: str) -> str:
    "The text of a `## name` section, up to the next `## ` heading."
    m = re.search(rf'^## {re.escape(name)}\n(.*?)(?=^## |\Z)', README, flags=re.S | re.M)
    assert m, f'README.md has no "## {name}" section'
    return m.group(1)


def test_first_screen_sections():
    "Install, Run, Test and From Python come first, in that order, each with exactly one code block."
    heads = re.findall(r'^## (.+)$', README, flags=re.M)
    assert heads[:4] == ['Install', 'Run', 'Test', 'From Python'], heads[:6]
    for name in heads[:4]: assert section(name).count('```') == 2, f'"## {name}" should hold one code block'
    assert section('Test').count('nbdev_test && pytest tests') == 1


def test_python_example_runs_as_written(tmp_path):
    "The ```python block of '## From Python' trains, evaluates and reads its run back (in a scratch folder, one thread)."
    code = re.search(r'```python\n(.*?)```', section('From Python'), flags=re.S).group(1)
    assert len(code.strip().splitlines()) <= 12
    env = dict(os.environ, OMP_NUM_THREADS='1', MKL_NUM_THREADS='1', MPLBACKEND='Agg')
    out = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r'test R@1 \d+\.\d\d \(ITC alone \d+\.\d\d\), \d+ samples/s', out.stdout), out.stdout
    assert (tmp_path / 'runs/example/metrics.json').exists() and (tmp_path / 'runs/example/best.safetensors').exists()
