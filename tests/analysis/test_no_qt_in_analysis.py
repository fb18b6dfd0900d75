"""analysis/ must work where Qt does not exist: import every module and run a text with PySide6 blocked."""
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT


@pytest.mark.slow
def test_every_analysis_module_imports_and_runs_without_qt(tiny_model_dir):
    script = textwrap.dedent(f"""
        import importlib, pkgutil, sys
        class BlockQt:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in ('PySide6', 'PyQt5', 'PyQt6', 'pyqtgraph', 'shiboken6'):
                    raise ImportError('Qt is blocked in this test: ' + name)
        sys.meta_path.insert(0, BlockQt())
        sys.path.insert(0, {str(ROOT)!r})
        import analysis
        names = [m.name for m in pkgutil.walk_packages(analysis.__path__, 'analysis.')]
        for name in names:
            importlib.import_module(name)
        from analysis.model.loading import load_model
        from analysis.run.inference import run_text
        from analysis.measures.head_scores import all_scores
        from analysis.measures.parity import parity_report
        m = load_model({str(tiny_model_dir)!r}, device='cpu')
        r = run_text(m, 'Qt is not needed here.')
        all_scores(r)
        assert parity_report(r, [m.attention_weights(l) for l in range(m.n_layer)]).passed
        assert not any(k.split('.')[0] in ('PySide6', 'pyqtgraph') for k in sys.modules)
        print(len(names), 'modules')
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[0]) >= 8
