"""``python -m fedrun.app.regime_map``, kept here beside the other figures: what it draws and its options are in
``fedrun/app/regime_map.py``."""

from fedrun.app.regime_map import main

if __name__ == "__main__":
    raise SystemExit(main())
