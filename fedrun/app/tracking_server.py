"""``fedrun-tracking-server start|stop|status``: a shared MLflow tracking server on PostgreSQL, on this machine.

``start`` initialises a PostgreSQL cluster under ``--root`` (``outputs/tracking/`` by default) on its first call, starts
it on loopback, creates the ``mlflow`` database, starts ``mlflow server`` with that database as its backend store and
``<root>/artifacts`` as its artifact store (the server proxies artifacts, so a client on another machine uploads
through it), waits for its health check and prints the ``MLFLOW_TRACKING_URI`` to export. ``stop`` stops both. A
second ``start`` reuses the cluster and its ports, so a restarted server holds every run recorded before.

PostgreSQL refuses to run as root: run as root (a container, CI), the cluster belongs to the ``postgres`` user (its
folder is handed to it, so every folder above it must be one that user can enter) and its commands run through
``runuser``. The database password is generated once and kept in ``<root>/pgpass`` (mode 600), libpq's password
file, which the MLflow server reads: no password appears in a command line or in the printed URI.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from fedrun.errors import FedrunError

USER, DATABASE = "fedrun", "mlflow"
HEALTH_SECONDS = 120  # the first start creates MLflow's tables (a minute on 2 slow cores)
MLFLOW_PORT = 5000  # mlflow ui's own default; another free port when it is taken


class ServerError(FedrunError):
    """The tracking server could not be set up, started or stopped."""


@dataclass
class State:
    """What ``start`` chose, kept in ``<root>/server.json`` so a restart reuses it."""

    postgres_port: int
    mlflow_port: int
    mlflow_pid: int | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.mlflow_port}"

    def backend(self) -> str:
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.postgres_port}/{DATABASE}"


def postgres_bin(name: str) -> str:
    """A PostgreSQL server program (``initdb``, ``pg_ctl``): Debian's newest under /usr/lib/postgresql, or on PATH."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(Path(p).parts[4]))
    path = found[-1] if found else shutil.which(name)
    if path is None:
        raise ServerError(f"PostgreSQL's server program {name!r} was not found: `make install` installs PostgreSQL "
                          "(as root, with apt-get); elsewhere `sudo apt-get install postgresql` or your system's "
                          "package")
    return path


def as_owner(command: list[str]) -> list[str]:
    """``command`` run as the cluster's owner: this user, or ``postgres`` when this is root."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def free_port(preferred: int | None = None) -> int:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", preferred or 0))
        except OSError:
            probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run(command: list[str], what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise ServerError(f"{what} failed: {detail[-1] if detail else f'exit status {result.returncode}'}")


def hand_to_postgres(path: Path) -> None:
    """As root: ``path`` becomes the postgres user's, and every folder above it must let that user through."""
    if os.geteuid() != 0:
        return
    shutil.chown(path, "postgres", "postgres")
    for parent in path.resolve().parents:
        if not os.stat(parent).st_mode & 0o001:
            raise ServerError(f"the postgres user cannot enter {parent} (mode {oct(os.stat(parent).st_mode)[-3:]}), "
                              f"above the cluster's folder {path}: give --root a folder it can reach (or chmod o+x "
                              f"{parent})")


def init_cluster(root: Path, state: State) -> None:
    """Create the cluster (scram-sha-256 passwords, TCP on loopback only, no Unix socket) and its password file."""
    data = root / "postgres"
    data.mkdir(mode=0o700)
    hand_to_postgres(data)
    password = secrets.token_urlsafe(24)
    pwfile = root / ".initdb-password"
    pwfile.touch(mode=0o600)  # never readable by others, not even while initdb runs
    pwfile.write_text(password + "\n")
    hand_to_postgres(pwfile)
    try:
        run(as_owner([postgres_bin("initdb"), "-D", str(data), "-U", USER, "--auth=scram-sha-256",
                      f"--pwfile={pwfile}", "-E", "UTF8"]), "initdb (creating the PostgreSQL cluster)")
    finally:
        pwfile.unlink()
    with open(data / "postgresql.conf", "a") as conf:
        conf.write(f"\n# fedrun-tracking-server\nlisten_addresses = '127.0.0.1'\nport = {state.postgres_port}\n"
                   "unix_socket_directories = ''\n")
    passfile = root / "pgpass"
    passfile.touch(mode=0o600)
    passfile.write_text(f"127.0.0.1:{state.postgres_port}:*:{USER}:{password}\n")


def start_postgres(root: Path, state: State) -> None:
    log = root / "postgres.log"
    log.touch()
    hand_to_postgres(log)
    run(as_owner([postgres_bin("pg_ctl"), "-D", str(root / "postgres"), "-l", str(log), "-w", "-t", "60", "start"]),
        f"starting PostgreSQL (its log: {log})")
    import psycopg

    with psycopg.connect(host="127.0.0.1", port=state.postgres_port, user=USER, dbname="postgres",
                         passfile=str(root / "pgpass"), autocommit=True, connect_timeout=10) as db:
        if db.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
            db.execute(f"CREATE DATABASE {DATABASE}")


def postgres_running(root: Path) -> bool:
    status = subprocess.run(as_owner([postgres_bin("pg_ctl"), "-D", str(root / "postgres"), "status"]),
                            capture_output=True)
    return status.returncode == 0


def healthy(uri: str, timeout: float = 2) -> bool:
    try:
        urllib.request.urlopen(f"{uri}/health", timeout=timeout).close()
        return True
    except OSError:
        return False


def start_mlflow(root: Path, state: State) -> int:
    """``mlflow server`` in its own session (it outlives this command), logging to ``<root>/mlflow.log``."""
    (root / "artifacts").mkdir(exist_ok=True)
    env = {**os.environ, "PGPASSFILE": str(root / "pgpass")}
    mlflow = shutil.which("mlflow") or str(Path(sys.executable).parent / "mlflow")
    with open(root / "mlflow.log", "ab") as log:
        server = subprocess.Popen([mlflow, "server", "--backend-store-uri", state.backend(), "--artifacts-destination",
                                   str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(state.mlflow_port),
                                   "--workers", "1"], stdout=log, stderr=log, env=env, start_new_session=True)
    deadline = time.monotonic() + HEALTH_SECONDS
    while not healthy(state.uri):
        if server.poll() is not None or time.monotonic() > deadline:
            stop_process(server.pid)
            tail = (root / "mlflow.log").read_text(errors="replace").strip().splitlines()[-1:]
            raise ServerError(f"mlflow server did not answer at {state.uri} within {HEALTH_SECONDS} s"
                              f"{': ' + tail[0] if tail else ''} (its log: {root / 'mlflow.log'})")
        time.sleep(0.5)
    return server.pid


def stop_process(pid: int) -> None:
    """SIGTERM to the process's session (the server and its workers), SIGKILL after 15 s."""
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


def load(root: Path) -> State | None:
    path = root / "server.json"
    return State(**json.loads(path.read_text())) if path.exists() else None


def save(root: Path, state: State) -> None:
    (root / "server.json").write_text(json.dumps(asdict(state)) + "\n")


def start(root: Path, port: int | None) -> State:
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise ServerError("the PostgreSQL driver psycopg is not installed: `pip install 'fedrun[tracking]'` (`make "
                          "install` installs it)") from None
    state = load(root)
    if state is not None and state.mlflow_pid is not None and healthy(state.uri):
        return state  # already running
    if state is None:
        state = State(postgres_port=free_port(), mlflow_port=free_port(port or MLFLOW_PORT))
        init_cluster(root, state)
    elif port is not None:
        state.mlflow_port = port
    if not postgres_running(root):
        start_postgres(root, state)
    state.mlflow_pid = start_mlflow(root, state)
    save(root, state)
    return state


def stop(root: Path) -> bool:
    """Stop the MLflow server, then PostgreSQL; whether anything was running."""
    root = root.resolve()
    state = load(root)
    if state is None:
        return False
    was_running = state.mlflow_pid is not None
    if state.mlflow_pid is not None:
        stop_process(state.mlflow_pid)
        state.mlflow_pid = None
        save(root, state)
    if postgres_running(root):
        run(as_owner([postgres_bin("pg_ctl"), "-D", str(root / "postgres"), "-m", "fast", "-w", "stop"]),
            "stopping PostgreSQL")
        was_running = True
    return was_running


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="fedrun-tracking-server", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--root", type=Path, default=Path("outputs/tracking"),
                        help="where the cluster, the artifacts and the logs live (default: outputs/tracking)")
    parser.add_argument("--port", type=int, default=None, help=f"the MLflow server's port (default {MLFLOW_PORT}, "
                        "or a free one when it is taken; a restart reuses the last one)")
    args = parser.parse_args(argv)
    try:
        if args.action == "start":
            state = start(args.root, args.port)
            print(f"MLflow tracking server on PostgreSQL: {state.uri} (runs table: {state.uri}/#/experiments/0/runs)\n"
                  f"export MLFLOW_TRACKING_URI={state.uri}")
        elif args.action == "stop":
            print("stopped" if stop(args.root) else f"nothing to stop under {args.root}")
        else:
            known = load(args.root.resolve())
            up = known is not None and healthy(known.uri)
            print(f"running: {known.uri}" if up and known else "not running")
            sys.exit(0 if up else 3)
    except FedrunError as err:
        print(f"fedrun-tracking-server: error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
