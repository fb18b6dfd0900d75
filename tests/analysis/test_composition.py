"""Head composition: on hand-built weights with known answers (aligned → 1, orthogonal → 0), and the factored
scores against dense d × d products computed here with γ folded in, GQA included."""
import numpy as np
import pytest

from analysis.families.weights import AttentionWeights, Norm
from analysis.measures.composition import baseline, composition


def layer(q, k, v, o, n_head, n_kv_head, dk, gamma=None, index=0):
    d = q.shape[0]
    norm = None if gamma is None else Norm("rmsnorm", gamma.astype(np.float32), None, 1e-6)
    zeros = lambda m: np.zeros(m, np.float32)  # noqa: E731
    return AttentionWeights("llama", index, norm, q.astype(np.float32), zeros(q.shape[1]), k.astype(np.float32),
                            zeros(k.shape[1]), v.astype(np.float32), zeros(v.shape[1]), o.astype(np.float32),
                            zeros(d), n_head, n_kv_head, dk, dk ** -0.5, True)


def e(d, i):
    x = np.zeros((d, 1))
    x[i] = 1
    return x


def test_aligned_and_orthogonal_subspaces():
    d = 6  # one head a layer, dk = 1: head 0 writes e1 (reads e0); layer 1's key reads e1, query e2, value e3
    first = layer(e(d, 0), e(d, 0), e(d, 0), e(d, 1).T, 1, 1, 1)
    second = layer(e(d, 2), e(d, 1), e(d, 3), e(d, 4).T, 1, 1, 1, index=1)
    c = composition([first, second])
    assert c.k[0, 0, 1, 0] == pytest.approx(1.0)  # e0 → e1 written, read by the keys
    assert c.q[0, 0, 1, 0] == pytest.approx(0.0)  # the queries read e2
    assert c.v[0, 0, 1, 0] == pytest.approx(0.0)  # the values read e3
    assert np.isnan(c.k[1, 0, 0, 0]) and np.isnan(c.k[0, 0, 0, 0])  # only earlier → later
    assert c.strongest("k", 1)[0][:4] == (0, 0, 1, 0)


def dense(w):
    """Per head W_OV, W_QK as dense d × d matrices, γ folded in, GQA expanded — written out here."""
    g = w.norm.weight.astype(np.float64)
    ov, qk = [], []
    for h in range(w.n_head):
        kvh = h // (w.n_head // w.n_kv_head)
        sl, kl = slice(h * w.d_head, (h + 1) * w.d_head), slice(kvh * w.d_head, (kvh + 1) * w.d_head)
        wq, wk, wv = (np.diag(g) @ m.astype(np.float64) for m in (w.q_weight[:, sl], w.k_weight[:, kl], w.v_weight[:, kl]))
        ov.append(wv @ w.out_weight[sl].astype(np.float64))
        qk.append(wq @ wk.T)
    return ov, qk


def test_factored_scores_equal_dense_products():
    rng = np.random.default_rng(1)
    d, h, g, dk = 12, 4, 2, 3
    layers = [layer(rng.standard_normal((d, h * dk)), rng.standard_normal((d, g * dk)), rng.standard_normal((d, g * dk)),
                    rng.standard_normal((h * dk, d)), h, g, dk, gamma=rng.uniform(0.5, 2, d), index=i) for i in range(3)]
    c = composition(layers)
    mats = [dense(w) for w in layers]
    fro = np.linalg.norm
    for el in range(3):
        for ll in range(el + 1, 3):
            for eh in range(h):
                for lh in range(h):
                    a = mats[el][0][eh]
                    ov, qk = mats[ll][0][lh], mats[ll][1][lh]
                    assert c.q[el, eh, ll, lh] == pytest.approx(fro(a @ qk) / (fro(a) * fro(qk)), rel=1e-6)
                    assert c.k[el, eh, ll, lh] == pytest.approx(fro(a @ qk.T) / (fro(a) * fro(qk)), rel=1e-6)
                    assert c.v[el, eh, ll, lh] == pytest.approx(fro(a @ ov) / (fro(a) * fro(ov)), rel=1e-6)
    assert 0 < c.baseline < 1 and c.corrected("k")[0, 0, 1, 0] == pytest.approx(c.k[0, 0, 1, 0] - c.baseline)


def test_baseline_is_about_one_over_sqrt_d():
    for d, dk in ((256, 16), (64, 8)):
        assert baseline(d, dk) == pytest.approx(d ** -0.5, rel=0.15)


def test_progress_counts_every_step_and_cancel_stops_with_nothing_kept():
    import threading

    from analysis.errors import AnalysisCancelled

    rng = np.random.default_rng(3)
    layers = [layer(rng.standard_normal((8, 4)), rng.standard_normal((8, 4)), rng.standard_normal((8, 4)),
                    rng.standard_normal((4, 8)), 2, 2, 2, index=i) for i in range(3)]
    seen = []
    full = composition(layers, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (6, 6) and [d for d, _ in seen] == sorted(d for d, _ in seen) and len(seen) == 7
    np.testing.assert_array_equal(full.k, composition(layers).k, strict=False)  # progress changes nothing
    cancel = threading.Event()

    def stop_at_three(done, total):
        if done == 3:
            cancel.set()

    with pytest.raises(AnalysisCancelled):
        composition(layers, progress=stop_at_three, cancel=cancel)
