"""DP-KIP on real data: digits utility with noise visibly on, one MNIST epoch through the factored
gradient (slow)."""
import math

import pytest

from mmdsynth import DPKIP, load_dataset

from support import KIP_TINY


@pytest.mark.slow
def test_digits_utility_beats_chance_and_noise_is_not_disabled(digits):
    """eps=1 far above chance; no noise (eps=inf) measurably above eps=0.1, which stays low. Under the
    add/remove accounting these bounds were set for (eps 1: 0.56-0.60 over 6 runs); at the replace-one
    default, which needs 1.67x the noise, eps 1 measured 0.40-0.45, too close to 0.4 for a stable test."""
    kw = dict(KIP_TINY, images_per_class=5, epochs=10, neighbouring="add_remove")
    acc = {eps: DPKIP(eps, 1e-5, **kw).fit(digits.x_train.numpy(), digits.y_train.numpy())
           .krr_accuracy(digits.x_test, digits.y_test.numpy()) for eps in (0.1, 1.0, math.inf)}
    assert acc[1.0] > 0.4
    assert acc[math.inf] > 0.85 and acc[math.inf] > acc[0.1] + 0.3
    assert acc[0.1] < 0.5


@pytest.mark.slow
def test_one_mnist_epoch_learns_through_the_factored_gradient():
    """Real data, the default (factored) path: one epoch at eps 10 from N(0, I) is far above chance
    (measured 0.721 / 0.727 for seeds 0 / 1 on the first 2,000 test images)."""
    mnist = load_dataset("mnist")
    m = DPKIP(10.0, 1e-5, n_classes=10, images_per_class=10, epochs=1, batch_size=500, lr=1e-2, clip=1e-2,
              reg=1e-6, seed=0, start="noise").fit(mnist.x_train.numpy(), mnist.y_train.numpy(), dataset="mnist")
    assert m.krr_accuracy(mnist.x_test[:2000], mnist.y_test[:2000].numpy()) > 0.6
    assert m.release_.ledger.entries[0].plan["steps"] == 120
