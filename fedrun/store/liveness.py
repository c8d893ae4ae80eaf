"""Is the process that owns a RUNNING run still alive?

A run ends FAILED or KILLED with its reason when its process can say so (an error, a signal). A
process that cannot (SIGKILL, the out-of-memory killer, a machine that powers off or is suspended
and restored without its processes) leaves its run RUNNING for ever: the MLflow UI shows it in
flight, and reports leave it out as unfinished. Each run records who owns it (``owner_tags``); the
next run started in the same experiment on the same machine checks the owners of the runs still
RUNNING there (``gone_reason``) and ends those whose process no longer exists. A sweep's own run
is owned by the Hydra parent process (recorded in the sweep folder), which outlives every job. The owner is one
tag, ``fedrun.owner`` (compact JSON), out of the reader's way; runs recorded before it carry the six
``fedrun.owner.*`` tags, read the same way.

"Same machine" is deliberately strict: host name, ``/etc/machine-id`` and the PID namespace must
all match (two containers from one image share a host name and machine id but not a PID
namespace), so a run owned by a process on another machine or container sharing the store is never
judged. On that machine a process is gone when the boot changed (``/proc/sys/kernel/random/boot_id``),
when no process has its pid, or when the process with its pid started at another time (a reused pid).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

SWEEP_OWNER = ".fedrun-owner.json"  # in a sweep's folder: the Hydra parent process, owner of the sweep's run
OWNER = "fedrun.owner"  # the one tag: its fields as compact JSON
HOST, MACHINE, PID_NS, BOOT, PID, STARTED = ("fedrun.owner.host", "fedrun.owner.machine", "fedrun.owner.pid_ns",
                                             "fedrun.owner.boot", "fedrun.owner.pid", "fedrun.owner.started")
FIELDS = (HOST, MACHINE, PID_NS, BOOT, PID, STARTED)  # the owner's fields (and the tags of runs before OWNER)


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")  # 'pid:[4026531836]'
    except OSError:
        return ""


def process_start(pid: int) -> str:
    """When process ``pid`` started, in clock ticks since boot (field 22 of ``/proc/<pid>/stat``); "" when
    there is no such process or no ``/proc``."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]  # the fields after the command name, which may hold spaces


def owner(pid: int | None = None) -> dict[str, str]:
    """The fields that name the process owning a run (this one by default)."""
    pid = os.getpid() if pid is None else pid
    return {HOST: socket.gethostname(), MACHINE: _read("/etc/machine-id"), PID_NS: _pid_namespace(),
            BOOT: _read("/proc/sys/kernel/random/boot_id"), PID: str(pid), STARTED: process_start(pid)}


def owner_tags(pid: int | None = None) -> dict[str, str]:
    """The run's owner as its one tag (``OWNER``)."""
    return {OWNER: json.dumps(owner(pid), separators=(",", ":"))}


def owner_of(tags: dict[str, str]) -> dict[str, str]:
    """A run's owner fields from its tags: the ``OWNER`` tag, or the six tags of a run recorded before it."""
    try:
        recorded = json.loads(tags[OWNER]) if OWNER in tags else {}
    except ValueError:
        recorded = {}
    return {key: str(recorded.get(key, tags.get(key, ""))) for key in FIELDS if key in recorded or key in tags}


def gone_reason(tags: dict[str, str]) -> str | None:
    """Why the process that owns a run with ``tags`` is gone, or None: alive, on another machine or
    container, or not known (a run from before owners were recorded, a system without ``/proc``)."""
    tags = owner_of(tags)
    here = owner()
    if not tags.get(PID) or any(tags.get(key) != here[key] for key in (HOST, MACHINE, PID_NS)):
        return None
    if not here[PID_NS] or not here[BOOT] or not tags.get(BOOT):
        return None  # no /proc: nothing certain to go on
    pid, where = tags[PID], f"process {tags[PID]} on {tags[HOST]}"
    if tags[BOOT] != here[BOOT]:
        return f"its {where} is gone: the machine has restarted since"
    started = process_start(int(pid))
    if not started:
        return f"its {where} is gone (killed without a chance to record its end: SIGKILL, out of memory, a " \
               "machine suspended without its processes)"
    if tags.get(STARTED) and started != tags[STARTED]:
        return f"its {where} is gone (the pid now belongs to another process)"
    return None
