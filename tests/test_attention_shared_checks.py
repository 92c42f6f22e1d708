"""The checks and defaults every attention kernel shares, written once: check_qkv names its caller, one
1/sqrt(E) default (E = 0 included), one check_int wording, one size parser for the factories."""
import math

import numpy as np
import pytest

import minigrad as mg
from attention import (fixed_attention, linear_attention, memory_efficient_attention, scaled_dot_product_attention,
                       sliding_window_attention)
from attention.functional import default_scale
from attention.scores import scaled_dot_score

KERNELS = {"scaled_dot_product_attention": scaled_dot_product_attention,
           "memory_efficient_attention": memory_efficient_attention,
           "sliding_window_attention": lambda q, k, v: sliding_window_attention(q, k, v, 1),
           "fixed_attention": lambda q, k, v: fixed_attention(q, k, v, 2),
           "linear_attention": linear_attention}


def _t(*shape, dtype=np.float64):
    return mg.tensor(np.random.default_rng(0).standard_normal(shape).astype(dtype))


@pytest.mark.parametrize("who", sorted(KERNELS))
def test_check_qkv_names_the_kernel_called(who):
    f = KERNELS[who]
    with pytest.raises(ValueError, match=rf"^{who}: query \(\.\.\., L, E\) and key \(\.\.\., S, E\) must share E"):
        f(_t(4, 3), _t(4, 2), _t(4, 2))
    with pytest.raises(TypeError, match=rf"^{who}: query, key and value must share a dtype"):
        f(_t(4, 3), _t(4, 3, dtype=np.float32), _t(4, 3))
    with pytest.raises(ValueError, match=rf"^{who}: value must be \(\.\.\., N, E\), got shape \(4,\)"):
        f(_t(4, 3), _t(4, 3), _t(4))


def test_one_default_scale_and_e_zero_gives_uniform_weights():
    assert default_scale(16) == 0.25 and default_scale(0) == 1.0
    q, k, v = _t(2, 5, 8), _t(2, 5, 8), _t(2, 5, 3)
    dense = scaled_dot_product_attention(q, k, v).data
    by_hand = (q.data @ np.swapaxes(k.data, -1, -2)) / math.sqrt(8)
    np.testing.assert_allclose(scaled_dot_score(q, k).data, by_hand, rtol=1e-14)
    np.testing.assert_allclose(memory_efficient_attention(q, k, v, chunk_size=2).data, dense, rtol=1e-12)
    np.testing.assert_allclose(sliding_window_attention(q, k, v, 4).data, dense, rtol=1e-12)
    # E = 0: every score is an empty sum, 0, so each query averages the values (sliding windows used to divide by 0)
    q0, k0 = _t(2, 5, 0), _t(2, 5, 0)
    mean = np.broadcast_to(v.data.mean(axis=-2, keepdims=True), (2, 5, 3))
    for out in (scaled_dot_product_attention(q0, k0, v), memory_efficient_attention(q0, k0, v),
                sliding_window_attention(q0, k0, v, 4), fixed_attention(q0, k0, v, 5, causal=False)):
        np.testing.assert_allclose(out.data, mean, rtol=1e-12)
    assert np.all(scaled_dot_score(q0, k0).data == 0)


def test_one_check_int_wording_across_the_package():
    from attention import KVCache, MultiHeadAttention, TransformerEncoder, TransformerEncoderLayer
    from attention.tasks.recall import Recall, pooling_regression
    from attention.tasks.sequences import SequenceTask
    cases = [(lambda: memory_efficient_attention(_t(2, 2), _t(2, 2), _t(2, 2), chunk_size=0),
              "memory_efficient_attention: chunk_size must be an integer >= 1, got 0"),
             (lambda: KVCache(max_len=True), "KVCache: max_len must be an integer >= 1, got True"),
             (lambda: Recall(n_pairs=2.0), "Recall: n_pairs must be an integer >= 1, got 2.0"),
             (lambda: pooling_regression(1, 5), "pooling_regression: n_train must be an integer >= 2, got 1"),
             (lambda: SequenceTask(tokens=1), "SequenceTask: tokens must be an integer >= 2, got 1"),
             (lambda: TransformerEncoder(TransformerEncoderLayer(8, 2), -1),
              "TransformerEncoder: num_layers must be an integer >= 1, got -1"),
             (lambda: sliding_window_attention(_t(2, 2), _t(2, 2), _t(2, 2), 1, dilation=0),
              "sliding_window_attention: dilation must be an integer >= 1, got 0")]
    for make, message in cases:
        with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
            make()
    assert MultiHeadAttention(8, 2, attention="efficient", chunk_size=3).chunk_size == 3


def test_one_size_parser_for_the_factories():
    assert mg.zeros(2, 3).shape == mg.zeros((2, 3)).shape == mg.ones([2, 3]).shape == (2, 3)
    assert mg.full(4, 1.0).shape == (4,) and mg.zeros().shape == ()
    for f, name in ((mg.zeros, "zeros"), (mg.ones, "ones")):
        with pytest.raises(ValueError, match=rf"^{name}: size must be non-negative ints, got \(2, -1\)$"):
            f(2, -1)
        with pytest.raises(ValueError, match=rf"^{name}: size must be non-negative ints, got \(2.5,\)$"):
            f(2.5)
    with pytest.raises(ValueError, match=r"^full: size must be non-negative ints, got \(True,\)$"):
        mg.full((True,), 0.0)
