"""Anomaly mode (issue 22): the first op that makes a NaN (forward) or a NaN/inf (backward) is named, with its
input shapes and the line of this file that made its node; nothing is recorded while the mode is off."""
import inspect

import numpy as np
import pytest

import minigrad as mg

pytestmark = pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:divide by zero:RuntimeWarning")
from minigrad.autograd import AnomalyError, detect_anomaly, is_anomaly_enabled, set_detect_anomaly


def _line(marker):
    src = inspect.getsource(inspect.getmodule(_line)).splitlines()
    return next(i + 1 for i, s in enumerate(src) if s.rstrip().endswith(marker))


def test_a_forward_nan_names_the_op_its_input_shapes_and_the_line():
    x = mg.tensor([[1.0, 0.0, 2.0], [0.5, 3.0, 0.0]], requires_grad=True)
    w = mg.tensor([2.0, 1.0, 1.0])
    with pytest.raises(AnomalyError) as info:
        with detect_anomaly():
            h = x.exp() * w                 # finite
            logs = h.log() - x.log()        # log(0) = -inf: allowed in a forward (masks use -inf)
            bad = logs * 0.0  # NaN-BORN-HERE
            bad.sum()
    e = info.value
    assert e.op == "mul" and e.input_shapes == [(2, 3)]
    assert e.where[0] == __file__ and e.where[1] == _line("# NaN-BORN-HERE")
    msg = str(e)
    assert "'mul'" in msg and "(2, 3)" in msg and f"test_anomaly.py:{_line('# NaN-BORN-HERE')}" in msg
    assert "so this op made it" in msg
    assert not is_anomaly_enabled()  # the block restored the mode


def test_a_backward_nan_names_the_op_whose_backward_made_it():
    x = mg.tensor([0.0, 4.0], requires_grad=True)
    with detect_anomaly():
        r = x.sqrt()  # SQRT-HERE
        loss = (r * mg.tensor([0.0, 1.0])).sum()
        with pytest.raises(AnomalyError) as info:
            loss.backward()  # sqrt's backward: g * 0.5 / sqrt(0) = 0 * inf = NaN
    e = info.value
    assert e.op == "sqrt" and e.input_shapes == [(2,)] and e.where[1] == _line("# SQRT-HERE")
    assert "backward of the 'sqrt' op made NaN" in str(e) and "received was finite" in str(e)


def test_without_the_mode_the_same_code_runs_and_records_nothing():
    import sys
    T = sys.modules["minigrad.tensor"]
    assert T._tracer is None
    x = mg.tensor([0.0, 4.0], requires_grad=True)
    with np.errstate(all="ignore"):
        loss = (x.sqrt() * mg.tensor([0.0, 1.0])).sum()
        assert getattr(loss._backward, "__name__", None) != "checked"  # the rule as the op made it
        loss.backward()
    assert np.isnan(x.grad[0])


def test_set_detect_anomaly_and_the_decorator():
    set_detect_anomaly(True)
    try:
        assert is_anomaly_enabled()
        with pytest.raises(AnomalyError, match="'div'"):
            mg.tensor([0.0]) / mg.tensor([0.0])
    finally:
        set_detect_anomaly(False)
    assert not is_anomaly_enabled()

    @detect_anomaly()
    def f():
        return is_anomaly_enabled()
    assert f() and not is_anomaly_enabled()
    with pytest.raises(TypeError, match="True or False"):
        set_detect_anomaly("yes")


def test_an_input_that_already_holds_nan_is_said_to_come_from_outside():
    data = mg.tensor([np.nan, 1.0], requires_grad=True)
    with pytest.raises(AnomalyError, match="input 0 already held NaN"):
        with detect_anomaly():
            data * 2


def test_anomaly_mode_inside_a_trace_keeps_both():
    x = mg.tensor([0.0, 1.0], requires_grad=True)
    with mg.trace(print_on_exit=False) as tr:
        with detect_anomaly():
            with pytest.raises(AnomalyError, match="'sqrt'"):
                (x.sqrt() * mg.tensor([0.0, 1.0])).sum().backward()
    assert [r["op"] for r in tr.rows][:2] == ["sqrt", "mul"]
    import sys
    T = sys.modules["minigrad.tensor"]
    assert T._tracer is None
