"""Record nothing (quick runs, tests)."""

from __future__ import annotations

from dataclasses import dataclass

from fedrun.track.base import Tracker


@dataclass
class NoTrackingConfig:
    pass


class NoTracking(Tracker):
    Config = NoTrackingConfig
