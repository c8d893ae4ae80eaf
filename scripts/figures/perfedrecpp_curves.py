"""``python -m fedrun.app.perfedrecpp_curves``, kept here beside the other figures: what it draws and its options are
in ``fedrun/app/perfedrecpp_curves.py``."""

from fedrun.app.perfedrecpp_curves import main

if __name__ == "__main__":
    raise SystemExit(main())
