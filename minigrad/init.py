"""torch.nn.init's names for the in-place initialisers defined in nn.py, so `nn.init.xavier_uniform_(w)` works."""
from .nn import (kaiming_normal_, kaiming_uniform_, normal_, ones_, uniform_, xavier_normal_,  # noqa: F401
                 xavier_uniform_, zeros_)
