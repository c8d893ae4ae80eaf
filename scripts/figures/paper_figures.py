"""``python -m fedrun.app.paper_figures``, kept here beside the other figures: what it draws and its options are
in ``fedrun/app/paper_figures.py``."""

from fedrun.app.paper_figures import main

if __name__ == "__main__":
    raise SystemExit(main())
