"""``python -m fedrun.app.leaderboard``, kept here beside the other figures: what it draws and its options are
in ``fedrun/app/leaderboard.py``."""

from fedrun.app.leaderboard import main

if __name__ == "__main__":
    raise SystemExit(main())
