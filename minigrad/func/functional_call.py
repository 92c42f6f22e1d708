"""functional_call: run a Module with other Tensors in place of its parameters and buffers, as
torch.func.functional_call (torch/_functorch/functional_call.py, torch/nn/utils/stateless.py); and
stack_module_state, the stacked parameters of M models of one class, for an ensemble under vmap.

A Module holds its parameters as attributes; the transforms (grad, vjp, jvp, vmap) need a *function* of them.
functional_call is that function: f(params, x) = functional_call(model, params, (x,)). It swaps objects by dotted
name for one call and swaps the originals back afterwards (also when forward raises); it never copies data, so a
Tensor that requires grad, carries a tangent or is batched under vmap reaches forward as it is.
"""
import numpy as np

from ..tensor import Tensor

__all__ = ("functional_call", "stack_module_state")


def _merge(params_and_buffers):
    """One {name: value} dict from a dict or a tuple/list of dicts (a name in two of them is an error, as torch)."""
    if isinstance(params_and_buffers, dict):
        return dict(params_and_buffers)
    if isinstance(params_and_buffers, (tuple, list)) and all(isinstance(d, dict) for d in params_and_buffers):
        merged = {}
        repeated = sorted({k for d in params_and_buffers for k in d if sum(k in e for e in params_and_buffers) > 1})
        if repeated:
            raise ValueError(f"functional_call: {repeated} appear in more than one of the dicts of "
                             f"params_and_buffers; which value to use would be ambiguous")
        for d in params_and_buffers:
            merged.update(d)
        return merged
    raise TypeError(f"functional_call: params_and_buffers must be a dict of name -> Tensor or a tuple of such dicts, "
                    f"got {type(params_and_buffers).__name__}")


def _slots(module):
    """{dotted name: (owning module, attribute, is_parameter)} for every parameter and buffer, under every name
    it is reachable by (a tied parameter has several)."""
    slots = {}
    for mprefix, m in module.named_modules(remove_duplicate=False):
        for name, p in m._parameters.items():
            if p is not None:  # a parameter set to None (bias=False) is no slot, as in torch's named_parameters
                slots[f"{mprefix}.{name}" if mprefix else name] = (m, name, True)
        for name in m._buffers:
            slots[f"{mprefix}.{name}" if mprefix else name] = (m, name, False)
    return slots


def _untie(slots, values, module):
    """values with every tied name filled in from the one given (tie_weights=True, as torch): a parameter
    reachable as 'embed.weight' and 'head.weight' takes the value given for either; two different values for
    the names of one tied parameter are an error."""
    names_of = {}  # id(original object) -> its names
    for name, (m, attr, _) in slots.items():
        if getattr(m, attr) is not None:  # (buffers that are None are not one tied object)
            names_of.setdefault(id(getattr(m, attr)), []).append(name)
    out = dict(values)
    for names in names_of.values():
        given = [n for n in names if n in values]
        if len(names) < 2 or not given:
            continue
        if len({id(values[n]) for n in given}) > 1:
            raise ValueError(f"functional_call: different values given for {given}, which are tied in "
                             f"{type(module).__name__} (one parameter under several names); give one of them, "
                             f"or pass tie_weights=False")
        for n in names:
            out[n] = values[given[0]]
    return out


def functional_call(module, params_and_buffers, args=(), kwargs=None, *, tie_weights=True, strict=False):
    """module(*args, **kwargs) with params_and_buffers ({dotted name: Tensor}, or a tuple of such dicts) in place of
    the module's own parameters and buffers; names left out keep the module's own (strict=True: an error)."""
    if not hasattr(module, "named_modules") or not callable(module):
        raise TypeError(f"functional_call: module must be a minigrad.nn.Module, got {type(module).__name__}")
    values = _merge(params_and_buffers)
    slots = _slots(module)
    unknown = [k for k in values if k not in slots]
    if tie_weights and not unknown:
        values = _untie(slots, values, module)  # (before the strict check: a tied name given once counts for all)
    missing = [k for k in slots if k not in values] if strict else []
    if unknown or missing:
        msg = [f"functional_call on {type(module).__name__}:"]
        if unknown:
            msg.append(f"unknown names {unknown}")
        if missing:
            msg.append(f"missing names {missing} (strict=True)")
        raise KeyError(" ".join(msg + [f"(its parameters and buffers: {list(slots)})"]))
    for k, v in values.items():
        is_param = slots[k][2]
        if not (isinstance(v, Tensor) or (not is_param and (v is None or isinstance(v, np.ndarray)))):
            raise TypeError(f"functional_call: the value for {'parameter' if is_param else 'buffer'} '{k}' must be "
                            f"a Tensor{'' if is_param else ' or ndarray'}, got {type(v).__name__}")
    if not isinstance(args, tuple):
        args = (args,)  # a single argument, as torch
    kwargs = {} if kwargs is None else kwargs

    saved = []  # (module, attribute, is_parameter, original), to swap back in reverse order
    done = set()  # a submodule reachable by two names is one slot: save its original once
    try:
        for k, v in values.items():
            m, attr, is_param = slots[k]
            if (id(m), attr) not in done:
                done.add((id(m), attr))
                saved.append((m, attr, is_param, m.__dict__[attr]))
            if is_param:
                m._parameters[attr] = v  # named_parameters() inside forward sees the substitutes too
            object.__setattr__(m, attr, v)  # bypass Module.__setattr__: v is a plain Tensor, not a Parameter
        return module(*args, **kwargs)
    finally:
        for m, attr, is_param, original in reversed(saved):
            if is_param:
                m._parameters[attr] = original
            object.__setattr__(m, attr, original)


def stack_module_state(models):
    """(params, buffers): dicts by dotted name of the M models' parameters (and buffers) stacked on a new first dim
    (M, ...), as torch.func.stack_module_state; the parameters are new leaves that require grad, so
    vmap(lambda p, b, x: functional_call(models[0], (p, b), (x,)), in_dims=(0, 0, None)) is the ensemble."""
    models = list(models)
    if not models:
        raise ValueError("stack_module_state: expected at least one model, got none")
    kind = type(models[0])
    for i, m in enumerate(models):
        if type(m) is not kind:
            raise TypeError(f"stack_module_state: every model must be a {kind.__name__} (one class), "
                            f"model {i} is a {type(m).__name__}")
        if m.training != models[0].training:
            raise ValueError(f"stack_module_state: model {i} is in {'training' if m.training else 'eval'} mode, "
                             f"model 0 is not; put them in one mode")
    named = [dict(m.named_parameters()) for m in models]
    buffers = [{n: getattr(mod, a) for n, (mod, a, is_p) in _slots(m).items() if not is_p} for m in models]
    out = []
    for dicts, grad in ((named, True), (buffers, False)):
        stacked = {}
        for k in (k for k in dicts[0] if dicts[0][k] is not None):  # (a buffer set to None has nothing to stack)
            arrays = []
            for i, d in enumerate(dicts):
                v = d.get(k)
                if v is None or np.shape(v) != np.shape(dicts[0][k]):
                    raise ValueError(f"stack_module_state: model {i} has no '{k}' of shape "
                                     f"{np.shape(dicts[0][k])} (got {None if v is None else np.shape(v)})")
                arrays.append(np.asarray(v.data if isinstance(v, Tensor) else v))
            stacked[k] = Tensor(np.stack(arrays), requires_grad=grad)  # a copy: new leaves, not the models' own
        out.append(stacked)
    return out[0], out[1]
