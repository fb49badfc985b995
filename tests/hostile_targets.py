"""Targets whose compilers misbehave the ways native code does: a segfault, a hang, memory without bound.
Imported through XC_PLUGINS (CLI and dashboard tests) or registered by a test; each runs in an isolated worker."""
from __future__ import annotations

import ctypes
import time

from xc_core.targets.base import Target, register


class _Hostile(Target):
    evidence = {"assignment": "reported", "numerics": "measured"}
    description = "test only"

    def _inspect(self, compiled, captured, result):
        raise AssertionError("never reached")

    def _run(self, compiled, inputs, captured, result):
        raise AssertionError("never reached")


@register
class SegfaultingTarget(_Hostile):
    id = "test-segfault"
    label = "a compiler that segfaults"

    def _compile(self, captured, workdir, result):
        ctypes.string_at(0)   # a null read: SIGSEGV


@register
class HangingTarget(_Hostile):
    id = "test-hang"
    label = "a compiler that never returns"

    def _compile(self, captured, workdir, result):
        while True:
            time.sleep(0.05)


@register
class GreedyTarget(_Hostile):
    id = "test-oom"
    label = "a compiler that allocates without bound"

    def _compile(self, captured, workdir, result):
        hoard = []
        while True:
            hoard.append(bytearray(64 << 20))   # bytearray zero-fills: resident at once


HOSTILE_IDS = ("test-segfault", "test-hang", "test-oom")
