"""Dataset files by name: a download from a (local) HTTP server is verified before it is kept, a zip member is
extracted, a failure names the file, the address and where to put it; ``fedrun data`` lists every dataset's files
with their state; every public address is pinned to a commit. No test here reaches the network."""

from __future__ import annotations

import hashlib
import http.server
import io
import re
import threading
import zipfile
from pathlib import Path

import pytest

from fedrun.app import data
from fedrun.core.choices import options
from fedrun.data import files
from fedrun.data.files import DataFile, resolve
from fedrun.errors import ConfigError, DataError

ROOT = Path(__file__).resolve().parents[1]
PAYLOAD = b"0 1 2 3\n1 2 3\n"
SHA = hashlib.sha256(PAYLOAD).hexdigest()


@pytest.fixture()
def server(tmp_path):
    """A local HTTP server over ``tmp_path/www`` (file.txt and archive.zip holding data/file.txt); its address."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "file.txt").write_bytes(PAYLOAD)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("data/file.txt", PAYLOAD)
    (www / "archive.zip").write_bytes(buffer.getvalue())

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(www), **kwargs)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture()
def online(monkeypatch, tmp_path):
    monkeypatch.delenv("FEDRUN_OFFLINE")
    monkeypatch.setattr(files, "DOWNLOAD_RETRIES", 0)  # a failure at once (pooch waits 1, 2, 3 s between tries)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "os-cache"))  # the archives' cache, on Linux


def test_a_missing_file_is_downloaded_verified_and_kept(server, online, tmp_path):
    spec = DataFile("part/train.txt", SHA, f"{server}/file.txt")
    path = resolve("toy", spec, tmp_path / "data")
    assert path == tmp_path / "data" / "toy" / "part" / "train.txt" and path.read_bytes() == PAYLOAD


def test_a_zip_member_is_extracted_and_the_archive_cached(server, online, tmp_path):
    spec = DataFile("train.txt", SHA, f"{server}/archive.zip", member="data/file.txt")
    assert resolve("toy", spec, tmp_path / "data").read_bytes() == PAYLOAD
    assert list((tmp_path / "os-cache").rglob("archive.zip"))  # kept in the OS cache for the next member


def test_a_download_with_other_bytes_is_refused_and_not_kept(server, online, tmp_path):
    spec = DataFile("train.txt", "0" * 64, f"{server}/file.txt")
    with pytest.raises(DataError, match=r"Missing data file .*toy/train.txt, and downloading it from http.*failed"):
        resolve("toy", spec, tmp_path / "data")
    assert not (tmp_path / "data" / "toy" / "train.txt").exists()


def test_an_unreachable_address_names_the_file_the_address_and_where_to_put_it(online, tmp_path):
    spec = DataFile("train.txt", SHA, "http://127.0.0.1:9/nothing.txt")  # the discard port: refused at once
    with pytest.raises(DataError, match=r"downloading it from http://127.0.0.1:9/nothing.txt failed .* Put the file at "
                                        r".*toy/train.txt \(set FEDRUN_DATA_DIR"):
        resolve("toy", spec, tmp_path / "data")


def test_offline_refuses_to_download(tmp_path):
    spec = DataFile("train.txt", SHA, "http://127.0.0.1:9/nothing.txt")
    with pytest.raises(DataError, match="FEDRUN_OFFLINE forbids downloading it"):
        resolve("toy", spec, tmp_path / "data")


def test_a_file_with_no_address_says_fedrun_data_tells_its_source(tmp_path):
    with pytest.raises(DataError, match=r"no public download address \(`fedrun data toy` says where it comes from\)"):
        resolve("toy", DataFile("train.txt", SHA), tmp_path / "data")


def test_every_dataset_lists_its_files_and_their_source():
    for name in options("dataset"):
        cls = data.dataset_class(name)
        assert cls.source, f"{name}: no source recorded"
        for spec in cls.catalogue():
            if spec.sha256 is None:  # no published digest of the member: its archive's is, checked on download
                assert spec.url and spec.member and re.fullmatch(r"[0-9a-f]{32}", spec.archive_md5 or ""), spec
                continue
            assert re.fullmatch(r"[0-9a-f]{64}", spec.sha256), (name, spec.path)
            if spec.url and "githubusercontent" in spec.url:  # an author's repository: pinned, or its bytes may move
                assert re.search(r"/[0-9a-f]{40}/", spec.url) or "/master/" in spec.url, spec.url


def test_the_listing_counts_present_missing_and_corrupt_files(tmp_path):
    root = tmp_path / "data"
    steam = data.dataset_class("steam").catalogue()
    (root / "steam").mkdir(parents=True)
    (root / "steam" / steam[0].path).write_bytes(b"not the file")
    found = {f.spec.path: f.state for f in data.states("steam", root)}
    assert found == {steam[0].path: data.MISMATCH, steam[1].path: data.DOWNLOADABLE}
    assert {f.state for f in data.states("ciao", root)} == {data.BY_HAND}
    text = data.overview(root)
    assert all(name in text for name in options("dataset"))
    assert re.search(r"steam +2 +0 +1 +0 +1", text)  # files, present, download, by hand, bad
    detail = data.detail("ml-1m", root)
    assert "sequences.txt" in detail and "derived from the files above" in detail and "ml-1m.zip" in detail
    assert {f.state for f in data.states("ml-1m", root)} == {data.DOWNLOADABLE}  # every variant, by name


def test_fedrun_data_refuses_an_unknown_name_with_the_closest():
    with pytest.raises(ConfigError, match=r"dataset.*ml1m.*closest: ml-1m"):
        data.main(["ml1m"])


def test_an_archive_is_checked_by_its_published_md5(server, online, tmp_path):
    archive = (tmp_path / "www" / "archive.zip").read_bytes()
    good = DataFile("train.txt", None, f"{server}/archive.zip", "data/file.txt", hashlib.md5(archive).hexdigest())
    assert resolve("toy", good, tmp_path / "data").read_bytes() == PAYLOAD
    bad = DataFile("other.txt", None, f"{server}/archive.zip", "data/file.txt", "0" * 32)
    with pytest.raises(DataError, match="downloading it from .*archive.zip .*failed"):
        resolve("other", bad, tmp_path / "fresh")


def test_ml1m_sequences_are_derived_from_grouplens_ratings(tmp_path, monkeypatch):
    """A missing sequences.txt is written from ratings.dat (GroupLens' format; here a tiny one placed by hand, as
    the real one would be fetched) and checked against its pinned digest; a derivation that differs is refused."""
    from fedrun.dataset import ml_1m

    ratings = "1::20::5::300\n1::10::3::100\n2::10::4::50\n1::30::1::100\n"  # user 1: 10 and 30 tie, in file order
    expected = "1 10 30 20\n2 10\n"
    (tmp_path / "ml-1m").mkdir()
    (tmp_path / "ml-1m" / "ratings.dat").write_text(ratings)
    spec = DataFile("sequences.txt", hashlib.sha256(expected.encode()).hexdigest(), derive=ml_1m.derive_sequences)
    assert resolve("ml-1m", spec, tmp_path).read_text() == expected
    (tmp_path / "ml-1m" / "sequences.txt").unlink()
    with pytest.raises(DataError, match=r"Checksum mismatch for .*ml-1m/sequences.txt"):
        resolve("ml-1m", DataFile("sequences.txt", "0" * 64, derive=ml_1m.derive_sequences), tmp_path)
    (tmp_path / "ml-1m" / "sequences.txt").unlink()
    (tmp_path / "ml-1m" / "ratings.dat").unlink()  # offline (the suite), nothing to derive from: both files named
    with pytest.raises(DataError, match=r"sequences.txt, which is derived from ml-1m's ratings.dat: Missing data file "
                                        r".*ratings.dat, and FEDRUN_OFFLINE forbids"):
        resolve("ml-1m", spec, tmp_path)


def readme_commands() -> list[list[str]]:
    """The README's commands that run one experiment or a sweep (``fedrun method=…``, ``fedrun -m …``)."""
    block = (ROOT / "README.md").read_text().split("## Run", 1)[1].split("```", 2)[1]
    lines = [line.split("#", 1)[0].split() for line in block.splitlines()]
    return [words[1:] for words in lines if words[:1] == ["fedrun"] and "method=" in " ".join(words)]


def test_the_readme_runs_on_data_a_newcomer_can_fetch():
    """Each of the README's run commands reads only files that have a public address or are derived from files that
    have one: on a fresh machine with a network, every one runs (issue #66: six of nine needed files put by hand)."""
    from fedrun.app.build import parse_config, resolve_target
    from tests.conftest import compose_cfg

    commands = readme_commands()
    assert len(commands) >= 9
    for words in commands:
        overrides = [w.split(",")[0] for w in words if w != "-m"]  # a sweep: its first job stands for its data
        cfg = compose_cfg(overrides)
        cls = resolve_target(cfg.dataset._target_, "dataset")
        config = {k: v for k, v in cfg.dataset.items() if k != "_target_"}
        for spec in cls(parse_config(cls.Config, config, "dataset")).files():
            assert spec.url or spec.derive, f"`fedrun {' '.join(words)}` needs {cls.name}/{spec.path}, put by hand"


@pytest.mark.parametrize("line", ["1::x::3::5", "1::3::3", "1:3:3:5"])
def test_a_malformed_grouplens_ratings_line_is_named(line, tmp_path):
    from fedrun.dataset.ml_1m import read_ratings

    (tmp_path / "ratings.dat").write_text(f"1::2::3::4\n{line}\n")
    with pytest.raises(DataError, match=r"Malformed line 2 in .*ratings.dat: expected 4 numeric columns"):
        read_ratings(tmp_path / "ratings.dat")
