"""Locate dataset files, verify their sha256, fetch them from their public address if absent.

Datasets are never shipped with fedrun. They are read from ``$FEDRUN_DATA_DIR/<dataset>/``
(default: the OS cache folder, ``~/.cache/fedrun/datasets`` on Linux). A missing file is downloaded
from its public address when it has one (pooch: retries, a progress bar on a terminal, the archive kept
in the OS cache) unless ``FEDRUN_OFFLINE=1``; otherwise the error says which file to put where and where
it comes from. ``fedrun data`` lists every dataset's files and their state (``fedrun.app.data``).
"""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fedrun.errors import DataError

DOWNLOAD_TIMEOUT_S = 30
DOWNLOAD_RETRIES = 3


@dataclass(frozen=True)
class DataFile:
    """One file of a dataset: its path under the dataset folder and its sha256.

    ``url`` is the public address of the file, or of a zip archive holding it as
    ``member``. ``None`` when the file has no canonical public download. ``archive_md5`` is the checksum the
    archive's publisher gives, checked on download; a member whose own digest is published nowhere has
    ``sha256=None``, and its dataset checks what it reads against a digest derived from it (``Ml1m``'s ratings).
    ``derive`` writes a file that has no address of its own from files that have one (``Ml1m``'s sequences from
    its ratings); what it writes is checked against ``sha256`` like a download.
    """

    path: str
    sha256: str | None
    url: str | None = None
    member: str | None = None
    archive_md5: str | None = None
    derive: Callable[[Path], None] | None = None

    @property
    def identity(self) -> str:
        """What names this file's version: its sha256, or its archive's published md5."""
        return self.sha256 or f"md5:{self.archive_md5}"


def github_file(repo: str, commit: str, path: str) -> str:
    """The raw address of ``path`` in GitHub repository ``repo`` at ``commit`` (pinned: the bytes cannot move)."""
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path.replace('+', '%2B')}"


def cache_root() -> Path:
    """The OS cache folder of fedrun (``~/.cache/fedrun`` on Linux, ``~/Library/Caches/fedrun`` on macOS)."""
    import pooch

    return Path(pooch.os_cache("fedrun"))


def data_dir() -> Path:
    configured = os.environ.get("FEDRUN_DATA_DIR")
    return Path(configured).expanduser() if configured else cache_root() / "datasets"


def offline() -> bool:
    """``FEDRUN_OFFLINE=1``: never download (a cluster node without network, the test suite)."""
    return os.environ.get("FEDRUN_OFFLINE", "").strip().lower() in ("1", "true", "yes")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def resolve(dataset: str, spec: DataFile, root: Path | None = None) -> Path:
    """Return the verified local path of ``spec``, downloading it first if it is absent."""
    path = (root or data_dir()) / dataset / spec.path
    if not path.exists():
        fetch(dataset, spec, path)
    if not path.is_file():
        raise DataError(f"{path} is not a file (a folder or a special file stands where the data file belongs); "
                        "put the original file there.")
    if spec.sha256 is None:
        return path  # no published digest: the dataset checks what it reads
    try:
        actual = sha256_of(path)
    except OSError as err:
        raise DataError(f"Data file {path} cannot be read ({err.strerror or err}); check its permissions.") from None
    if actual != spec.sha256:
        raise DataError(
            f"Checksum mismatch for {path}: sha256 is {actual}, expected {spec.sha256}. "
            f"The file is corrupt or a different version; replace it with the original"
            + (f" from {spec.url}" if spec.url else "")
            + "."
        )
    return path


def fetch(dataset: str, spec: DataFile, path: Path) -> None:
    """Download ``spec`` to ``path`` (a zip archive's ``member`` is extracted from the archive, which stays in the
    OS cache); a missing address, ``FEDRUN_OFFLINE`` or a failed download is a :class:`DataError` naming the
    file, where to put it and where it comes from."""
    where = f"Put the file at {path} (set FEDRUN_DATA_DIR to the folder holding '{dataset}/')"
    source = f"{spec.url}" + (f" (member {spec.member})" if spec.member else "")
    if spec.url is None and spec.derive is not None:
        spec.derive(path)
        return
    if spec.url is None:
        raise DataError(f"Missing data file {path}. It has no public download address (`fedrun data {dataset}` "
                        f"says where it comes from). {where}.")
    if offline():
        raise DataError(f"Missing data file {path}, and FEDRUN_OFFLINE forbids downloading it. {where}; it comes "
                        f"from {source}.")
    try:
        if spec.member is None:
            _download(spec.url, path.parent, path.name, f"sha256:{spec.sha256}" if spec.sha256 else None)
        else:
            archive_hash = f"md5:{spec.archive_md5}" if spec.archive_md5 else None
            archive = _download(spec.url, cache_root() / "archives", Path(spec.url).name, archive_hash)
            _extract(archive, spec.member, path)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
        raise DataError(f"Missing data file {path}, and downloading it from {source} failed "
                        f"({type(err).__name__}: {err}). {where}; it comes from {source}.") from None


def _download(url: str, folder: Path, name: str, known_hash: str | None) -> Path:
    """``url`` saved as ``folder/name`` with retries and, on a terminal, a progress bar; a known hash
    (``sha256:…``, ``md5:…``) is checked before the file is kept (pooch raises ValueError on a mismatch and
    removes the file)."""
    import pooch

    progress = sys.stderr.isatty()
    store = pooch.create(path=folder, base_url="", registry={name: known_hash},
                         urls={name: url}, retry_if_failed=DOWNLOAD_RETRIES)
    downloader = pooch.HTTPDownloader(progressbar=progress, timeout=DOWNLOAD_TIMEOUT_S)
    return Path(store.fetch(name, downloader=downloader))


def _extract(archive: Path, member: str, path: Path) -> None:
    with zipfile.ZipFile(archive) as opened:
        payload = opened.read(member)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".part")
    partial.write_bytes(payload)
    partial.replace(path)


def digest(specs: list[DataFile]) -> str:
    """A short digest naming exactly these file versions (logged with each run)."""
    joined = "".join(sorted(spec.path + spec.identity for spec in specs))
    return hashlib.sha256(joined.encode()).hexdigest()[:16]
