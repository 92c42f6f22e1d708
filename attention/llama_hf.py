"""Hugging Face's LlamaForCausalLM <-> DecoderLM (llama.py): the state dict renamed and restacked, and the config
translated, with no import of transformers or torch (values may be torch tensors, NumPy arrays or Tensors in;
NumPy arrays come out: wrap them with torch.from_numpy to load them there).
"""
import re

import numpy as np

from minigrad import Tensor

__all__ = ("from_hf_llama", "to_hf_llama", "hf_llama_config", "decoder_lm_kwargs")

# Hugging Face key (LlamaForCausalLM.state_dict())       shape          key here (DecoderLM.state_dict())
# model.embed_tokens.weight                               (V, C)         embed_tokens.weight
# model.layers.{i}.input_layernorm.weight                 (C,)           layers.{i}.attn_norm.weight
# model.layers.{i}.self_attn.q_proj.weight                (H D, C)     \
# model.layers.{i}.self_attn.k_proj.weight                (H_kv D, C)   > layers.{i}.self_attn.in_proj_weight,
# model.layers.{i}.self_attn.v_proj.weight                (H_kv D, C)  /  their rows stacked q, k, v (torch's MHA)
# model.layers.{i}.self_attn.o_proj.weight                (C, H D)       layers.{i}.self_attn.out_proj.weight
# model.layers.{i}.post_attention_layernorm.weight        (C,)           layers.{i}.mlp_norm.weight
# model.layers.{i}.mlp.{gate,up}_proj.weight              (F, C)         layers.{i}.mlp.{gate,up}_proj.weight
# model.layers.{i}.mlp.down_proj.weight                   (C, F)         layers.{i}.mlp.down_proj.weight
# model.norm.weight                                       (C,)           norm.weight
# lm_head.weight                                          (V, C)         lm_head.weight
# A checkpoint saved with tied embeddings may leave lm_head.weight out: it is the embedding's matrix then.
# Rotary buffers (inv_freq, in older versions' state dicts) are skipped: the angles are recomputed here.
#
# The q/k layout. Hugging Face's Llama rotates feature i of a head with feature i + D/2 (rotate_half, the
# "half" layout); Meta's original code rotated pairs (2i, 2i+1) as complex numbers, and HF's conversion script
# permuted the q and k rows of Meta's checkpoints into the half layout. DecoderLM's default,
# rotary_layout="half", is HF's layout: the rows load unchanged. For a DecoderLM(rotary_layout="interleaved")
# the q and k rows of every head are permuted (layout="interleaved", head_dim=D): its row 2i is HF's row i and
# its row 2i+1 is HF's row i + D/2. That moves each rotated pair next to itself; q and k move alike, so every
# score, and so the model, is unchanged (a test runs both). v, o and the MLP never see the rotation.

_LAYER = (  # (Hugging Face's name inside model.layers.{i}, ours inside layers.{i}); q, k, v are stacked apart
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.o_proj.weight", "self_attn.out_proj.weight"),
    ("post_attention_layernorm.weight", "mlp_norm.weight"),
    ("mlp.gate_proj.weight", "mlp.gate_proj.weight"),
    ("mlp.up_proj.weight", "mlp.up_proj.weight"),
    ("mlp.down_proj.weight", "mlp.down_proj.weight"),
)
_QKV = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight")
_IN_PROJ = "self_attn.in_proj_weight"
_SKIPPED = re.compile(r"(^|\.)rotary_emb\.(inv_freq|original_inv_freq)$")


def _array(key, v):
    """A state dict value as a float ndarray: a torch tensor (detached, on the CPU), an array or a Tensor."""
    if isinstance(v, Tensor):
        v = v.data
    elif hasattr(v, "detach") and hasattr(v, "cpu"):  # a torch tensor, without importing torch
        v = v.detach().cpu().numpy()
    a = np.asarray(v)
    if a.dtype.kind != "f":
        raise TypeError(f"'{key}': floating weights expected, got dtype {a.dtype}")
    return a


def _split_keys(state_dict, prefix, who):
    """{layer index: {name inside the layer: value}}, {other key: value}; layer indices must run 0..N-1."""
    layers, rest = {}, {}
    pat = re.compile(re.escape(prefix) + r"(\d+)\.(.+)$")
    for k, v in state_dict.items():
        if _SKIPPED.search(k):
            continue
        m = pat.match(k)
        if m:
            layers.setdefault(int(m.group(1)), {})[m.group(2)] = _array(k, v)
        else:
            rest[k] = _array(k, v)
    if not layers:
        raise KeyError(f"{who}: no '{prefix}{{i}}.' keys: not a Llama state dict (keys: {list(state_dict)[:8]} ...)")
    if sorted(layers) != list(range(len(layers))):
        raise KeyError(f"{who}: layer indices must run 0..{len(layers) - 1}, got {sorted(layers)}")
    return layers, rest


def _check_keys(who, got, expected):
    missing = [k for k in expected if k not in got]
    unexpected = [k for k in got if k not in expected]
    if missing or unexpected:
        raise KeyError(f"{who}: " + "; ".join(f"{what} keys {keys}" for what, keys in (("missing", missing),
                                                                                      ("unexpected", unexpected))
                                             if keys))


def _check_shape(who, key, a, shape):
    if a.shape != tuple(shape):
        raise ValueError(f"{who}: '{key}' must have shape {tuple(shape)}, got {a.shape}")


def _relayout(w, layout, head_dim, inverse, who):
    """A (n D, C) q or k projection with its rows taken from the half layout to `layout` (or back, inverse)."""
    if layout not in ("half", "interleaved"):
        raise ValueError(f"{who}: layout must be 'half' or 'interleaved', got {layout!r}")
    if layout == "half":
        return w
    rows = w.shape[0]
    if isinstance(head_dim, bool) or not isinstance(head_dim, (int, np.integer)) or head_dim < 2 or head_dim % 2 \
            or rows % head_dim:
        raise ValueError(f"{who}: layout='interleaved' needs head_dim, an even divisor of the q and k rows ({rows}), "
                         f"got {head_dim!r}")
    n, h = rows // head_dim, head_dim // 2
    idx = np.arange(rows).reshape(n, 2, h).transpose(0, 2, 1).reshape(rows)  # interleaved row 2i <- half row i
    return w[np.argsort(idx) if inverse else idx]


def _layer_shapes(who, key, layer, names, C):
    """Check a layer's norms, output projection and MLP against the width C; names: _LAYER's, in the layer's own
    naming (Hugging Face's or ours). The hidden width F is the gate's."""
    F = layer[names[3]].shape[0]
    for name, shape in zip(names, ((C,), (C, C), (C,), (F, C), (F, C), (C, F))):  # _LAYER's order
        _check_shape(who, key + name, layer[name], shape)


def from_hf_llama(state_dict, layout="half", head_dim=None):
    """A Hugging Face LlamaForCausalLM state dict -> a DecoderLM state dict (load it with load_state_dict).

    layout: the DecoderLM's rotary_layout ("half", HF's own: no permutation; "interleaved" permutes the q and
    k rows of each head, and needs head_dim). Missing or unexpected keys and wrong shapes are errors naming them."""
    who = "from_hf_llama"
    layers, rest = _split_keys(state_dict, "model.layers.", who)
    rest = dict(rest)
    if "lm_head.weight" not in rest and "model.embed_tokens.weight" in rest:
        rest["lm_head.weight"] = rest["model.embed_tokens.weight"]      # a tied checkpoint
    _check_keys(who, rest, ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"])
    V, C = rest["model.embed_tokens.weight"].shape if rest["model.embed_tokens.weight"].ndim == 2 else (None, None)
    if C is None:
        raise ValueError(f"{who}: 'model.embed_tokens.weight' must be (vocab, hidden), "
                         f"got {rest['model.embed_tokens.weight'].shape}")
    out = {"embed_tokens.weight": rest["model.embed_tokens.weight"]}
    for i in range(len(layers)):
        hf, ours = f"model.layers.{i}.", f"layers.{i}."
        layer = layers[i]
        _check_keys(who, {hf + k: v for k, v in layer.items()}, [hf + k for k, _ in _LAYER] + [hf + k for k in _QKV])
        q, k, v = (layer[name] for name in _QKV)
        _check_shape(who, hf + _QKV[0], q, (C, C))   # here embed_dim = num_heads * head_dim = hidden
        if k.ndim != 2 or k.shape[1] != C or k.shape[0] > C:
            raise ValueError(f"{who}: '{hf}{_QKV[1]}' must be (num_kv_heads * head_dim, {C}), got {k.shape}")
        _check_shape(who, hf + _QKV[2], v, k.shape)
        _layer_shapes(who, hf, layer, [name for name, _ in _LAYER], C)
        q, k = (_relayout(w, layout, head_dim, False, who) for w in (q, k))
        out[ours + _IN_PROJ] = np.concatenate([q, k, v], axis=0)   # rows [0, C) q, then k, then v
        for name, here in _LAYER:
            out[ours + here] = layer[name]
    for key, here, shape in (("model.norm.weight", "norm.weight", (C,)), ("lm_head.weight", "lm_head.weight", (V, C))):
        _check_shape(who, key, rest[key], shape)
        out[here] = rest[key]
    return out


def to_hf_llama(state_dict, layout="half", head_dim=None):
    """A DecoderLM state dict -> a Hugging Face LlamaForCausalLM state dict of NumPy arrays (lm_head.weight
    always present, the embedding's when tied, as torch's state_dict gives it). layout / head_dim: the
    DecoderLM's rotary_layout, undone for HF's half layout as from_hf_llama does it."""
    who = "to_hf_llama"
    layers, rest = _split_keys(state_dict, "layers.", who)
    _check_keys(who, rest, ["embed_tokens.weight", "norm.weight", "lm_head.weight"])
    emb = rest["embed_tokens.weight"]
    if emb.ndim != 2:
        raise ValueError(f"{who}: 'embed_tokens.weight' must be (vocab, dim), got {emb.shape}")
    V, C = emb.shape
    out = {"model.embed_tokens.weight": emb}
    for i in range(len(layers)):
        ours, hf = f"layers.{i}.", f"model.layers.{i}."
        layer = layers[i]
        _check_keys(who, {ours + k: v for k, v in layer.items()}, [ours + h for _, h in _LAYER] + [ours + _IN_PROJ])
        w = layer[_IN_PROJ]
        if w.ndim != 2 or w.shape[1] != C or w.shape[0] <= C or (w.shape[0] - C) % 2:
            raise ValueError(f"{who}: '{ours}{_IN_PROJ}' must be ({C} + 2 * num_kv_heads * head_dim, {C}), "
                             f"got {w.shape}")
        KD = (w.shape[0] - C) // 2
        q, k, v = w[:C], w[C:C + KD], w[C + KD:]
        out[hf + _QKV[0]], out[hf + _QKV[1]] = (_relayout(a, layout, head_dim, True, who) for a in (q, k))
        out[hf + _QKV[2]] = v
        for name, here in _LAYER:
            out[hf + name] = layer[here]
        _layer_shapes(who, ours, layer, [here for _, here in _LAYER], C)
    for key, name, shape in (("norm.weight", "model.norm.weight", (C,)), ("lm_head.weight", "lm_head.weight", (V, C))):
        _check_shape(who, key, rest[key], shape)
        out[name] = rest[key]
    return out


def hf_llama_config(model):
    """The keyword arguments of transformers.LlamaConfig describing a DecoderLM (LlamaConfig(**them))."""
    blk = model.layers[0]
    attn = blk.self_attn
    return {"vocab_size": model.vocab_size, "hidden_size": attn.embed_dim,
            "intermediate_size": blk.mlp.gate_proj.out_features, "num_hidden_layers": len(model.layers),
            "num_attention_heads": attn.num_heads, "num_key_value_heads": attn.num_kv_heads,
            "head_dim": attn.head_dim, "rope_theta": attn.rotary.base, "rms_norm_eps": blk.attn_norm.eps,
            "tie_word_embeddings": model.tie_weights, "hidden_act": "silu", "attention_bias": False,
            "mlp_bias": False, "max_position_embeddings": model.max_seq_len or 2048,
            "bos_token_id": None, "eos_token_id": None}   # no special tokens here (HF's default eos would be id 2)


def decoder_lm_kwargs(config):
    """DecoderLM's keyword arguments from a Hugging Face Llama config (a LlamaConfig or its to_dict())."""
    get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
    rope = get("rope_parameters") or get("rope_scaling") or {}    # older versions: rope_theta beside rope_scaling
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        raise ValueError(f"decoder_lm_kwargs: only the default rotary embedding is built here, got rope type "
                         f"{kind!r} ({rope})")
    C, H = get("hidden_size"), get("num_attention_heads")
    if (get("head_dim") or C // H) * H != C:
        raise ValueError(f"decoder_lm_kwargs: head_dim ({get('head_dim')}) * num_attention_heads ({H}) must equal "
                         f"hidden_size ({C}) here")
    for flag in ("attention_bias", "mlp_bias"):
        if get(flag):
            raise ValueError(f"decoder_lm_kwargs: {flag}=True: a Llama here has no biases")
    if get("hidden_act", "silu") != "silu":
        raise ValueError(f"decoder_lm_kwargs: hidden_act must be 'silu' (SwiGLU), got {get('hidden_act')!r}")
    theta = rope.get("rope_theta", get("rope_theta", 10000.0))
    return {"vocab_size": get("vocab_size"), "dim": C, "num_layers": get("num_hidden_layers"), "num_heads": H,
            "num_kv_heads": get("num_key_value_heads") or H, "ffn_dim": get("intermediate_size"),
            "rope_base": float(theta), "norm_eps": float(get("rms_norm_eps")),
            "tie_weights": bool(get("tie_word_embeddings", False))}
