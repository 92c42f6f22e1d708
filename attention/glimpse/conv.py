"""A small 2-D convolution (im2col and one matmul, with a hand-written backward), as torch's conv2d and
nn.Conv2d: the layer the gist policy and RAM's spatial location head are built from.
"""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from minigrad import Function, nn, ops

__all__ = ("Conv2d", "conv2d")


class _Conv2d(Function):
    """NCHW convolution as torch.nn.functional.conv2d (cross-correlation), by im2col and one matmul.

    Inside, images are channels-last (B, H, W, C) and a window row is ordered (kh, kw, C); the input's
    gradient is a second im2col + matmul (a transposed convolution), not a loop of strided adds.
    """

    @staticmethod
    def forward(ctx, x, w, b=None, stride=1, padding=0):
        B, C, H, W = x.shape
        O, _, kh, kw = w.shape
        p, s = padding, stride
        xl = x.transpose(0, 2, 3, 1)                                               # (B, H, W, C)
        xp = np.pad(xl, ((0, 0), (p, p), (p, p), (0, 0))) if p else xl
        win = sliding_window_view(xp, (kh, kw), axis=(1, 2))[:, ::s, ::s]          # (B, Ho, Wo, C, kh, kw)
        Ho, Wo = win.shape[1:3]
        cols = win.transpose(0, 1, 2, 4, 5, 3).reshape(B * Ho * Wo, kh * kw * C)  # one row per output pixel
        wm = w.transpose(0, 2, 3, 1).reshape(O, -1)                                # (O, kh * kw * C)
        out = cols @ wm.T
        if b is not None:
            out += b
        ctx.save_for_backward(cols, wm)
        ctx.geom = (x.shape, xp.shape, w.shape, Ho, Wo, p, s, b is not None)
        return out.reshape(B, Ho, Wo, O).transpose(0, 3, 1, 2)

    @staticmethod
    def backward(ctx, g):  # dW = g^T cols, db = sum g, dx = col2im(g W): each window gets its share back
        cols, wm = ctx.saved_tensors
        xshape, xpshape, wshape, Ho, Wo, p, s, has_b = ctx.geom
        B, O = g.shape[:2]
        C, kh, kw = wshape[1:]
        g2 = g.transpose(0, 2, 3, 1).reshape(-1, O)
        dw = (g2.T @ cols).reshape(O, kh, kw, C).transpose(0, 3, 1, 2) if ctx.needs_input_grad[1] else None
        dx = None
        if ctx.needs_input_grad[0]:
            # dx is the full correlation of g (dilated by the stride) with the flipped kernel: im2col again
            gl = g.transpose(0, 2, 3, 1)                                           # (B, Ho, Wo, O)
            if s > 1:
                gd = np.zeros((B, (Ho - 1) * s + 1, (Wo - 1) * s + 1, O), g.dtype)
                gd[:, ::s, ::s] = gl
                gl = gd
            gp = np.pad(gl, ((0, 0), (kh - 1, kh - 1), (kw - 1, kw - 1), (0, 0)))
            win = sliding_window_view(gp, (kh, kw), axis=(1, 2))[..., ::-1, ::-1]   # (B, Hc, Wc, O, kh, kw)
            Hc, Wc = win.shape[1:3]
            gcols = win.transpose(0, 1, 2, 4, 5, 3).reshape(B * Hc * Wc, kh * kw * O)
            wt = wm.reshape(O, kh * kw, C).transpose(2, 1, 0).reshape(C, kh * kw * O)  # (C, kh * kw * O)
            dxp = (gcols @ wt.T).reshape(B, Hc, Wc, C)
            if (Hc, Wc) != xpshape[1:3]:  # rows/cols no window reached (stride remainder) get zero
                dxp = np.pad(dxp, ((0, 0), (0, xpshape[1] - Hc), (0, xpshape[2] - Wc), (0, 0)))
            dx = (dxp[:, p:p + xshape[2], p:p + xshape[3]] if p else dxp).transpose(0, 3, 1, 2)
        if has_b:
            return dx, dw, g2.sum(axis=0) if ctx.needs_input_grad[2] else None
        return dx, dw


def conv2d(x, weight, bias=None, stride=1, padding=0):
    """x (B, C, H, W), weight (O, C, kh, kw), bias (O,) -> (B, O, Ho, Wo), as torch's conv2d."""
    x, weight = ops.as_tensor(x), ops.as_tensor(weight)
    if x.ndim != 4 or weight.ndim != 4 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"conv2d: input (B, C, H, W) and weight (O, C, kh, kw) with the same C expected, "
                         f"got input {x.shape} and weight {weight.shape}")
    if not (isinstance(stride, int) and stride >= 1 and isinstance(padding, int) and padding >= 0):
        raise ValueError(f"conv2d: stride must be an int >= 1 and padding an int >= 0, got {stride}, {padding}")
    if x.shape[2] + 2 * padding < weight.shape[2] or x.shape[3] + 2 * padding < weight.shape[3]:
        raise ValueError(f"conv2d: kernel {weight.shape[2:]} is larger than the padded input "
                         f"{(x.shape[2] + 2 * padding, x.shape[3] + 2 * padding)}")
    if bias is None:
        return _Conv2d.apply(x, weight, None, stride, padding)
    bias = ops.as_tensor(bias)
    if bias.shape != weight.shape[:1]:
        raise ValueError(f"conv2d: bias of shape ({weight.shape[0]},) expected, got {bias.shape}")
    return _Conv2d.apply(x, weight, bias, stride, padding)


class Conv2d(nn.Module):
    """A 2-D convolution layer, initialised as torch.nn.Conv2d; weight (out, in, k, k)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True):
        super().__init__()
        self.stride, self.padding = stride, padding
        k = kernel_size
        self.weight = nn.kaiming_uniform_(nn.parameter(out_channels, in_channels, k, k), a=np.sqrt(5))
        bound = 1 / np.sqrt(in_channels * k * k)
        self.bias = nn.uniform_(nn.parameter(out_channels), -bound, bound) if bias else None

    def forward(self, x):
        """x (B, in_channels, H, W) -> (B, out_channels, Ho, Wo) (see conv2d)."""
        return conv2d(x, self.weight, self.bias, self.stride, self.padding)

    def macs(self, out_hw):
        """Multiply-adds for one item whose output is out_hw = (Ho, Wo)."""
        return int(np.prod(self.weight.shape) * out_hw[0] * out_hw[1])
