"""Issue #68 (4): every attack beside every federated method, on the method's default backbone and on the one
its own tests use, either runs a round or is refused before training by a named error — never a traceback at
round 0 (``method=fedcl`` on GRU4Rec with A-hum used to fail in an ``einsum`` inside the attack)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedrun.app import experiment
from fedrun.core.paths import config_dir
from fedrun.errors import ConfigError
from tests.conftest import SMALL, compose_cfg
from tests.test_privacy_boundary import SETTINGS, federated_options

ATTACKS = sorted(path.stem for path in (Path(config_dir()) / "attack").glob("*.yaml") if path.stem != "none")
SHARE = ["attack.fraction=0.05", "attack.participation=every_round"]  # 3 malicious clients, each in round 0


def settings_without_backbone(option: str) -> list[str]:
    return [s for s in SETTINGS.get(option, []) if not s.startswith("backbone")]


@pytest.mark.parametrize("option", federated_options())
def test_every_attack_runs_a_round_or_is_refused_by_name(option):
    cases = {"default backbone": settings_without_backbone(option), "its tests' backbone": SETTINGS.get(option, [])}
    outcomes = {}
    for backbone, settings in cases.items():
        for attack in ATTACKS:
            cfg = compose_cfg(SMALL + [f"method={option}", *settings, f"attack={attack}", *SHARE])
            try:
                built = experiment.build_run(cfg)
            except ConfigError as refused:
                assert refused.field, f"{option} × {attack} ({backbone}): a refusal names its field"
                outcomes[(backbone, attack)] = f"refused: {refused.field}"
                continue
            stats = built.trainer.train_round(0)  # anything but a finished round fails the test here
            assert stats.n_clients > 0
            outcomes[(backbone, attack)] = "ran"
    assert len(outcomes) == 2 * len(ATTACKS)


def test_an_attack_on_a_sequential_backbone_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"attack='a_hum' .*attack=none with backbone=gru4rec \(its users are "
                                          r"sequence\): a_hum's clients are users with rows of their own"):
        experiment.build_run(compose_cfg(SMALL + ["method=fedcl", "backbone=gru4rec", "attack=a_hum", *SHARE]))
