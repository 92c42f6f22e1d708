"""Capture once, replay fast: minigrad.compile (compiled.py: guards and variants; tape.py: capture and replay)."""
from .compiled import Compiled, CompileWarning, compile, record  # noqa: F401
from .tape import CompileError  # noqa: F401
