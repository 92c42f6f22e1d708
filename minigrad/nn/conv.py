"""2-D convolution and pooling, as torch.nn.functional's conv2d / max_pool2d / avg_pool2d and the modules
nn.Conv2d / nn.MaxPool2d / nn.AvgPool2d, on NCHW images.

Each is composed of ops (pad, strided slices, stack, matmul, max / sum), so its first and second derivatives
are theirs: the kh*kw strided slices of the padded input, stacked, are im2col; the slices' backward adds each
window's share back in place (a slice-add each, no scatter).
"""
import math

import numpy as np

from .. import ops
from ..ops import as_tensor
from ..tensor import Tensor
from .init import kaiming_uniform_, uniform_
from .module import Module, parameter

__all__ = ("conv2d", "max_pool2d", "avg_pool2d", "Conv2d", "MaxPool2d", "AvgPool2d")


def _pair(name, value, low, fn):
    """An int or a pair of ints, each >= low -> (a, b)."""
    v = (value, value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else value
    if (not isinstance(v, (tuple, list)) or len(v) != 2
            or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= low for x in v)):
        raise ValueError(f"{fn}: {name} must be an int >= {low} or a pair of them, got {value!r}")
    return int(v[0]), int(v[1])


def _out_size(n, k, s, p, d, ceil_mode=False):
    """Output length along one axis (torch's rule: with ceil_mode the last window must start inside the
    input or its left padding)."""
    span = n + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _windows(x, k, s, p, d, out, value):
    """(B, C, H, W) -> (B, C, kh*kw, Ho, Wo): window entry (i, j) of every output position, a strided slice of
    the input padded by p (and, for ceil_mode, on the bottom/right as far as the last window reaches)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), (Ho, Wo) = k, s, p, d, out
    H, W = x.shape[2:]
    eh = max(0, (Ho - 1) * sh + dh * (kh - 1) + 1 - (H + 2 * ph))  # overhang past the padding (ceil_mode)
    ew = max(0, (Wo - 1) * sw + dw * (kw - 1) + 1 - (W + 2 * pw))
    if ph or pw or eh or ew:
        x = ops.pad(x, ((0, 0), (0, 0), (ph, ph + eh), (pw, pw + ew)), value=value)
    parts = [x[:, :, i * dh:i * dh + (Ho - 1) * sh + 1:sh, j * dw:j * dw + (Wo - 1) * sw + 1:sw]
             for i in range(kh) for j in range(kw)]
    return ops.stack(parts, axis=2)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """input (B, C, H, W), weight (O, C / groups, kh, kw), bias (O,) -> (B, O, Ho, Wo), as torch's conv2d
    (a cross-correlation). padding: an int, a pair, "valid" (0) or "same" (stride 1; extra on the bottom/right)."""
    fn = "conv2d"
    x, w = as_tensor(input), as_tensor(weight)
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"{fn}: input (B, C, H, W) and weight (O, C / groups, kh, kw) expected, "
                         f"got input {x.shape} and weight {w.shape}")
    g = _pair("groups", groups, 1, fn)[0]
    B, C, H, W = x.shape
    O, Cg, kh, kw = w.shape
    if C % g or O % g or Cg * g != C:
        raise ValueError(f"{fn}: input (B, C, H, W) and weight (O, C / groups, kh, kw) must agree: input C={C}, "
                         f"weight {w.shape} with groups={g} (the same C expected when groups=1; O a multiple of groups)")
    s, d = _pair("stride", stride, 1, fn), _pair("dilation", dilation, 1, fn)
    if padding == "valid":
        padding = 0
    if padding == "same":
        if s != (1, 1):
            raise ValueError(f"{fn}: padding='same' needs stride 1, got stride {stride!r}")
        th, tw = d[0] * (kh - 1), d[1] * (kw - 1)  # total padding; torch puts the odd one on the bottom/right
        x = ops.pad(x, ((0, 0), (0, 0), (th // 2, th - th // 2), (tw // 2, tw - tw // 2)))
        H, W, p = H + th, W + tw, (0, 0)
    else:
        p = _pair("padding", padding, 0, fn)
    Ho, Wo = (_out_size(H, kh, s[0], p[0], d[0]), _out_size(W, kw, s[1], p[1], d[1]))
    if Ho < 1 or Wo < 1:
        raise ValueError(f"{fn}: kernel ({kh}, {kw}) with dilation {d} is larger than the padded input "
                         f"({H + 2 * p[0]}, {W + 2 * p[1]})")
    cols = _windows(x, (kh, kw), s, p, d, (Ho, Wo), 0.0)               # (B, C, kh*kw, Ho, Wo)
    cols = cols.reshape(B, g, Cg * kh * kw, Ho * Wo)                   # im2col, rows ordered (c, i, j)
    out = w.reshape(g, O // g, Cg * kh * kw) @ cols                    # (B, g, O/g, Ho*Wo)
    out = out.reshape(B, O, Ho, Wo)
    if bias is None:
        return out
    bias = as_tensor(bias)
    if bias.shape != (O,):
        raise ValueError(f"{fn}: bias of shape ({O},) expected, got {bias.shape}")
    return out + bias.reshape(O, 1, 1)


def _pool_args(fn, x, kernel_size, stride, padding, dilation, ceil_mode):
    """-> (x as (B, C, H, W), whether it came batched, kernel, stride, padding, dilation, output size), checked."""
    x = as_tensor(x)
    if x.ndim not in (3, 4):
        raise ValueError(f"{fn}: input (B, C, H, W) or (C, H, W) expected, got shape {x.shape}")
    k = _pair("kernel_size", kernel_size, 1, fn)
    s = k if stride is None or stride == () or stride == [] else _pair("stride", stride, 1, fn)
    p, d = _pair("padding", padding, 0, fn), _pair("dilation", dilation, 1, fn)
    if p[0] > (d[0] * (k[0] - 1) + 1) // 2 or p[1] > (d[1] * (k[1] - 1) + 1) // 2:
        raise ValueError(f"{fn}: padding {p} must be at most half the (dilated) kernel size {k}")
    H, W = x.shape[-2:]
    out = (_out_size(H, k[0], s[0], p[0], d[0], ceil_mode), _out_size(W, k[1], s[1], p[1], d[1], ceil_mode))
    if out[0] < 1 or out[1] < 1:
        raise ValueError(f"{fn}: kernel {k} (dilation {d}) is larger than the padded input "
                         f"({H + 2 * p[0]}, {W + 2 * p[1]})")
    return (x if x.ndim == 4 else x.reshape(1, *x.shape)), x.ndim == 4, k, s, p, d, out


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """The largest entry of every (dilated) window, as torch's max_pool2d: input (B, C, H, W) or (C, H, W);
    stride defaults to kernel_size; padding counts as -inf. return_indices: also each pick's flat index into
    H*W (torch's layout). The gradient goes to the pick (the first of tied entries)."""
    x, batched, k, s, p, d, out = _pool_args("max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode)
    win = _windows(x, k, s, p, d, out, -np.inf)                        # (B, C, kh*kw, Ho, Wo)
    values, pick = win.max(2)
    values = values if batched else values.reshape(values.shape[1:])
    if not return_indices:
        return values
    i, j = np.divmod(pick.data, k[1])                                  # the pick's place inside its window
    rows = np.arange(out[0])[:, None] * s[0] - p[0] + i * d[0]
    cols = np.arange(out[1])[None, :] * s[1] - p[1] + j * d[1]
    idx = (rows * x.shape[-1] + cols).astype(np.int64)                # (B, C, Ho, Wo)
    return values, Tensor(idx if batched else idx[0])


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """The mean of every window, as torch's avg_pool2d: zero padding counted in the divisor when
    count_include_pad (never the overhang ceil_mode adds); divisor_override replaces the divisor."""
    x, batched, k, s, p, d, out = _pool_args("avg_pool2d", input, kernel_size, stride, padding, 1, ceil_mode)
    total = _windows(x, k, s, p, d, out, 0.0).sum(2)                   # (B, C, Ho, Wo)
    if divisor_override is not None:
        div = float(_pair("divisor_override", divisor_override, 1, "avg_pool2d")[0])
    else:
        def count(n, kk, ss, pp, o):  # per output: window positions inside the input (+ its padding)
            start = np.arange(o) * ss - pp
            lo, hi = (-pp, n + pp) if count_include_pad else (0, n)
            return np.minimum(start + kk, hi) - np.maximum(start, lo)
        div = (count(x.shape[-2], k[0], s[0], p[0], out[0])[:, None]
               * count(x.shape[-1], k[1], s[1], p[1], out[1])[None, :]).astype(x.dtype)
    res = total / div
    return res if batched else res.reshape(res.shape[1:])


class Conv2d(Module):
    """A 2-D convolution layer, initialised as torch.nn.Conv2d: weight (out, in / groups, kh, kw), bias (out,)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros"):
        super().__init__()
        if padding_mode != "zeros":
            raise ValueError(f"Conv2d: only padding_mode='zeros' is supported, got {padding_mode!r}")
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: in_channels {in_channels} and out_channels {out_channels} must be "
                             f"multiples of groups {groups}")
        kh, kw = _pair("kernel_size", kernel_size, 1, "Conv2d")
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, (kh, kw)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.weight = kaiming_uniform_(parameter(out_channels, in_channels // groups, kh, kw), a=math.sqrt(5))
        bound = 1 / math.sqrt(in_channels // groups * kh * kw)
        self.bias = uniform_(parameter(out_channels), -bound, bound) if bias else None

    def forward(self, x):
        """x (B, in_channels, H, W) -> (B, out_channels, Ho, Wo) (see conv2d)."""
        return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def macs(self, out_hw):
        """Multiply-adds for one item whose output is out_hw = (Ho, Wo)."""
        return int(np.prod(self.weight.shape) * out_hw[0] * out_hw[1])

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, dilation={self.dilation}, groups={self.groups}, "
                f"bias={self.bias is not None}")


class MaxPool2d(Module):
    """max_pool2d as a module (no parameters), as torch.nn.MaxPool2d."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, x):
        """x (B, C, H, W) or (C, H, W) -> each window's largest entry (see max_pool2d)."""
        return max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                          self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """avg_pool2d as a module (no parameters), as torch.nn.AvgPool2d."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.ceil_mode = kernel_size, stride, padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, x):
        """x (B, C, H, W) or (C, H, W) -> each window's mean (see avg_pool2d)."""
        return avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                          self.divisor_override)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
