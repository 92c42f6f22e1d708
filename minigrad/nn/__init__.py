"""The torch.nn-shaped namespace: Module and Parameter, the layers, the loss modules, init and functional.

    module.py      Module, Parameter, ModuleList, Sequential, ModuleDict
    layers.py      Linear, Embedding, LayerNorm, Dropout, ReLU, Tanh, Sigmoid, GELU, Softmax
    rnn.py         GRUCell, LSTMCell, GRU, LSTM
    loss.py        CrossEntropyLoss, MSELoss, ... (the modules; the functions are in functional.py)
    init.py        the in-place initialisers, as torch.nn.init
    functional.py  activations, dropout, one_hot and every loss function (what a PyTorch user imports as F)
"""
from ..tools.serialization import load, save  # noqa: F401  (nn.save / nn.load, beside minigrad.save / load)
from . import functional, init  # noqa: F401
from .init import (kaiming_normal_, kaiming_uniform_, normal_, ones_, uniform_, xavier_normal_,  # noqa: F401
                   xavier_uniform_, zeros_)
from .layers import GELU, Dropout, Embedding, LayerNorm, Linear, ReLU, Sigmoid, Softmax, Tanh  # noqa: F401
from .loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, KLDivLoss, L1Loss,  # noqa: F401
                   MSELoss, NLLLoss, SmoothL1Loss)
from .module import Module, ModuleDict, ModuleList, Parameter, Sequential, parameter  # noqa: F401
from .rnn import GRU, LSTM, GRUCell, LSTMCell  # noqa: F401
