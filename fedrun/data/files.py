"""Locate dataset files, verify their sha256, fetch them from their public address if absent.

Datasets are never shipped with fedrun. They are read from ``$FEDRUN_DATA_DIR/<dataset>/``
(default ``~/.cache/fedrun/datasets``). A missing file is downloaded from its public
address when it has one and the network answers; otherwise the error says which file to
put where and where it comes from.
"""

from __future__ import annotations

import hashlib
import io
import os
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from fedrun.errors import DataError

DOWNLOAD_TIMEOUT_S = 20


@dataclass(frozen=True)
class DataFile:
    """One file of a dataset: its path under the dataset folder and its sha256.

    ``url`` is the public address of the file, or of a zip archive holding it as
    ``member``. ``None`` when the file has no canonical public download.
    """

    path: str
    sha256: str
    url: str | None = None
    member: str | None = None


def data_dir() -> Path:
    return Path(os.environ.get("FEDRUN_DATA_DIR", Path.home() / ".cache" / "fedrun" / "datasets")).expanduser()


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
        _fetch(dataset, spec, path)
    if not path.is_file():
        raise DataError(f"{path} is not a file (a folder or a special file stands where the data file belongs); "
                        "put the original file there.")
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


def _fetch(dataset: str, spec: DataFile, path: Path) -> None:
    where = f"Put the file at {path} (set FEDRUN_DATA_DIR to the folder holding '{dataset}/')"
    if spec.url is None:
        raise DataError(f"Missing data file {path}. It has no public download address. {where}.")
    try:
        with urllib.request.urlopen(spec.url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            payload = response.read()
    except OSError as err:
        raise DataError(
            f"Missing data file {path}, and downloading it from {spec.url} failed ({err}). "
            f"{where}; it comes from {spec.url}" + (f" (member {spec.member})" if spec.member else "") + "."
        ) from None
    if spec.member is not None:
        with zipfile.ZipFile(io.BytesIO(payload)) as archive:
            payload = archive.read(spec.member)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".part")
    tmp.write_bytes(payload)
    tmp.replace(path)


def digest(specs: list[DataFile]) -> str:
    """A short digest naming exactly these file versions (logged with each run)."""
    joined = "".join(sorted(spec.path + spec.sha256 for spec in specs))
    return hashlib.sha256(joined.encode()).hexdigest()[:16]
