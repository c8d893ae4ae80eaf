"""``fedrun info``: what fedrun offers, without reading any data.

  fedrun info                  every group and option, with one line from its module's docstring
  fedrun info method=fedcl     one option: its docstring (paper, equations, open choices), its defaults,
                               the options of the other groups it runs with (from the declared
                               capabilities: ``fedrun.app.build.check_combination``) and the presets using it
``fedrun --help`` is ``fedrun/app/help.py``; Hydra's is ``fedrun --hydra-help``.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Iterator

from omegaconf import OmegaConf

from fedrun.core.choices import option_file, options
from fedrun.core.paths import cache_dir, config_dir
from fedrun.errors import FedrunError

GROUPS = ("dataset", "backbone", "method", "privacy", "attack", "defense", "eval", "track")
PARTNERS = ("backbone", "privacy", "attack", "defense")  # what a method's compatibility is listed against
WIDTH = 100  # characters of an option's one-line summary


def target_of(group: str, option: str) -> str | None:
    return OmegaConf.load(option_file(group, option)).get("_target_")


def docstring(target: str | None) -> str:
    """The docstring of the module that implements ``target`` (a class path), read from its source without
    importing it (so ``fedrun info`` answers without loading torch); a module without a source file is imported."""
    if not target:
        return ""
    name = target.rsplit(".", 1)[0]
    try:
        spec = importlib.util.find_spec(name)  # imports the parent packages only (their __init__ files are light)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin and spec.origin.endswith(".py"):
        return (ast.get_docstring(ast.parse(Path(spec.origin).read_text())) or "").strip()
    return (importlib.import_module(name).__doc__ or "").strip()


def summary(group: str, option: str) -> str:
    """One line: the first sentence of the module docstring, else the YAML's leading comment."""
    paragraph = " ".join(docstring(target_of(group, option)).split("\n\n")[0].split())
    if paragraph:
        sentence = paragraph.split(". ")[0].rstrip(".") + "."
        return sentence if len(sentence) <= WIDTH else sentence[:WIDTH].rsplit(" ", 1)[0] + " …"
    for line in option_file(group, option).read_text().splitlines():
        if line.startswith("#") and not line.startswith("# @package"):
            return line.lstrip("# ").strip()
    return ""


def overview() -> str:
    lines = ["fedrun: groups and options (fedrun info <group>=<option> for one of them)", ""]
    for group in GROUPS:
        lines.append(f"{group}:")
        for option in options(group):
            lines.append(f"  {option:<22} {summary(group, option)}")
        lines.append("")
    return "\n".join(lines)


def compatibility(group: str, option: str) -> Iterator[str]:
    """For a method: each option of the partner groups, and why not where it cannot run with it (one partner group
    at a time). Composing and planning the method with each of ~37 partner options takes seconds, so the list is
    kept in fedrun's cache under a digest of everything it depends on (``partners_key``) and read from there."""
    if group != "method":
        return
    key = partners_key(option)
    cached = cache_dir() / "info" / f"partners-{option}-{key}.json" if key else None
    if cached is not None and cached.exists():
        yield from json.loads(cached.read_text())
        return
    parts = []
    for part in composed_partners(option):
        parts.append(part)
        yield part
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        for stale in cached.parent.glob(f"partners-{option}-*.json"):  # the list of sources that changed since
            stale.unlink(missing_ok=True)
        temporary = cached.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(parts))
        temporary.replace(cached)


def partners_key(option: str) -> str | None:
    """A digest of what a method's partner list depends on: fedrun's sources and ``conf/`` (every class's declared
    capabilities, every option's defaults) and the versions of Python and of the libraries that compose and check.
    None, and no cache, with a plugin (its code may live anywhere) or in a distributed run's environment (its world
    size takes part in the checks)."""
    from importlib.metadata import PackageNotFoundError, version

    from fedrun.core.plugins import plugin_conf_dirs

    if plugin_conf_dirs() or "WORLD_SIZE" in os.environ:
        return None
    digest = hashlib.sha256(f"{option}\n{sys.version}\n".encode())
    for package_name in ("torch", "hydra-core", "omegaconf", "faiss-cpu", "faiss-gpu"):
        try:
            digest.update(f"{package_name} {version(package_name)}\n".encode())
        except PackageNotFoundError:
            pass
    package = Path(__file__).resolve().parents[1]
    for root, pattern in ((package, "*.py"), (Path(config_dir()), "*.yaml")):
        for path in sorted(root.rglob(pattern)):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:24]


def composed_partners(option: str) -> Iterator[str]:
    """Each partner group's options for ``method=option``, found by composing and planning each pair."""
    from fedrun.app.compose import compose
    from fedrun.app.plan import plan

    for partner in PARTNERS:
        lines = []
        ok, refused = [], []
        for other in options(partner):
            try:
                plan(compose([f"method={option}", f"{partner}={other}", "track=none"]))
                ok.append(other)
            except FedrunError as err:
                refused.append(f"    {other}: {str(err).splitlines()[0]}")
            except Exception as err:  # an option that needs other overrides to compose at all
                refused.append(f"    {other}: needs other settings ({type(err).__name__})")
        lines.append(f"  {partner}: {', '.join(ok) or '(none)'}")
        if refused:
            lines += [f"  {partner}, not with this method:"] + refused
        yield "\n".join(lines)


def presets_using(group: str, option: str) -> list[str]:
    """Presets (conf/experiment) and table rows (conf/row) that select this option in their defaults list
    or sweep over it."""
    root = Path(config_dir())
    found = []
    for folder in ("experiment", "row"):
        for path in sorted((root / folder).rglob("*.yaml")):
            node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
            chosen = set()
            for entry in node.get("defaults", []) or []:
                if isinstance(entry, dict):
                    chosen |= {str(v) for k, v in entry.items() if k.replace("override ", "").lstrip("/") == group}
            swept = ((node.get("hydra") or {}).get("sweeper") or {}).get("params") or {}
            chosen |= {v.strip() for v in str(swept.get(group, "")).split(",")}
            if option in chosen:
                found.append(f"{folder}/{path.relative_to(root / folder).with_suffix('').as_posix()}")
    return found


def settings_of(path: Path) -> list[str]:
    """The paper settings (``conf/setting/...``) an option's defaults list includes."""
    entries = OmegaConf.to_container(OmegaConf.load(path)).get("defaults", []) or []
    return [e.lstrip("/") for e in entries if isinstance(e, str) and e.lstrip("/").startswith("setting/")]


def describe(selection: str) -> str:
    return "\n".join(sections(selection))


def sections(selection: str) -> Iterator[str]:
    """``fedrun info <group>=<option>`` part by part: what is read from files at once; the options of the other
    groups it runs with last, as they are found (each is composed and planned: seconds, and torch, for a method)."""
    group, _, option = selection.partition("=")
    if group not in GROUPS or not option:
        raise FedrunError(f"fedrun info takes <group>=<option> with a group among {', '.join(GROUPS)}; "
                          f"got {selection!r}")
    if option not in options(group):
        raise FedrunError(f"{group}={option} is not an option: {', '.join(options(group))}")
    path = option_file(group, option)
    defaults = path.read_text().rstrip()
    where = f"conf/{group}/{option}.yaml" if path.is_relative_to(config_dir()) else str(path)
    lines = [f"{group}={option}", "", docstring(target_of(group, option)) or summary(group, option), "",
             f"defaults ({where}):", *("  " + line for line in defaults.splitlines())]
    for setting in settings_of(path):  # the paper's setting of the other groups it selects
        text = (Path(config_dir()) / f"{setting}.yaml").read_text().rstrip()
        lines += ["", f"its paper's setting of the other groups (conf/{setting}.yaml):",
                  *("  " + line for line in text.splitlines())]
    protocols = sorted((Path(config_dir()) / "protocol" / option).glob("*.yaml")) if group == "method" else []
    for protocol in protocols:  # the paper's data protocol on each dataset it used (conf/config.yaml: protocol)
        lines += ["", f"its paper's data protocol with dataset={protocol.stem} "
                      f"(conf/protocol/{option}/{protocol.name}; ~protocol keeps the dataset's own):",
                  *("  " + line for line in protocol.read_text().rstrip().splitlines())]
    steps = sorted((Path(config_dir()) / "steps" / option).glob("*.yaml")) if group == "method" else []
    for step in steps:  # its measured step sizes with another backbone (conf/config.yaml: steps)
        lines += ["", f"its step sizes with backbone={step.stem} (conf/steps/{option}/{step.name}; ~steps keeps "
                      "the method's own):", *("  " + line for line in step.read_text().rstrip().splitlines())]
    used = presets_using(group, option)
    lines += ["", "presets and rows using it: " + (", ".join(used) if used else "none")]
    yield "\n".join(lines)
    if group == "method":
        yield "\nruns with:"
        yield from compatibility(group, option)


def main(argv: list[str]) -> int:
    try:
        for part in sections(argv[0]) if argv else [overview()]:
            print(part, flush=True)  # a method's partner list takes seconds: the rest is shown first
    except FedrunError as err:
        print(f"fedrun: error: {err}", file=sys.stderr)
        return 2
    return 0
