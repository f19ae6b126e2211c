import pytest
import torch

from mmdsynth import build_feature_map, mean_embedding, release_mean_embedding
from mmdsynth.errors import InvalidParameterError, UnknownNameError
from mmdsynth.features import ENTKFeatures


def _data(n=37, d=12, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, d, generator=g, dtype=torch.float64), torch.randint(0, classes, (n,), generator=g)


def _double(fm):
    fm.net.double()
    fm._params = {k: v.double() for k, v in fm._params.items()}
    return fm


def _assert_same_loss_and_gradient(loss_fn, reference_fn, x, rel):
    """Both losses of a fresh copy of ``x``: equal values and gradients w.r.t. x, up to ``rel``."""
    grads, values = [], []
    for fn in (loss_fn, reference_fn):
        xg = x.clone().requires_grad_(True)
        loss = fn(xg)
        loss.backward()
        values.append(loss.item())
        grads.append(xg.grad)
    assert values[0] == pytest.approx(values[1], rel=rel)
    assert torch.allclose(grads[0], grads[1], atol=rel * grads[1].abs().max().item())


@pytest.mark.parametrize("arch,widths", [("fc_1l", (16,)), ("fc_2l", (16, 8)), ("cnn_2l", (3, 8))])
def test_generic_features_have_unit_norm_and_match_autograd(arch, widths):
    fm = ENTKFeatures(12, arch, widths, n_outputs=4, seed=1, chunk_size=5)
    x, _ = _data()
    phi = fm.generic(x.float())
    assert phi.shape == (37, fm.out_dim)
    assert torch.allclose(phi.norm(dim=1), torch.ones(37), atol=1e-5)
    # per-sample loop of torch.autograd.grad, the reference algorithm
    for i in (0, 17):
        params = list(fm.net.parameters())
        with torch.enable_grad():
            for p in params:
                p.requires_grad_(True)
            out = fm.net(x[i:i + 1].float()).sum()
            g = torch.cat([t.reshape(-1) for t in torch.autograd.grad(out, params)])
            for p in params:
                p.requires_grad_(False)
        assert torch.allclose(phi[i], g / g.norm(), atol=1e-6)


@pytest.mark.parametrize("arch,widths", [("fc_1l", (16,)), ("fc_2l", (16, 8)), ("cnn_2l", (3, 8))])
def test_fast_and_generic_paths_agree_on_features_embeddings_and_loss_gradients(arch, widths):
    fm = _double(ENTKFeatures(12, arch, widths, n_outputs=4, seed=3, chunk_size=8))
    assert fm.fast
    x, y = _data()
    assert torch.allclose(fm.fast_features(x), fm.generic(x), atol=1e-10)
    onehot = torch.nn.functional.one_hot(y, 4).double() / len(x)
    fast = fm.weighted_sum(x, onehot)
    slow = fm.generic(x).T @ onehot
    assert (fast - slow).abs().max() < 1e-5 * slow.abs().max()
    # the MMD loss and its gradient w.r.t. generated samples
    target = slow.detach() + 0.01
    _assert_same_loss_and_gradient(lambda xg: ((target - fm.weighted_sum(xg, onehot)) ** 2).sum(),
                                   lambda xg: ((target - fm.generic(xg).T @ onehot) ** 2).sum(), x, rel=1e-5)


@pytest.mark.parametrize("arch,widths", [("fc_1l", (64,)), ("fc_2l", (16, 64)), ("cnn_2l", (6, 40))])
@pytest.mark.parametrize("kind", ["onehot", "weighted", "unconditional"])
def test_gram_loss_matches_the_materialised_loss_and_gradient(arch, widths, kind):
    """Small batches against wide blocks take the Gram route of ``mmd_loss``; it must give
    the same loss and gradient as ||T - sum_i phi_i w_i^T||^2 built from generic features."""
    fm = _double(ENTKFeatures(12, arch, widths, n_outputs=4, seed=5))
    x, y = _data(n=4)
    n_blocks_dims = [(l.shape[1], 1 if r is None else r.shape[1]) for l, r in fm.blocks(x)[0]]
    assert 4 * sum(a + b for a, b in n_blocks_dims) < sum(a * b for a, b in n_blocks_dims)  # Gram route taken
    if kind == "unconditional":
        w = torch.full((4, 1), 1 / 4, dtype=torch.float64)
    else:
        w = torch.nn.functional.one_hot(y, 4).double() / 4
        if kind == "weighted":
            w = w * torch.tensor([0.5, 2.0, 1.5, 3.0], dtype=torch.float64)
    xr, yr = _data(n=30, seed=9)
    target = fm.generic(xr).T @ (torch.nn.functional.one_hot(yr, 4).double() / 30)[:, :w.shape[1]] + 0.003
    _assert_same_loss_and_gradient(lambda xg: fm.mmd_loss(target, xg, w),
                                   lambda xg: ((target - fm.generic(xg).T @ w) ** 2).sum(), x, rel=1e-9)
    # a new target (same feature map) is not served from the cached transposed target
    target2 = target * 2
    assert fm.mmd_loss(target2, x, w).item() == pytest.approx(((target2 - fm.generic(x).T @ w) ** 2).sum().item(),
                                                               rel=1e-9)


def test_entk_release_has_sensitivity_two_over_m_and_spec_rebuilds():
    fm = ENTKFeatures(12, "fc_1l", (8,), n_outputs=4, seed=0)
    x, y = _data(n=50)
    rel = release_mean_embedding(fm, x.float(), y, epsilon=1, delta=1e-5, n_classes=4, seed=0)
    assert rel.tensors["embedding"].shape == (fm.out_dim, 4)
    assert rel.ledger.entries[0].sensitivity == pytest.approx(2 / 50)
    again = build_feature_map(rel.feature_spec)
    assert torch.equal(again.generic(x[:3].float()), fm.generic(x[:3].float()))
    # neighbouring datasets: embeddings differ by at most 2/m
    mu = mean_embedding(fm, x.float(), y, 4)
    x2, y2 = x.clone(), y.clone()
    x2[7], y2[7] = 5 * torch.randn(12, dtype=torch.float64), (y[7] + 1) % 4
    assert (mu - mean_embedding(fm, x2.float(), y2, 4)).norm() <= 2 / 50 + 1e-9


def test_bad_architecture_arguments():
    with pytest.raises(UnknownNameError, match="unknown NTK architecture 'resnet'"):
        ENTKFeatures(12, "resnet", (8,))
    with pytest.raises(InvalidParameterError, match="arch 'fc_2l' takes 2 positive width"):
        ENTKFeatures(12, "fc_2l", (8,))
    with pytest.raises(InvalidParameterError, match="arch 'cnn' is for 3x32x32 images"):
        ENTKFeatures(12, "cnn", (8,))


def test_batches_are_memory_bounded_and_do_not_change_the_embedding():
    mnist = ENTKFeatures(784, "fc_1l", (800,), n_outputs=10)
    cervical = ENTKFeatures(56, "cnn_2l", (800, 1000), n_outputs=2)
    assert mnist.batch_rows() == 96 * 2**20 // (4 * (2 * 784 + 4 * 800))          # about 5,000 images
    assert cervical.batch_rows() == 96 * 2**20 // (4 * (4 * 800 * 56 + 4 * 1000 + 2 * 56))  # 137 rows
    fm = ENTKFeatures(12, "fc_1l", (16,), n_outputs=4, seed=2)
    x, y = _data(n=150)
    one = mean_embedding(fm, x.float(), y, 4, batch_size=150)
    assert torch.allclose(mean_embedding(fm, x.float(), y, 4), one, atol=1e-7)
    assert torch.allclose(mean_embedding(fm, x.float(), y, 4, batch_size=7), one, atol=1e-7)


@pytest.mark.parametrize("arch,widths", [("fc_1l", (16,)), ("fc_2l", (16, 8)), ("cnn_2l", (3, 8))])
def test_release_route_sums_match_the_generic_features(arch, widths):
    """``class_sums`` (records sorted by class, chunked, accumulated in place) gives the sums
    of the materialised generic features: class-conditional with an empty class, chunks that
    straddle nothing and chunks of 7, and unconditional."""
    fm = _double(ENTKFeatures(12, arch, widths, n_outputs=5, seed=4))
    x, y = _data(n=40, classes=4)                                  # class 4 of 5 has no record
    phi = fm.generic(x)
    expected = torch.nn.functional.one_hot(y, 5).double().T @ phi
    for rows in (None, 7):
        got = fm.class_sums(x, y, 5, batch_size=rows)
        assert got.shape == (5, fm.out_dim) and got.dtype == torch.float64
        assert torch.allclose(got, expected, rtol=2e-6, atol=1e-10)   # rtol: the 1 - 2^-20 shrink
        assert torch.equal(got[4], torch.zeros(fm.out_dim, dtype=torch.float64))
    assert torch.allclose(fm.class_sums(x, None, batch_size=7)[0], phi.sum(0), rtol=2e-6, atol=1e-10)
    # and mean_embedding is those sums over the public m, in the (D, C) layout
    assert torch.allclose(mean_embedding(fm, x, y, 5), expected.T / 40, atol=1e-12)


@pytest.mark.parametrize("arch,widths", [("fc_1l", (16,)), ("fc_2l", (16, 8)), ("cnn_2l", (3, 8))])
def test_each_released_record_has_norm_at_most_one(arch, widths):
    """The shrink factor on the release route's inverse norms must keep every record's released
    feature at norm <= 1 (the 2/m sensitivity), over inputs from 1e-3 to 1e3."""
    fm = ENTKFeatures(12, arch, widths, n_outputs=5, seed=4)
    x = torch.randn(400, 12, generator=torch.Generator().manual_seed(1)) * torch.logspace(-3, 3, 400)[:, None]
    norms = torch.stack([fm.class_sums(x[i:i + 1], None)[0].norm() for i in range(400)])
    assert float(norms.max()) <= 1.0
    assert float(norms.min()) > 1 - 1e-5                     # and the shrink costs nothing visible


@pytest.mark.parametrize("arch,widths", [("fc_1l", (800,)), ("fc_2l", (800, 400))])
def test_chunks_of_one_shape_make_records_bit_identical_wherever_they_sit(arch, widths):
    """The assumption the release route rests on: in chunks of the same shape (the release's 2,048 rows, with
    the release's two threads), a record's float32 blocks do not depend on its position or on the other rows
    (a neighbour shifts records by one)."""
    fm = ENTKFeatures(784, arch, widths, n_outputs=10, seed=0)
    rows = fm.CHUNK_ROWS
    x = torch.rand(rows + 1, 784, generator=torch.Generator().manual_seed(0))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        a, _ = fm.blocks(x[:rows])
        b, _ = fm.blocks(torch.cat([x[rows:], x[:rows - 1]]))
    finally:
        torch.set_num_threads(threads)
    for (la, ra), (lb, rb) in zip(a, b):
        assert torch.equal(la[:rows - 1], lb[1:]) and (ra is None or torch.equal(ra[:rows - 1], rb[1:]))


def test_worst_case_neighbour_moves_the_sums_by_exactly_its_own_features():
    """D and D' differ in one record's image and label, so the class runs of two classes shift and
    their last chunk changes size: the difference of the released sums is that record's two
    features to within float64 rounding, far inside 1 % of the sensitivity 2 (the derived bound:
    (rows + chunks) 2^-53 per unit of summed norm, 2 n units)."""
    fm = ENTKFeatures(784, "fc_1l", (800,), n_outputs=10, seed=0)
    g = torch.Generator().manual_seed(1)
    n, rows = 3000, 512
    x, y = torch.rand(n, 784, generator=g), torch.randint(0, 10, (n,), generator=g)
    x2, y2 = x.clone(), y.clone()
    x2[0], y2[0] = 3 * torch.rand(784, generator=g), (y[0] + 1) % 10
    diff = fm.class_sums(x, y, 10, batch_size=rows) - fm.class_sums(x2, y2, 10, batch_size=rows)
    own = torch.zeros_like(diff)
    own[y[0]] += fm.released_feature(x[:rows])
    own[y2[0]] -= fm.released_feature(x2[:rows])
    bound = (rows + n // rows + 1) * 2.0 ** -53 * 2 * n
    error = float((diff - own).norm())
    assert error <= bound < 0.01 * 2
