"""The attention package's split: the old import paths still resolve to the moved names. (Circles, upward
imports and file sizes: tests/test_layout.py.)"""
import importlib

import attention


def test_old_paths_resolve_to_the_moved_names():
    from attention import glimpse, hard, local, luong, masks, reinforce, tasks, tokens
    for n in ("sliding_window_mask", "global_token_mask", "strided_mask", "fixed_mask", "attended_pairs",
              "sliding_window_reference_mask"):
        assert getattr(local, n) is getattr(masks, n)
    for n in ("LocalScore", "LuongLocalAttention"):
        assert getattr(attention, n) is getattr(luong, n)
    assert reinforce.Rollout is hard.Rollout is attention.Rollout
    assert (tasks.PAD, tasks.BOS, tasks.EOS, tasks.FIRST_TOKEN) == (tokens.PAD, tokens.BOS, tokens.EOS,
                                                                    tokens.FIRST_TOKEN) == (0, 1, 2, 3)
    for n in ("Conv2d", "conv2d", "glimpse_sensor", "extract_patches", "avg_pool", "loc_to_pixels", "PatchGrid",
              "GlimpseClassifier", "GistPolicy", "HardGlimpseNet", "SoftGlimpseNet", "SpatialLocationHead",
              "RecurrentAttentionModel"):
        obj = getattr(glimpse, n)
        assert getattr(importlib.import_module(obj.__module__), n) is obj
