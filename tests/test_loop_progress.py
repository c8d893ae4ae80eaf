"""The progress bar shows only on a terminal; in a file or a pipe the run logs a line per epoch (issue #66)."""

from __future__ import annotations

import io

from fedrun.sim.loop import bar_wanted


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_needs_sim_progress_and_a_terminal():
    assert bar_wanted(True, Terminal())
    assert not bar_wanted(False, Terminal())
    assert not bar_wanted(True, io.StringIO())  # a file or a pipe
    assert not bar_wanted(True, object())  # a stream that cannot tell
