"""ALiBi's head slopes for any number of heads: Press et al.'s rule, which BLOOM, MPT and Hugging Face follow."""
import math

import numpy as np
import pytest

from attention import alibi_bias, alibi_slopes


def paper_rule(n):
    """The paper's rule as its text states it, recursively: a power of two n gives the geometric sequence
    starting at 2^(-8/n) with that ratio; otherwise the closest power of two below n, then every other slope of
    the rule for twice that power, as many as are missing."""
    if n & (n - 1) == 0:
        start = 2.0 ** (-8.0 / n)
        return [start * start ** i for i in range(n)]
    p = 2 ** math.floor(math.log2(n))
    return paper_rule(p) + paper_rule(2 * p)[0::2][:n - p]


@pytest.mark.parametrize("H", list(range(1, 33)) + [40, 48, 96, 100])
def test_slopes_follow_the_papers_rule_for_every_head_count(H):
    np.testing.assert_allclose(alibi_slopes(H), paper_rule(H), rtol=1e-14, atol=0)


def test_slopes_for_heads_not_a_power_of_two_are_the_papers_numbers():
    """Exact values of the rule, torch-free: 6 heads are 4's slopes then 8's first and third."""
    np.testing.assert_array_equal(alibi_slopes(6), [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3])
    np.testing.assert_array_equal(alibi_slopes(3), [2 ** -4, 2 ** -8, 2 ** -2])
    np.testing.assert_allclose(alibi_slopes(12), [2.0 ** -h for h in range(1, 9)] + [2 ** -0.5, 2 ** -1.5,
                                                                                       2 ** -2.5, 2 ** -3.5],
                               rtol=1e-15)
    for H in (1, 2, 4, 8, 16, 64):  # powers of two: the geometric sequence 2^(-8h/H), as before
        np.testing.assert_array_equal(alibi_slopes(H), 2.0 ** (-8.0 * np.arange(1, H + 1) / H))
    b = alibi_bias(6, 3, 3)  # the bias uses them: head h's -slope_h * (i - j)
    np.testing.assert_array_equal(b[:, 2, 0], -2 * alibi_slopes(6))


def test_slopes_match_bloom_in_hugging_face():
    torch = pytest.importorskip("torch")
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    for H in (3, 5, 6, 12, 20, 32, 40):
        # BLOOM's bias for a 2-token all-ones mask: slope * position, so position 1 is the slope (float32 there)
        slopes = bloom.build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), H, torch.float64)[:, 0, 1].numpy()
        np.testing.assert_allclose(alibi_slopes(H), slopes, rtol=1e-6)
