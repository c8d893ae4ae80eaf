"""Every loader on the real files: statistics equal MANIFEST.md; corruption is caught by checksum."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from fedrun.app.build import parse_config
from fedrun.dataset import (
    amazon_music,
    beauty,
    ciao,
    douban,
    filmtrust,
    gowalla,
    ml_1m,
    ml_100k,
    sports,
    steam,
    yelp,
    yelp_perfedrec,
)
from fedrun.errors import DataError
from tests.conftest import DATA_DIR, needs_data

pytestmark = [needs_data, pytest.mark.integration]

PREDEFINED = {"split": {"protocol": "predefined"}}
# (class, overrides, users, items, interactions, unique pairs or None) — from MANIFEST.md
MANIFEST = [
    (ml_100k.Ml100k, {}, 943, 1682, 100_000, None),
    (ml_1m.Ml1m, {}, 6040, 3706, 1_000_209, None),
    (ml_1m.Ml1m, {"variant": "split80-20", **PREDEFINED}, 6040, 3706, 1_000_208, None),
    (beauty.Beauty, {}, 22_363, 12_101, 198_502, None),
    (sports.Sports, {}, 35_598, 18_357, 296_337, None),
    (yelp.Yelp, {}, 30_431, 20_033, 316_354, 304_524),
    (gowalla.Gowalla, PREDEFINED, 29_858, 40_981, 1_027_370, None),
    (yelp_perfedrec.YelpPerfedrec, PREDEFINED, 5_224, 7_690, 123_024, None),
    (amazon_music.AmazonMusic, PREDEFINED, 16_566, 11_797, 169_781, 145_292),
    (steam.Steam, PREDEFINED, 3_753, 5_092, 114_713, None),
    (filmtrust.Filmtrust, {"split": {"protocol": "random_ratio"}}, 1_508, 2_071, 35_497, None),
    (ciao.Ciao, {"split": {"protocol": "random_ratio"}}, 7_375, 105_114, 284_086, None),
    (douban.Douban, PREDEFINED, 3_000, 3_000, 136_891, None),
]


@pytest.mark.parametrize("cls,over,n_users,n_items,n_rows,n_pairs", MANIFEST,
                         ids=[f"{c.name}-{o.get('variant', '')}" for c, o, *_ in MANIFEST])
def test_loader_statistics_equal_manifest(cls, over, n_users, n_items, n_rows, n_pairs):
    dataset = cls(parse_config(cls.Config, over, "dataset"))
    parts = dataset.load_parts()
    assert sum(len(p) for p in parts.values()) == n_rows
    first = next(iter(parts.values()))
    assert (first.n_users, first.n_items) == (n_users, n_items)
    if n_pairs is not None:
        user = np.concatenate([p.user for p in parts.values()])
        item = np.concatenate([p.item for p in parts.values()])
        assert np.unique(user * n_items + item).size == n_pairs
    split = dataset.load()
    assert len(split.train) + (len(split.valid) if split.valid else 0) + len(split.test) == n_rows
    assert dataset.load_parts().keys() == parts.keys()  # second read comes from the cache


def test_ml100k_predefined_folds_are_grouplens_files():
    fold = ml_100k.Ml100k(parse_config(ml_100k.Ml100k.Config, {"split": {"protocol": "predefined", "fold": 2}},
                                       "dataset")).load()
    assert (len(fold.train), len(fold.test)) == (80_000, 20_000)
    assert fold.test.rating is not None and set(np.unique(fold.test.rating)) <= {1, 2, 3, 4, 5}


def test_filmtrust_lightfr_split_has_one_rating_scale():
    """The authors' validation/test files keep raw 0.5–4 ratings; they are mapped onto the training
    file's 0.01–1.01 scale, the same eight levels."""
    config = {"variant": "lightfr", **PREDEFINED}
    split = filmtrust.Filmtrust(parse_config(filmtrust.Filmtrust.Config, config, "dataset")).load()
    levels = np.unique(split.train.rating)
    assert levels.size == 8 and levels.min() == pytest.approx(0.01) and levels.max() == pytest.approx(1.01)
    for part in (split.valid, split.test):
        np.testing.assert_allclose(np.unique(part.rating), levels, rtol=0, atol=1e-6)
    # the 0.0 rows are the code's sampled negatives: 49 per user and part, listed beside the split
    assert split.negatives is not None and set(split.negatives) == {"valid", "test"}
    for part, negatives in split.negatives.items():
        assert np.bincount(negatives.user, minlength=split.n_users).tolist() == [49] * split.n_users, part


def test_corrupt_file_raises_checksum_error(tmp_path, monkeypatch):
    shutil.copytree(DATA_DIR / "steam", tmp_path / "data" / "steam")
    path = tmp_path / "data" / "steam" / "test.txt"
    path.chmod(0o644)
    path.write_bytes(path.read_bytes().replace(b"0 39", b"0 38", 1))
    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "data"))
    dataset = steam.Steam(parse_config(steam.Steam.Config, PREDEFINED, "dataset"))
    with pytest.raises(DataError, match=r"Checksum mismatch for .*steam/test.txt"):
        dataset.load()


def test_a_folder_where_a_data_file_belongs_is_a_named_error(tmp_path, monkeypatch):
    shutil.copytree(DATA_DIR / "steam", tmp_path / "data" / "steam")
    path = tmp_path / "data" / "steam" / "train.txt"
    path.unlink()
    path.mkdir()  # it used to end in IsADirectoryError from the checksum
    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "data"))
    dataset = steam.Steam(parse_config(steam.Steam.Config, PREDEFINED, "dataset"))
    with pytest.raises(DataError, match=r"steam/train.txt is not a file"):
        dataset.load()


def test_missing_file_says_where_to_put_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "empty"))
    dataset = yelp_perfedrec.YelpPerfedrec(parse_config(yelp_perfedrec.YelpPerfedrec.Config, PREDEFINED, "dataset"))
    with pytest.raises(DataError, match=r"Missing data file .*yelp-perfedrec/(train|valid|test).txt.*FEDRUN_DATA_DIR"):
        dataset.load()


def test_malformed_line_names_file_and_line(tmp_path, monkeypatch):
    from fedrun.dataset._text import read_sequences

    path = tmp_path / "bad.txt"
    path.write_text("0 1 2\n1 3 x4\n")
    with pytest.raises(DataError, match=r"Malformed line 2 in .*bad.txt"):
        read_sequences(path)


def grouplens_ratings(sequences: str, rng: np.random.Generator) -> str:
    """A ``ratings.dat`` in GroupLens' format (``UserID::MovieID::Rating::Timestamp``) holding the histories of
    ``sequences.txt``: a rating 1–5 each, timestamps that tie in pairs, and each user's rows in shuffled file
    order except that the two rows of a tie keep theirs (the real file's order decides its ties)."""
    lines = []
    for line in sequences.splitlines():
        user, *items = line.split()
        stamps = 978_300_000 + np.arange(len(items)) // 2
        pairs = rng.permutation((len(items) + 1) // 2)
        order = [i for pair in pairs for i in (2 * pair, 2 * pair + 1) if i < len(items)]
        lines += [f"{user}::{items[i]}::{rng.integers(1, 6)}::{stamps[i]}" for i in order]
    return "\n".join(lines) + "\n"


def test_ml1m_ratings_read_grouplens_format_and_are_checked_by_the_histories(tmp_path, monkeypatch):
    """The ratings variant reads GroupLens' ratings.dat (fetched by name; here rebuilt from sequences.txt, as
    the real file is not in the offline data): the same users, items and ids as the sequences variant, with
    ratings and timestamps; a file whose histories differ is refused by name."""
    sequences = (DATA_DIR / "ml-1m" / "sequences.txt").read_text()
    folder = tmp_path / "data" / "ml-1m"
    folder.mkdir(parents=True)
    (folder / "ratings.dat").write_text(grouplens_ratings(sequences, np.random.default_rng(0)))
    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "data"))
    ratings = ml_1m.Ml1m(parse_config(ml_1m.Ml1m.Config, {"variant": "ratings"}, "dataset")).load_parts()["all"]
    implicit = ml_1m.Ml1m(parse_config(ml_1m.Ml1m.Config, {}, "dataset"))
    monkeypatch.setenv("FEDRUN_DATA_DIR", str(DATA_DIR))
    histories = implicit.load_parts()["all"]
    assert (ratings.n_users, ratings.n_items, len(ratings)) == (6040, 3706, 1_000_209)
    assert set(np.unique(ratings.rating)) == {1, 2, 3, 4, 5} and ratings.order is not None
    pairs = np.sort(ratings.user * 3706 + ratings.item)
    np.testing.assert_array_equal(pairs, np.sort(histories.user * 3706 + histories.item))  # ids alike

    text = (folder / "ratings.dat").read_text().splitlines()
    last = max((row for row in range(60) if text[row].startswith("1::")), key=lambda row: text[row].split("::")[3])
    text[last] = text[last].rsplit("::", 1)[0] + "::1"  # user 1's last movie becomes the first
    (folder / "ratings.dat").write_text("\n".join(text) + "\n")
    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(DataError, match=r"ml-1m/ratings.dat is not GroupLens' MovieLens 1M ratings.dat"):
        ml_1m.Ml1m(parse_config(ml_1m.Ml1m.Config, {"variant": "ratings"}, "dataset")).load_parts()
