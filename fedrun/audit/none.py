"""No audit: the server's view is not attacked."""

from __future__ import annotations

from dataclasses import dataclass

from fedrun.audit.base import Auditor


@dataclass
class NoAuditConfig:
    pass


class NoAudit(Auditor):
    Config = NoAuditConfig
    active = False
