"""``python -m fedrun.app.privacy_utility``, kept here beside the other figures: what it draws and its options are
in ``fedrun/app/privacy_utility.py``."""

from fedrun.app.privacy_utility import main

if __name__ == "__main__":
    raise SystemExit(main())
