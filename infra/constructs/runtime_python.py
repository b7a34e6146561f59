"""The function's CPython on this machine and the packages the Lambda Python runtime provides,
standard library only (no ``aws_cdk``): the synth's import check and ``warmstart local up`` run
a function's code and layers with these, never with the project's ``.venv``.

References
----------
https://docs.aws.amazon.com/lambda/latest/dg/lambda-python.html#python-sdk-included
(runtime-included SDK: its version "depends on the runtime version and your AWS Region")
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Final

#: What the Lambda Python runtimes provide without a layer: the SDK for Python and its
#: dependencies (the web layer leaves boto3 out for this reason). AWS publishes no fixed
#: version (it "depends on the runtime version and your AWS Region"), so this machine's copies
#: (the project's pins) stand in for them; they are pure Python and import under any CPython 3.
#: References: https://docs.aws.amazon.com/lambda/latest/dg/lambda-python.html#python-sdk-included
RUNTIME_PROVIDED: Final = ("boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "six",
                           "urllib3")


@functools.cache
def find_python(version: str, architecture: str = "x86_64") -> str | None:
    """An interpreter on this machine that can import the function's layers: CPython
    ``version`` (``"3.12"``) on the function's CPU, or ``None``.

    Looked for as ``python<version>`` on ``PATH``, then under pyenv's ``~/.pyenv/versions``;
    each candidate is run once to confirm its version and machine, and the interpreter it
    really is (``sys.executable``: a pyenv shim is a script that costs tens of ms per start) is
    returned. The answer is kept for the process: one synth or ``local up`` looks once.
    """
    import glob
    import os
    import platform
    import shutil
    import subprocess
    import sys

    machine = {"x86_64": ("x86_64", "AMD64"), "arm64": ("aarch64", "arm64")}[architecture]
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version and platform.machine() in machine:
        return sys.executable
    candidates = [shutil.which(f"python{version}"),
                  *sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")),
                          reverse=True)]
    for candidate in filter(None, candidates):
        try:
            proc = subprocess.run([candidate, "-I", "-S", "-c",
                                   ("import platform, sys; print('%d.%d' % sys.version_info[:2], "
                                   "platform.machine(), sys.executable)")],
                                  capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        words = proc.stdout.split()
        if proc.returncode == 0 and len(words) >= 3 and words[0] == version and words[1] in machine:
            return " ".join(words[2:]) if Path(" ".join(words[2:])).is_file() else candidate
    return None


def host_architecture() -> str:
    """This machine's CPU as Lambda names it: ``arm64`` or ``x86_64``."""
    import platform

    return "arm64" if platform.machine() in ("aarch64", "arm64") else "x86_64"


def link_runtime_provided(into: Path) -> Path:
    """A folder of links to this machine's copies of :data:`RUNTIME_PROVIDED` (their packages
    and ``.dist-info``), made if missing; returns ``into``."""
    from importlib import metadata

    into.mkdir(parents=True, exist_ok=True)
    for name in RUNTIME_PROVIDED:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for top in {Path(str(f)).parts[0] for f in dist.files or ()} - {"..", "__pycache__", "bin"}:
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not (into / top).exists():
                try:
                    (into / top).symlink_to(source)
                except FileExistsError:  # made by a concurrent caller
                    pass
    return into
