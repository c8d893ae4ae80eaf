"""No audit: the server's view is not attacked."""

from __future__ import annotations

from fedrun.audit.base import Auditor
from fedrun.audit.config import NoAuditConfig


class NoAudit(Auditor):
    Config = NoAuditConfig
    active = False
