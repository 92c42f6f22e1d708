"""Forward mode: jvp and jacfwd (work in progress)."""
from . import _state  # noqa: F401

__all__ = ("jvp", "jacfwd")

_levels = []  # the forward-mode levels now running, outermost first


def copy_tangents(src, dst):
    """Give dst the tangents src has at every running level (a fresh leaf standing in for src)."""
    for lv in _levels:
        t = lv.tangents.get(src)
        if t is not None:
            lv.tangents[dst] = t


def jvp(func, primals, tangents, has_aux=False):
    raise NotImplementedError("jvp: forward mode is being built")


def jacfwd(func, argnums=0, has_aux=False):
    raise NotImplementedError("jacfwd: forward mode is being built")
