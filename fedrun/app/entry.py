"""The ``fedrun`` command: ``--help``, ``fedrun info``, ``fedrun data`` and a misspelt option's refusal answer from
``conf/`` and the sources at once (nothing heavy imported); everything else is the Hydra app (``fedrun.app.cli``)."""

from __future__ import annotations

import os
import sys


def refuse_misspelt_options(argv: list[str]) -> None:
    """A misspelt ``group=option`` is refused here, in one line, before torch, Hydra or MLflow load."""
    from fedrun.core.choices import check_group_choices
    from fedrun.errors import FedrunError

    try:
        check_group_choices(argv)
    except FedrunError as err:
        print(f"fedrun: error: {err}", file=sys.stderr)
        sys.exit(2)


def main() -> None:
    if sys.argv[1:] in (["--help"], ["-h"]):
        from fedrun.app.help import text

        print(text())
        return
    if sys.argv[1:2] == ["info"]:  # every group and option, from conf/ and the modules' sources
        from fedrun.app.info import main as info

        sys.exit(info(sys.argv[2:]))
    refuse_misspelt_options(sys.argv[1:])
    if sys.argv[1:2] == ["data"]:
        from fedrun.app.data import main as data
        from fedrun.errors import FedrunError

        try:
            sys.exit(data(sys.argv[2:]))
        except FedrunError as err:
            print(f"fedrun: error: {err}", file=sys.stderr)
            sys.exit(2)
    if may_record_from_a_process(sys.argv[1:]):
        from fedrun.track.recorder import prestart

        prestart()  # MLflow imports there while Hydra composes and torch loads here (the app ends it if unused)
    from fedrun.app.cli import main as app

    app()


NOT_A_SINGLE_RUN = ("-m", "--multirun", "--cfg", "-c", "--info", "-i", "--hydra-help", "--shell-completion", "-sc",
                    "--help", "-h", "track=none", "track.process=false", "hydra.mode=MULTIRUN")


def may_record_from_a_process(argv: list[str]) -> bool:
    """Whether this command may be a single run recording to MLflow (``fedrun.track.recorder``): not a sweep, not a
    question about the config, tracking not turned off on the command line. The app decides once composed."""
    return not any(arg in NOT_A_SINGLE_RUN or arg.startswith(("--cfg=", "--info=")) for arg in argv) \
        and os.environ.get("RANK", "0") == "0"
