"""The ``fedrun`` command: ``--help`` answers from ``conf/`` at once and ``fedrun data`` lists the datasets
(nothing heavy imported); everything else is the Hydra app (``fedrun.app.cli``)."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:] in (["--help"], ["-h"]):
        from fedrun.app.help import text

        print(text())
        return
    if sys.argv[1:2] == ["data"]:
        from fedrun.app.data import main as data
        from fedrun.errors import FedrunError

        try:
            sys.exit(data(sys.argv[2:]))
        except FedrunError as err:
            print(f"fedrun: error: {err}", file=sys.stderr)
            sys.exit(2)
    from fedrun.app.cli import main as app

    app()
