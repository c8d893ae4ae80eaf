"""The ``fedrun`` command: ``--help`` answers from ``conf/`` at once (nothing heavy imported); everything else is
the Hydra app (``fedrun.app.cli``)."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:] in (["--help"], ["-h"]):
        from fedrun.app.help import text

        print(text())
        return
    from fedrun.app.cli import main as app

    app()
