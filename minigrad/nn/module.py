"""Module: parameters and submodules found by dotted name, state dicts, train/eval; and the containers.

Names and behaviour follow torch.nn.Module (torch/nn/modules/module.py and container.py), so weights move
between the two.
"""
from collections import OrderedDict

import numpy as np

from ..dtypes import get_default_dtype
from ..ops import data_of
from ..tensor import Tensor
from . import hooks as _hooks

__all__ = ("Parameter", "parameter", "Module", "ModuleList", "Sequential", "ModuleDict")


class Parameter(Tensor):
    """A Tensor that a Module registers as trainable (requires_grad=True)."""

    __slots__ = ()

    def __init__(self, data, requires_grad=True):
        data = data.data if isinstance(data, Tensor) else data
        super().__init__(np.array(data, dtype=data.dtype if isinstance(data, np.ndarray) and data.dtype.kind == "f"
                                  else get_default_dtype()), requires_grad=requires_grad)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


def parameter(*shape):
    """A Parameter of zeros in the default float dtype, for an init helper to fill."""
    return Parameter(np.zeros(shape, get_default_dtype()))


class Module:
    """Base class: assign Parameters and Modules as attributes; they are found by name, in order."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() before assigning attributes")
        buffer = name in self._buffers and not isinstance(value, (Parameter, Module))  # stays a buffer, as torch
        if name in self._parameters and value is not None and not isinstance(value, Parameter):
            raise TypeError(f"{type(self).__name__}: cannot assign {type(value).__name__} to parameter '{name}' "
                            f"(a Parameter or None expected; to change its values, set .data)")
        for d in (self._parameters, self._modules, self._buffers):
            d.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        elif buffer:
            self._buffers[name] = name
        object.__setattr__(self, name, value)

    def register_buffer(self, name, array):
        """A non-trainable array that belongs in the state dict (e.g. a positional table)."""
        object.__setattr__(self, name, array)
        self._buffers[name] = name

    def forward(self, *args, **kwargs):
        """The module's computation; a subclass defines it and module(...) calls it (here: a TypeError)."""
        raise TypeError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        if _hooks._count[0]:  # some module has a hook (nn/hooks.py); otherwise the plain call
            return _hooks.call(self, args, kwargs)
        return self.forward(*args, **kwargs)

    # ---- hooks (torch's names and semantics; nn/hooks.py) ------------------------------------------
    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """hook(module, args) runs before forward and may return new args; returns a removable handle."""
        return _hooks.register(self, "forward_pre_hook", hook, prepend, with_kwargs)

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False):
        """hook(module, args, output) runs after forward and may return a new output; returns a handle."""
        return _hooks.register(self, "forward_hook", hook, prepend, with_kwargs)

    def register_full_backward_hook(self, hook, prepend=False):
        """hook(module, grad_input, grad_output) runs when the gradients for the module's inputs are known and
        may return a new grad_input; returns a removable handle."""
        return _hooks.register(self, "full_backward_hook", hook, prepend)

    # ---- traversal ---------------------------------------------------------------------------
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """(dotted name, module) pairs, self first; a module reachable twice is listed once (as torch)."""
        if remove_duplicate:
            memo = set() if memo is None else memo
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self):
        """Every module in the tree, self first, each once (as torch's modules())."""
        return (m for _, m in self.named_modules())

    def children(self):
        """The direct submodules, each once."""
        return (m for _, m in self.named_children())

    def named_parameters(self, prefix="", remove_duplicate=True):
        """(dotted name, Parameter) pairs, as torch.nn.Module: each parameter once, under its first name,
        or (remove_duplicate=False) under every name it is reachable by (tied weights)."""
        seen = set()
        for mprefix, m in self.named_modules(prefix=prefix, remove_duplicate=False):
            for name, p in m._parameters.items():
                if p is not None and (not remove_duplicate or id(p) not in seen):
                    seen.add(id(p))
                    yield (f"{mprefix}.{name}" if mprefix else name), p

    def parameters(self):
        """A list of every Parameter in the tree, each once, in named_parameters order."""
        return [p for _, p in self.named_parameters()]

    def zero_grad(self, set_to_none=True):
        """Drop every parameter's gradient (set_to_none=False: fill it with zeros in place, as torch)."""
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad[...] = 0

    def train(self, mode=True):
        """Set training mode (mode=False: eval mode) on self and every submodule; returns self."""
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        """Set evaluation mode (e.g. Dropout off) on every module; same as train(False); returns self."""
        return self.train(False)

    def num_parameters(self):
        """The total number of scalar entries over all parameters (each tied parameter once)."""
        return sum(p.size for p in self.parameters())

    # ---- PyTorch's module utilities ---------------------------------------------------------------
    def named_children(self):
        """(name, module) pairs of the direct submodules; one reachable under two names is listed once."""
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def apply(self, fn):
        """Call fn(m) on every submodule, children first, then on self (as torch); returns self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def requires_grad_(self, requires_grad=True):
        """Switch gradient tracking on or off for every parameter (e.g. to freeze a part); returns self."""
        for p in self.parameters():
            p.requires_grad = bool(requires_grad)
        return self

    def to(self, dtype):
        """Cast every parameter and float buffer to a float dtype, in place (the Parameter objects stay the
        same, so an optimizer built before still holds them); 'cpu' changes nothing. Returns self."""
        if isinstance(dtype, str) and dtype == "cpu":
            return self
        try:
            dt = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"{type(self).__name__}.to: a float dtype (or 'cpu') expected, got {dtype!r}") from None
        if dt not in (np.float32, np.float64):
            raise TypeError(f"{type(self).__name__}.to: float32 or float64 expected, got {dt}")
        for p in self.parameters():
            p.data = p.data.astype(dt)
            if p.grad is not None:
                p.grad = p.grad.astype(dt)
        for _, m, attr in self._named_buffers():
            old = getattr(m, attr)
            arr = data_of(old)
            if isinstance(arr, np.ndarray) and arr.dtype.kind == "f":
                object.__setattr__(m, attr, Tensor(arr.astype(dt)) if isinstance(old, Tensor) else arr.astype(dt))
        return self

    def double(self):
        """Cast parameters and float buffers to float64 (see to)."""
        return self.to(np.float64)

    def float(self):
        """Cast parameters and float buffers to float32 (see to)."""
        return self.to(np.float32)

    # ---- state ---------------------------------------------------------------------------------
    def _named_buffers(self):
        for mprefix, m in self.named_modules(remove_duplicate=False):
            for name in m._buffers:
                yield (f"{mprefix}.{name}" if mprefix else name), m, name

    def state_dict(self):
        """Dotted name -> ndarray (a copy), parameters then buffers; a tied parameter appears under every
        name it is reachable by, as in torch."""
        d = OrderedDict((n, p.data.copy()) for n, p in self.named_parameters(remove_duplicate=False))
        for n, m, attr in self._named_buffers():
            d[n] = np.array(data_of(getattr(m, attr)))
        return d

    def load_state_dict(self, state, strict=True):
        """Copy arrays into parameters by name; names and shapes must match (missing ones too, if strict)."""
        own = dict(self.named_parameters(remove_duplicate=False))  # every name of a tied parameter
        bufs = {n: (m, attr) for n, m, attr in self._named_buffers()}
        unexpected = [k for k in state if k not in own and k not in bufs]
        missing = [k for k in list(own) + list(bufs) if k not in state]
        if strict and (unexpected or missing):
            found = [f"{what} keys {keys}" for what, keys in (("unexpected", unexpected), ("missing", missing)) if keys]
            raise KeyError(" ".join([f"load_state_dict for {type(self).__name__}:", *found,
                                     f"(expected keys: {list(own) + list(bufs)})"]))
        state = {k: (v.data if isinstance(v, Tensor) else np.asarray(v)) for k, v in state.items()}
        for k, v in state.items():  # check every shape first, so a failed load changes nothing
            if k in own and v.shape != own[k].shape:
                raise ValueError(f"load_state_dict: '{k}' has shape {own[k].shape} here but {v.shape} in the state dict"
                                 f"{self._load_hint(k, v.shape)}")
            if k in bufs and v.shape != np.shape(data_of(getattr(*bufs[k]))):
                raise ValueError(f"load_state_dict: buffer '{k}' has shape {np.shape(data_of(getattr(*bufs[k])))} "
                                 f"here but {v.shape}")
        for k, v in state.items():
            if k in own:
                own[k].data = v.astype(own[k].dtype, copy=True)
            elif k in bufs:
                m, attr = bufs[k]
                old = getattr(m, attr)
                new = v.astype(np.asarray(data_of(old)).dtype, copy=True)
                object.__setattr__(m, attr, Tensor(new) if isinstance(old, Tensor) else new)  # keep its type
        return self

    def _load_hint(self, key, shape):
        """What the module owning `key` says about a state-dict entry of the wrong shape: its method
        `load_hint(name, shape)` may name the argument that differs (a window size, say); '' if it has none."""
        prefix, _, name = key.rpartition(".")
        owner = dict(self.named_modules(remove_duplicate=False)).get(prefix)
        hint = getattr(owner, "load_hint", None)
        text = hint(name, shape) if hint is not None else None
        return f" ({text})" if text else ""

    def extra_repr(self):
        """The text inside this module's repr parentheses (a subclass puts its sizes here)."""
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, m in self._modules.items():
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({name}): {sub}")
        return "\n".join(lines) + ("\n)" if len(lines) > 1 else ")")


class ModuleList(Module):
    """A list of modules, registered under '0', '1', ... as in PyTorch."""

    def __init__(self, modules=()):
        super().__init__()
        self.extend(modules)

    def append(self, m):
        """Register m under the next index ('0', '1', ...); returns self."""
        setattr(self, str(len(self._modules)), m)
        return self

    def __getitem__(self, i):
        mods = list(self._modules.values())
        if isinstance(i, slice):  # a slice is a container of the same kind (as torch), renumbered from 0
            return self._from_list(mods[i])
        try:
            return mods[i]
        except (IndexError, TypeError):
            raise IndexError(f"{type(self).__name__}: index {i!r} is out of range for {len(mods)} modules") from None

    def _from_list(self, mods):
        return ModuleList(mods)

    def __setitem__(self, i, m):
        keys = list(self._modules)
        if not isinstance(i, (int, np.integer)) or not -len(keys) <= i < len(keys):
            raise IndexError(f"{type(self).__name__}: index {i!r} is out of range for {len(keys)} modules")
        if not isinstance(m, Module):
            raise TypeError(f"{type(self).__name__}: only Modules can be stored, got {type(m).__name__}")
        self._modules[keys[i]] = m  # in place: the module keeps its position
        object.__setattr__(self, keys[i], m)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def extend(self, modules):
        """Append each module in turn."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, m):
        """Insert before index; later modules are renumbered, as torch."""
        mods = list(self._modules.values())
        mods.insert(index, m)
        self._modules.clear()
        self.extend(mods)


class Sequential(ModuleList):
    """Modules applied in order, named '0', '1', ... as in PyTorch."""

    def __init__(self, *modules):
        super().__init__(modules)

    def _from_list(self, mods):
        return Sequential(*mods)

    def forward(self, x):
        """Apply each module in order, feeding each output to the next; returns the last output."""
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleDict(Module):
    """Modules by name (string keys, insertion order), each registered under its key as in PyTorch."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def _key(self, key):
        if not isinstance(key, str):
            raise TypeError(f"ModuleDict: keys must be strings, got {type(key).__name__} {key!r}")
        if "." in key or not key:
            raise KeyError(f"ModuleDict: a key must be a non-empty name without '.', got {key!r}")
        return key

    def __getitem__(self, key):
        if key not in self._modules:
            raise KeyError(f"ModuleDict: no module named {key!r} (keys: {list(self._modules)})")
        return self._modules[key]

    def __setitem__(self, key, m):
        if not isinstance(m, Module):
            raise TypeError(f"ModuleDict: values must be Modules, got {type(m).__name__} for key {key!r}")
        setattr(self, self._key(key), m)

    def __delitem__(self, key):
        self.pop(key)

    def __contains__(self, key):
        return key in self._modules

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        """The names, in order."""
        return self._modules.keys()

    def values(self):
        """The modules, in order."""
        return self._modules.values()

    def items(self):
        """(name, module) pairs, in order."""
        return self._modules.items()

    def pop(self, key):
        """Remove the module under key and return it."""
        m = self[key]
        del self._modules[key]
        object.__delattr__(self, key)
        return m

    def update(self, modules):
        """Add (name, module) pairs from a dict or an iterable of pairs."""
        for k, m in (modules.items() if hasattr(modules, "items") else modules):
            self[k] = m
