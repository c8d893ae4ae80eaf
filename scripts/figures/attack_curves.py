"""``python -m fedrun.app.attack_curves``, kept here beside the other figures: what it draws and its options are
in ``fedrun/app/attack_curves.py``."""

from fedrun.app.attack_curves import main

if __name__ == "__main__":
    raise SystemExit(main())
