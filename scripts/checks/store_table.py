"""The tracking-store table of issue #36: every way the MLflow store can be broken when a run starts, each tried
end to end (the `fedrun` command, a tiny synthetic run) → exit status, seconds, traceback or not, the message.

What a user should see in every case: exit 2 within seconds, one line naming the store (or the field), no
traceback, nothing trained. The store failing *during* a run (read-only, full, a server gone) is covered by
`tests/test_track.py`; this table is the start of a run, where a user meets it first.

Needs root for two cases (a full disk is a small tmpfs, a read-only store a read-only bind mount); without
root they are left out.

  python scripts/checks/store_table.py [--out docs/results/store-table.md]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

FEDRUN = str(Path(sys.executable).parent / "fedrun")
RUN = ["dataset=synthetic", "dataset.n_users=40", "dataset.n_items=60", "sim.clients_per_round=8", "sim.max_rounds=1",
       "sim.progress=false", "sim.eval_every=0"]


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """A port that accepts connections and never answers (a hung server)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


def closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@contextlib.contextmanager
def full_disk(root: Path) -> Iterator[str]:
    """A SQLite store created on a 2 MB tmpfs that is then filled to the last byte."""
    mount = root / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True, capture_output=True)
    try:
        uri = f"sqlite:///{mount / 'mlflow.db'}"
        subprocess.run([sys.executable, "-c", f"from mlflow.tracking import MlflowClient; "
                        f"MlflowClient('{uri}').search_experiments()"], check=True, capture_output=True)
        with open(mount / "filler", "wb") as filler, contextlib.suppress(OSError):
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
        yield uri
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


@contextlib.contextmanager
def read_only(root: Path) -> Iterator[str]:
    """A store created, then its folder bind-mounted read-only (root ignores file modes, not a read-only mount)."""
    folder = root / "ro"
    folder.mkdir()
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    subprocess.run([sys.executable, "-c", f"from mlflow.tracking import MlflowClient; "
                    f"MlflowClient('{uri}').search_experiments()"], check=True, capture_output=True)
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True, capture_output=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True, capture_output=True)
        yield uri
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)


def cases(root: Path) -> list[tuple[str, Callable[[], contextlib.AbstractContextManager[str]], list[str]]]:
    """(failure, a context giving the store URI, extra overrides)."""
    def fixed(uri: str) -> Callable[[], contextlib.AbstractContextManager[str]]:
        return lambda: contextlib.nullcontext(uri)

    (root / "text.db").write_text("not a database\n")
    (root / "folder.db").mkdir()
    (root / "file").write_text("")
    as_root = os.geteuid() == 0
    out = [
        ("a server that refuses (nothing listens on the port)", fixed(closed_port()), []),
        ("a server that accepts and never answers", silent_server, []),
        ("an unknown scheme", fixed("ftp://127.0.0.1/store"), []),
        ("a file that is not a SQLite database", fixed(f"sqlite:///{root / 'text.db'}"), []),
        ("a folder where the database file belongs", fixed(f"sqlite:///{root / 'folder.db'}"), []),
        ("a folder that cannot exist (under a file)", fixed(f"sqlite:///{root / 'file' / 'x' / 'mlflow.db'}"), []),
        ("an experiment name of 600 characters", fixed(f"sqlite:///{root / 'ok.db'}"),
         ["track.experiment=" + "x" * 600]),
        ("an experiment name with '@'", fixed(f"sqlite:///{root / 'ok.db'}"), ["track.experiment=a@b"]),
    ]
    if as_root:
        out += [("a full disk (the store's tmpfs filled)", lambda: full_disk(root), []),
                ("a read-only store (its folder mounted read-only)", lambda: read_only(root), [])]
    return out


def attempt(uri: str, extra: list[str], workdir: Path) -> tuple[int, float, bool, str]:
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "FEDRUN_CACHE_DIR": str(workdir / "cache"),
           "HOME": str(workdir)}
    command = [FEDRUN, *RUN, *extra]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=workdir, timeout=600)
    seconds = time.perf_counter() - started
    lines = [line for line in result.stderr.splitlines() if line.strip() and "Warning" not in line]
    named = [line for line in lines if line.startswith(("fedrun:", "Error", "error"))]
    message = (named or lines or [""])[0 if named else -1]
    return result.returncode, seconds, "Traceback" in result.stderr, message.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results/store-table.md"))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        for failure, store, extra in cases(root):
            workdir = Path(tempfile.mkdtemp(dir=root))
            workdir.chmod(0o777)
            with store() as uri:
                code, seconds, traceback, message = attempt(uri, extra, workdir)
            rows.append(f"| {failure} | {code} | {seconds:.1f} | {'yes' if traceback else 'no'} | {message[:240]} |")
            shutil.rmtree(workdir, ignore_errors=True)
    lines = ["# Tracking-store table (issue #36)", "",
             "`python scripts/checks/store_table.py` (as root): each broken store tried with a one-round synthetic run "
             f"(`fedrun {' '.join(RUN)}`, the store in `MLFLOW_TRACKING_URI`).", "",
             "| store | exit | seconds | traceback | message |", "|---|---|---|---|---|", *rows]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
