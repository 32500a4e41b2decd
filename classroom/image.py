"""Build the students' image for a class whose students' servers run in containers (docs/class.md).

    python -m classroom image [--tag memlab-learner] [--base python:3.12-slim-bookworm] [--build-arg NAME=VALUE ...]

Run it from the course folder with the Python the hub runs (its JupyterHub version goes into the image). It makes the
learner release (scripts/release.py) in a new folder and gives docker build that folder as the whole context, with
classroom/Dockerfile: the image holds the toolkit, the checks and their dependencies, and nothing the release leaves
out (no solutions/, no grading references, no tests). `--build-arg` passes pip's own settings (PIP_INDEX_URL,
PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX, PIP_TRUSTED_HOST) for a machine without PyPI or another torch.
Then: `python -m classroom prepare ... --docker-image TAG`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOCKERFILE = HERE / "Dockerfile"
#: the build arguments classroom/Dockerfile declares that a user may set (JUPYTERHUB_VERSION is set here)
PIP_SETTINGS = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_TRUSTED_HOST")
DEFAULT_TAG = "memlab-learner"


class ImageError(Exception):
    """The image cannot be built as asked; the message says why and what to do."""


def hub_version() -> str:
    """The version of JupyterHub this Python has: the students' servers must speak the hub's API."""
    try:
        return importlib.metadata.version("jupyterhub")
    except importlib.metadata.PackageNotFoundError:
        raise ImageError(
            "this Python has no jupyterhub: run it with the Python the hub runs (pip install jupyterhub dockerspawner)"
        ) from None


def build_arguments(pairs: list[str], base: str | None) -> dict[str, str]:
    """The docker build arguments: the hub's JupyterHub version, the base image if given, pip's settings."""
    arguments = {"JUPYTERHUB_VERSION": hub_version()}
    if base:
        arguments["BASE"] = base
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name not in PIP_SETTINGS:
            raise ImageError(
                f"--build-arg {pair!r}: give NAME=VALUE with NAME one of {', '.join(PIP_SETTINGS)} "
                "(--base names the base image)"
            )
        arguments[name] = value
    return arguments


def docker_build_command(docker: str, tag: str, context: Path, arguments: dict[str, str]) -> list[str]:
    command = [docker, "build", "--file", str(DOCKERFILE), "--tag", tag]
    for name, value in arguments.items():
        command += ["--build-arg", f"{name}={value}"]
    return [*command, str(context)]


def build(args: argparse.Namespace) -> str:
    docker = shutil.which(args.docker)
    if docker is None:
        raise ImageError(
            f"no {args.docker} command here: install Docker (docs/class.md, 'Students in containers')"
        )
    arguments = build_arguments(args.build_arg or [], args.base)
    from coursetools.release import (
        build as build_release,
    )  # the course's own tools: run from the course folder

    with tempfile.TemporaryDirectory(prefix="memlab-image-") as scratch:
        context = Path(scratch) / "release"
        build_release(context)
        command = docker_build_command(docker, args.tag, context, arguments)
        print("classroom: " + " ".join(command), flush=True)
        done = subprocess.run(command)
    if done.returncode != 0:
        raise ImageError(f"docker build failed (exit {done.returncode}); its output is above")
    print(f"classroom: built {args.tag}: give it to prepare with --docker-image {args.tag}", flush=True)
    return args.tag


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tag", default=DEFAULT_TAG, help="the image's name (default: %(default)s)")
    p.add_argument(
        "--base",
        help="the base image, with python3 and its venv module (default: classroom/Dockerfile's, "
        "python:3.12-slim-bookworm)",
    )
    p.add_argument(
        "--build-arg",
        action="append",
        metavar="NAME=VALUE",
        help=f"one of pip's settings for the build: {', '.join(PIP_SETTINGS)}",
    )
    p.add_argument("--docker", default="docker", help="the docker command (default: %(default)s)")


def parser() -> argparse.ArgumentParser:
    """`python -m classroom image`'s own arguments (classroom/prepare.py's parser holds them as a subcommand)."""
    p = argparse.ArgumentParser(prog="python -m classroom image", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return p
