"""The torch.nn-shaped namespace: Module and Parameter, the layers, the loss modules, init and functional.

    module.py      Module, Parameter, ModuleList, Sequential, ModuleDict
    layers.py      Linear, Embedding, LayerNorm, RMSNorm, Dropout, ReLU, Tanh, Sigmoid, GELU, Softmax
    conv.py        conv2d, max_pool2d, avg_pool2d (also in functional) and Conv2d, MaxPool2d, AvgPool2d
    rnn.py         GRUCell, LSTMCell, GRU, LSTM
    loss.py        CrossEntropyLoss, MSELoss, ... (the modules; the functions are in functional.py)
    init.py        the in-place initialisers, as torch.nn.init (also here by name: nn.xavier_uniform_)
    functional.py  activations, dropout, one_hot and every loss function (what a PyTorch user imports as F)
    utils.py       clip_grad_norm_, clip_grad_value_, parameters_to_vector, vector_to_parameters (nn.utils)
Each file names what it exports in `__all__`.
"""
from ..tools.serialization import load, save  # noqa: F401  (nn.save / nn.load, beside minigrad.save / load)
from . import functional, init, utils  # noqa: F401
from .conv import AvgPool2d, Conv2d, MaxPool2d  # noqa: F401
from .init import *  # noqa: F401,F403
from .layers import *  # noqa: F401,F403
from .loss import *  # noqa: F401,F403
from .module import *  # noqa: F401,F403
from .rnn import *  # noqa: F401,F403


def __getattr__(name):
    """nn.MultiheadAttention: the attention package holds it (minigrad never imports attention); say where."""
    if name == "MultiheadAttention":
        raise AttributeError("minigrad.nn has no MultiheadAttention: it is in the attention package, which builds on "
                             "minigrad: `from attention import MultiheadAttention` (torch's spelling of "
                             "attention.MultiHeadAttention; batch-first, and a boolean attn_mask is True where a query "
                             "MAY attend, the opposite of torch's)")
    raise AttributeError(f"module 'minigrad.nn' has no attribute {name!r}")
