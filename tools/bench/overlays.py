"""Peers that cannot install into this environment, each in an overlay venv of its own.

A peer whose pins would downgrade packages the rest of the environment uses lives in a
venv in the bench cache (``$MEGADATA_BENCH_CACHE/{name}-venv-…``) whose ``.pth`` appends
this interpreter's site-packages, so torch, jax and numpy are not reinstalled and the
peer's own pins shadow the base ones there only. The venv is built under a temporary
name and renamed into place once its import works, so its presence means it is
complete; a failed build leaves nothing and is a reason, not a crash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
import tempfile

from bench.cloud import cache_dir

INSTALL_TIMEOUT_S = 900


def last_line(text: str) -> str:
    """The last non-blank line of ``text`` (at most 300 characters): a failure's reason."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


@dataclasses.dataclass(frozen=True)
class Overlay:
    """One peer's overlay venv.

    name: the venv's name in the cache; label: the requirement named in reasons;
    install: ``pip install`` arguments; check: a module the peer imports, proving the venv;
    env: environment of that import; pins: what the venv's key holds of the peer (JSON).
    """

    name: str
    label: str
    install: tuple[str, ...]
    check: str
    env: tuple[tuple[str, str], ...] = ()
    pins: object = None

    def directory(self) -> str:
        """The venv's path: keyed by this interpreter, its site-packages and the pins, so
        a changed base environment or pin gets a fresh overlay."""
        key = json.dumps([sys.executable, sys.version, site.getsitepackages(), self.pins])
        digest = hashlib.sha256(key.encode()).hexdigest()[:10]
        tag = f"py{sys.version_info.major}{sys.version_info.minor}"
        return os.path.join(cache_dir(), f"{self.name}-venv-{tag}-{digest}")

    def python(self, create: bool) -> tuple[str | None, str]:
        """(the overlay's python, "") or (None, why not). ``create``: build the overlay
        when it does not exist yet (a minute or so: venv + pip install over the network)."""
        target = self.directory()
        python = os.path.join(target, "bin", "python")
        if os.path.exists(python):
            return python, ""
        if not create:
            return None, f"the overlay venv {target} does not exist (not created at this scale)"
        os.makedirs(os.path.dirname(target), exist_ok=True)
        building = tempfile.mkdtemp(
            prefix=os.path.basename(target) + ".tmp-", dir=os.path.dirname(target)
        )
        os.chmod(building, 0o755)  # mkdtemp's 0700 would lock out other users of the cache
        try:
            reason = self._build(building)
            if reason:
                return None, reason
            try:
                os.rename(building, target)
            except OSError:
                if not os.path.exists(python):  # not a concurrent run that finished first
                    raise
            return python, ""
        finally:
            shutil.rmtree(building, ignore_errors=True)

    def _build(self, directory: str) -> str:
        """Create the venv in ``directory`` and install into it; "" or why it failed."""
        done = subprocess.run(
            [sys.executable, "-m", "venv", directory], capture_output=True, text=True,
            check=False,
        )
        if done.returncode != 0:
            return f"python -m venv failed: {last_line(done.stderr)}"
        python = os.path.join(directory, "bin", "python")
        purelib = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        # addsitedir (not a bare path): the base's own .pth files are processed as well
        lines = [f"import site; site.addsitedir({path!r})" for path in site.getsitepackages()]
        with open(os.path.join(purelib, "zz_megadata_base.pth"), "w") as stream:
            stream.write("\n".join(lines) + "\n")
        try:
            done = subprocess.run(
                [python, "-m", "pip", "install", "--quiet", *self.install],
                capture_output=True, text=True, check=False, timeout=INSTALL_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return f"pip install {self.label} timed out after {INSTALL_TIMEOUT_S} s"
        if done.returncode != 0:
            return f"pip install {self.label} failed: {last_line(done.stderr or done.stdout)}"
        check = subprocess.run(
            [python, "-I", "-c", f"import {self.check}"], capture_output=True, text=True,
            check=False, env={**os.environ, **dict(self.env)},
        )
        if check.returncode != 0:
            return f"import {self.check} fails in the overlay: {last_line(check.stderr)}"
        return ""
