"""The backward of a captured step: autograd/backward.py's run_backward step for step (the same order, the same
sums, the same in-place decisions), each array operation also written as a line of the tape, so that the
replay's gradients are the eager walk's bits. `self` is the capture's Recorder (tape.py)."""
import numpy as np

from ..autograd import hooks as _hooks
from ..autograd import versions as _versions
from ..autograd.backward import Scatter, _IN_PLACE_MIN_SIZE, _freed, _in_place, _into_leaf, _unbroadcast, run_backward
from ..autograd.versions import _check_versions
from .tape import CompileError


def record_backward(self, root, grad, retain_graph=False):
    """run_backward (autograd/backward.py) step for step, each array operation also written as a line."""
    if self.failed is not None:
        return run_backward(root, grad, retain_graph)
    if self.backwards:
        raise CompileError("compile: the captured function calls backward() twice; a tape holds one backward "
                           "(sum the losses and call backward() once)")
    self.backwards += 1
    if _hooks._leaves or root._backward is None:  # the step goes on eagerly; compile then runs it eagerly
        self.failed = ("a tensor has a hook (register_hook), which the tape does not replay" if _hooks._leaves
                       else "backward() on a leaf")
        return run_backward(root, grad, retain_graph)
    gv = self.const(grad, "backward")
    pending, stack, clock = {root: 0}, [root], _versions._clock
    while stack:  # 1. count the edges into each interior node (run_backward's step 1)
        node = stack.pop()
        if node._clock != clock:
            _check_versions(node)
        for p in node._parents:
            if p.requires_grad and p._backward is not None:
                if p in pending:
                    pending[p] += 1
                else:
                    pending[p] = 1
                    stack.append(p)
    grads, owned, ready, gvar = {root: grad}, set(), [root], {root: gv}
    L = self.lines
    while ready:  # 2. Kahn's walk, as run_backward
        node = ready.pop()
        g = grads.pop(node, None)
        g_v = gvar.pop(node, None)
        rule, parents = node._backward, node._parents
        out_v, rexpr = self.var[id(node.data)], self.rules[id(node.data)]
        if not retain_graph:
            node._backward, node._parents = _freed, ()
        if g is None:
            pgrads, g_owned = (None,) * len(parents), False
        else:
            g_owned = g.size >= _IN_PLACE_MIN_SIZE and node in owned
            if g_owned:
                owned.discard(node)
            xs = [p.data for p in parents]
            xv = [self.var[id(p.data)] for p in parents]
            if rexpr in self.closures:  # a kernel's closure: it takes g alone (ArrayBackward does the same)
                pgrads = rule(g, node.data, *xs)
                call = f"{rexpr}({g_v})"
            elif len(parents) == 1:
                own = g_owned and _in_place(rule)
                pgrads = rule(g, node.data, xs[0], owned=True) if own else rule(g, node.data, xs[0])
                call = f"{rexpr}({g_v}, {out_v}, {xv[0]}{', owned=True' if own else ''})"
            elif len(parents) == 2 and parents[0].requires_grad and parents[1].requires_grad:
                pgrads = rule(g, node.data, *xs)
                call = f"{rexpr}({g_v}, {out_v}, {', '.join(xv)})"
            else:
                need = tuple(p.requires_grad for p in parents)
                pgrads = rule(g, node.data, *xs, need=need)
                call = f"{rexpr}({g_v}, {out_v}, {', '.join(xv)}, need={need!r})"
            if len(pgrads) != len(parents):
                raise CompileError(f"compile: op '{node._op}' returned {len(pgrads)} gradients for "
                                   f"{len(parents)} inputs")
            # a new name for each new array; none for None, g itself or an array named already (add's (g, g))
            names = ["_" if pg is None or pg is g or id(pg) in self.var else self._fresh(pg) for pg in pgrads]
            L.append(f"{', '.join(names)}{',' if len(names) == 1 else ''} = {call}")
        for p, pg in zip(parents, pgrads):
            if not p.requires_grad:
                continue
            if pg is not None:
                pv = g_v if pg is g else self.var[id(pg)]
                if type(pg) is Scatter:
                    if p._backward is None:
                        _leaf(self, p, pg, pv, False)
                        continue
                    _add_scatter(self, grads, gvar, owned, p, pg, pv)
                else:
                    pd = p.data
                    if pg.shape != pd.shape:
                        pg = _unbroadcast(pg, pd.shape, node._op)
                        pv = self._line(pg, f"{self.obj(_unbroadcast)}({pv}, {pd.shape!r}, {node._op!r})")
                        fresh = True
                    elif pg.base is None and pg is not g:
                        fresh = True
                    else:
                        fresh = g_owned and len(parents) == 1 and (
                            pg is g or pg.base is (g if g.base is None else g.base)) and pg.flags.writeable
                    if pg.dtype is not pd.dtype and pg.dtype != pd.dtype:
                        pg, fresh = pg.astype(pd.dtype), True
                        pv = self._line(pg, f"{pv}.astype({self.obj(pd.dtype)})")
                    if p._backward is None:  # a leaf: straight into its .grad, as run_backward
                        _leaf(self, p, pg, pv, fresh)
                        continue
                    prev = grads.get(p)
                    if prev is None:
                        grads[p], gvar[p] = pg, pv
                        if fresh:
                            owned.add(p)
                    elif p in owned and type(prev) is np.ndarray:
                        prev += pg
                        L.append(f"{gvar[p]} += {pv}")
                    else:
                        grads[p] = prev + pg
                        gvar[p] = self._line(grads[p], f"{gvar[p]} + {pv}")
                        owned.add(p)
            if p._backward is None:
                continue
            n = pending[p] - 1
            if n:
                pending[p] = n
            else:
                del pending[p]
                ready.append(p)


def _leaf(self, leaf, g, gv, fresh):
    """_into_leaf, written down (the replay's own Tensor for an input leaf, the parameter itself otherwise)."""
    name = self.names.get(id(leaf)) or self.obj(leaf, 'P')
    # adopted: its .grad is None here on every replay (a recorded zero_grad made it so), so _into_leaf adopts g
    adopted = id(leaf) in self.cleared and fresh and type(g) is np.ndarray
    self.cleared.discard(id(leaf))
    _into_leaf(leaf, g, fresh=fresh)
    self.lines.append(f"{name}.grad = {gv}" if adopted else f"{self.obj(_into_leaf)}({name}, {gv}, {fresh})")


def _add_scatter(self, grads, gvar, owned, p, s, sv):
    """backward._add_scatter, written down."""
    prev = grads.get(p)
    if prev is not None and p in owned and type(prev) is np.ndarray:
        s.add_into(prev)
        self.lines.append(f"{sv}.add_into({gvar[p]})")
        return
    dense = s.dense(p.data.shape, p.data.dtype)
    v = self._line(dense, f"{sv}.dense({p.data.shape!r}, {self.obj(p.data.dtype)})")
    if prev is not None:
        dense += prev
        self.lines.append(f"{v} += {gvar[p]}")
    grads[p], gvar[p] = dense, v
    owned.add(p)
