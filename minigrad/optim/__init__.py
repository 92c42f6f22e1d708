"""Optimizers (one file each: the update rule is the file) and learning-rate schedules, as torch.optim."""
from ..nn.utils import clip_grad_norm_  # noqa: F401  (torch.nn.utils' name; optim.clip_grad_norm_ as before)
from . import lr_scheduler  # noqa: F401
from .adagrad import Adagrad  # noqa: F401
from .adam import Adam, AdamW  # noqa: F401
from .lr_scheduler import (CosineAnnealingLR, ExponentialLR, LambdaLR, LRScheduler, OneCycleLR,  # noqa: F401
                           StepLR, WarmupCosine)
from .optimizer import Optimizer  # noqa: F401
from .rmsprop import RMSprop  # noqa: F401
from .sgd import SGD  # noqa: F401
