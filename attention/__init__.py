"""attention: the classic attention mechanisms on top of minigrad.

Read masks.py, scores.py, functional.py, multihead.py, transformer.py, seq2seq.py, luong.py (soft attention);
llama.py (a Llama block and a small decoder LM of them) and llama_hf.py (Hugging Face's Llama weights in and out);
local.py and efficient.py (restricted and memory-efficient attention); masks2d.py and local2d.py (2-D
windows and neighbourhoods over an image); vision.py (Swin and NATTEN layers, patch embedding, a small ViT);
positions.py (rotary, ALiBi), linear.py (linear attention), cache.py (KV cache for decoding); distributions.py,
hard.py, reinforce.py, glimpse/ (hard attention trained by REINFORCE); tasks/ holds the toy data sets, tokens.py
the ids they share.
"""
from .functional import masked_softmax, scaled_dot_product_attention  # noqa: F401
from .masks import (attended_pairs, causal_mask, fixed_mask, generate_square_subsequent_mask,  # noqa: F401
                    global_token_mask, key_padding_to_attn_mask, padding_mask_from_lengths, sliding_window_mask,
                    sliding_window_reference_mask, strided_mask)
from .multihead import MultiHeadAttention  # noqa: F401

# torch's spelling, the same class. Unlike torch.nn.MultiheadAttention it is batch-first (B, L, C) always, and a
# boolean attn_mask is True where a query MAY attend (torch: True = may NOT): pass ~torch_mask, or a float mask.
MultiheadAttention = MultiHeadAttention
from .scores import (SCORES, AdditiveScore, Attention, CosineScore, DotScore, GeneralScore, ScaledDotScore,  # noqa: F401
                     Score, dot_score, make_score, scaled_dot_score)
from .transformer import (LearnedPositionalEncoding, SinusoidalPositionalEncoding, TransformerDecoder,  # noqa: F401
                          TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer, sinusoidal_table)
from .seq2seq import Seq2Seq  # noqa: F401
from .llama import DecoderLM, LlamaBlock, SwiGLU  # noqa: F401
from .llama_hf import decoder_lm_kwargs, from_hf_llama, hf_llama_config, to_hf_llama  # noqa: F401
from .distributions import Categorical, Normal  # noqa: F401
from .hard import Rollout, fifty_percent_trick, gumbel_softmax, hard_attention, policy_input  # noqa: F401
from .reinforce import (MovingAverageBaseline, Trainer, ValueBaseline, hybrid_loss, make_baseline,  # noqa: F401
                        reinforce_loss)
from . import reinforce  # noqa: F401
from .local import fixed_attention, sliding_window_attention  # noqa: F401
from .luong import LocalScore, LuongLocalAttention  # noqa: F401
from .efficient import memory_efficient_attention  # noqa: F401
from .positions import RotaryEmbedding, alibi_bias, alibi_slopes, apply_rotary  # noqa: F401
from .linear import linear_attention  # noqa: F401
from .cache import KVCache  # noqa: F401
from .masks2d import neighborhood_bias_2d, neighborhood_mask_2d, window_bias_2d, window_mask_2d  # noqa: F401
from .local2d import (neighborhood_attention_2d, neighborhood_attention_2d_reference, window_attention_2d,  # noqa: F401
                      window_attention_2d_reference)
from .vision import (Mlp, NeighborhoodAttention2d, PatchEmbedding, PatchMerging, SwinBlock,  # noqa: F401
                     VisionTransformer, WindowAttention2d)
from . import double_backward  # noqa: F401  (the kernels' rules for create_graph=True)
from .glimpse import (HardGlimpseNet, PatchGrid, RecurrentAttentionModel, SoftGlimpseNet, conv2d,  # noqa: F401
                      glimpse_sensor)

# the package's API: the names above (modules excepted); each module's own __all__ says what it offers
__all__ = ("masked_softmax", "scaled_dot_product_attention", "attended_pairs", "causal_mask", "fixed_mask",
           "generate_square_subsequent_mask", "global_token_mask", "key_padding_to_attn_mask",
           "padding_mask_from_lengths", "sliding_window_mask", "sliding_window_reference_mask", "strided_mask",
           "MultiHeadAttention", "SCORES", "AdditiveScore", "Attention", "CosineScore", "DotScore", "GeneralScore",
           "ScaledDotScore", "Score", "dot_score", "make_score", "scaled_dot_score", "LearnedPositionalEncoding",
           "SinusoidalPositionalEncoding", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
           "TransformerEncoderLayer", "sinusoidal_table", "Seq2Seq", "Categorical", "Normal", "Rollout",
           "fifty_percent_trick", "gumbel_softmax", "hard_attention", "policy_input", "MovingAverageBaseline",
           "Trainer", "ValueBaseline", "hybrid_loss", "make_baseline", "reinforce_loss", "fixed_attention",
           "sliding_window_attention", "LocalScore", "LuongLocalAttention", "memory_efficient_attention",
           "RotaryEmbedding", "alibi_bias", "alibi_slopes", "apply_rotary", "linear_attention", "KVCache",
           "HardGlimpseNet", "PatchGrid", "RecurrentAttentionModel", "SoftGlimpseNet", "conv2d", "glimpse_sensor",
           "neighborhood_bias_2d", "neighborhood_mask_2d", "window_bias_2d", "window_mask_2d",
           "neighborhood_attention_2d", "neighborhood_attention_2d_reference", "window_attention_2d",
           "window_attention_2d_reference", "Mlp", "NeighborhoodAttention2d", "PatchEmbedding", "PatchMerging",
           "SwinBlock", "VisionTransformer", "WindowAttention2d",
           "DecoderLM", "LlamaBlock", "SwiGLU", "decoder_lm_kwargs", "from_hf_llama", "hf_llama_config", "to_hf_llama")
