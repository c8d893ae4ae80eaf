"""The public repositories that distribute the papers' derived splits, pinned to the commit whose files fedrun's
checksums name (checked byte for byte against each repository's snapshot): ``raw(REPO, path)`` is a file's address."""

from __future__ import annotations

from fedrun.data.files import github_file

POISON_FED_DLRS = ("rdz98/PoisonFedDLRS", "484039efb29c2ab92f3762a40d87f9afa5c3f61e")  # A-ra/A-hum (IJCAI'22)
FED_REC_ATTACK = ("rdz98/FedRecAttack", "1e3946fbd09cdcd2b5b9dcedac7668e9f09559b9")  # FedRecAttack (ICDE'22)
LIGHTFR = ("hongleizhang/LightFR", "b16909240c15d4c739f73f1e88b5651a06dc3ebd")  # LightFR (TOIS'23)
PERFEDREC_PLUS = ("sichunluo/PerFedRec-Plus", "c8c4f17ced900745c4d4a6191c67682bd1855834")  # PerFedRec++


def raw(repository: tuple[str, str], path: str) -> str:
    return github_file(*repository, path)
