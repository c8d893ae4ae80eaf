"""The one thing pyproject.toml cannot say: ship the top-level ``conf/`` tree inside the package, as ``fedrun/conf``,
so a non-editable install (``pip install .``, a wheel) finds its configs (fedrun.core.paths.config_dir)."""

from setuptools import find_namespace_packages, find_packages, setup

CONF = ["fedrun.conf"] + [f"fedrun.conf.{group}" for group in find_namespace_packages(where="conf")]

setup(
    packages=find_packages(include=["fedrun", "fedrun.*"]) + CONF,
    package_dir={"fedrun.conf": "conf"},
    package_data={package: ["*.yaml"] for package in CONF},
)
