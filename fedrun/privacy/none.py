"""No privacy mechanism: uploads leave the client as computed."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.privacy.base import Privacy
from fedrun.types import Uploads


@dataclass
class NoPrivacyConfig:
    pass


class NoPrivacy(Privacy):
    Config = NoPrivacyConfig
    transforms_uploads = False

    def apply(self, uploads: Uploads, generator: torch.Generator) -> Uploads:
        return uploads
