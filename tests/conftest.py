"""Fixtures shared by every test module, and tests/ on sys.path so that `from helpers import ...` works
whichever way pytest is started (pytest's default rootdir insertion does it too; this also covers
--import-mode=importlib)."""
import sys
from pathlib import Path

import numpy as np
import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from helpers import using_dtype  # noqa: E402


@pytest.fixture
def float64():
    """minigrad's default dtype is float64 for the test, restored after it."""
    with using_dtype(np.float64):
        yield
