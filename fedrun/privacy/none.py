"""No privacy mechanism: uploads leave the client as computed."""

from __future__ import annotations

import torch

from fedrun.privacy.base import Privacy
from fedrun.privacy.config import NoPrivacyConfig
from fedrun.types import Uploads


class NoPrivacy(Privacy):
    Config = NoPrivacyConfig
    transforms_uploads = False

    def apply(self, uploads: Uploads, generator: torch.Generator) -> Uploads:
        return uploads
