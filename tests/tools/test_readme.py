"""README.md runs as written: every ```python and ```bash block, in order, as one chain.

The blocks run in a scratch directory that links the repository's tools/ and configs/
(so ``python tools/x.py`` and ``--config=configs/x.py`` resolve as in a clone) with this
checkout's packages first on the path. Each Python block is saved to a file and run as
``python block.py``, as a user who copies it runs it (a block that starts worker
processes then needs the ``if __name__ == "__main__":`` guard: spawned workers import the
script again), in a fresh interpreter (it must carry its own imports; JAX and TensorStore
never start in this process); a block that starts workers also runs as ``python -c``.
Nothing may be printed on stderr (at exit included: no ``Exception ignored in ...`` from
a ``__del__``, no leaked-resource warnings); the only warnings filtered are megatron-core's
own at import. The object-storage block reads from moto's S3 server on 127.0.0.1,
holding what the preprocessing block wrote. The set-up block (``bash tools/demo.sh`` /
``tools/test.sh``) is not run here (tests/tools/test_demo_smoke.py runs the demo); it is
checked for its two commands.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
BUCKET = "corpora"
TIMEOUT_S = 600


def readme_blocks() -> list[tuple[str, str, str]]:
    """``(language, code, "section: line N")`` of every fenced block, in order."""
    text = README.read_text()
    blocks = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        titles = re.findall(r"^## (.+)$", text[: match.start()], re.MULTILINE)
        where = f"README.md line {line} ({titles[-1] if titles else 'top'})"
        blocks.append((match[1], match[2], where))
    return blocks


def _is_setup(code: str) -> bool:
    return "bash tools/" in code


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    env.setdefault("JAX_PLATFORMS", "cpu")
    # megatron-core warns at import on a machine without Transformer Engine; nothing else
    # is filtered (the resource tracker's leak warnings must show)
    env["PYTHONWARNINGS"] = "ignore:Transformer Engine and Apex are not installed"
    return env


#: A block that starts worker processes (which must be guarded when run as a script).
STARTS_WORKERS = re.compile(r"(worker_count|num_workers)=[1-9]|mp_prefetch|multiprocessing")
GUARD = 'if __name__ == "__main__":'


def starts_workers(code: str) -> bool:
    return bool(STARTS_WORKERS.search(code))


def _serve_s3(workdir: Path, env: dict[str, str]):
    """moto's S3 server with bucket ``corpora`` holding out/code_text_document; the
    endpoint and test credentials go into ``env`` as a user's environment would hold them."""
    sys.path.insert(0, str(ROOT))
    try:
        from loopback.object_stores import MotoS3Server
    finally:
        sys.path.remove(str(ROOT))
    server = MotoS3Server()
    client = server.client()
    client.create_bucket(Bucket=BUCKET)
    for ext in ("bin", "idx"):
        name = f"code_text_document.{ext}"
        client.upload_file(str(workdir / "out" / name), BUCKET, name)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        env.pop(name, None)
    env.update(
        AWS_ENDPOINT_URL_S3=server.endpoint,
        AWS_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
    )
    return server


def _run(
    command: list[str], workdir: Path, env: dict[str, str], where: str, code: str,
    quiet: bool = False,
) -> None:
    """Run ``command``: exit 0, and with ``quiet`` nothing on stderr; no traceback ever."""
    result = subprocess.run(
        command, cwd=workdir, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    report = (
        f"{where} ({' '.join(command[:2])}): exit {result.returncode}\n{code}\n--- stdout\n"
        f"{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-5000:]}"
    )
    assert result.returncode == 0, report
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, report
    assert not (quiet and result.stderr), report


def test_readme_blocks_run_as_written(tmp_path):
    blocks = readme_blocks()
    assert sum(language == "python" for language, _, _ in blocks) >= 5
    for name in ("tools", "configs"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = _environment()
    servers = []
    try:
        for number, (language, code, where) in enumerate(blocks):
            if language == "python":
                if "s3://" in code and not servers:
                    servers.append(_serve_s3(tmp_path, env))
                script = tmp_path / f"readme_block_{number}.py"
                script.write_text(code)
                _run([sys.executable, script.name], tmp_path, env, where, code, quiet=True)
                if starts_workers(code):
                    _run([sys.executable, "-c", code], tmp_path, env, where, code, quiet=True)
            elif language == "bash" and not _is_setup(code):
                _run(["bash", "-euo", "pipefail", "-c", code], tmp_path, env, where, code)
    finally:
        for server in servers:
            server.stop()
    assert (tmp_path / "out" / "code_text_document.idx").exists()
    assert (tmp_path / "index_cache").is_dir()


def test_python_blocks_that_start_workers_are_guarded():
    guarded = [code for language, code, _ in readme_blocks()
               if language == "python" and starts_workers(code)]
    assert guarded  # the framework adapters' block
    for code in guarded:
        assert f"\n{GUARD}" in code, code[:200]


def test_readme_has_exactly_two_newcomer_commands():
    setups = [code for language, code, _ in readme_blocks() if _is_setup(code)]
    assert len(setups) == 1
    commands = [line.split("#")[0].strip() for line in setups[0].splitlines() if line.strip()]
    assert commands == ["bash tools/demo.sh", "bash tools/test.sh"]
    assert all((ROOT / command.split()[1]).is_file() for command in commands)


def test_readme_says_how_to_use_the_environment():
    text = README.read_text()
    assert "source .venv/bin/activate" in text and ".venv/bin/python tools/" in text


@pytest.mark.parametrize(
    "tool", sorted(set(re.findall(r"(?<![\w/])tools/\w+\.(?:py|sh)", README.read_text())))
)
def test_readme_names_only_tools_that_exist(tool):
    assert (ROOT / tool).is_file(), tool


def test_readme_option_synopses_name_real_flags():
    """The ```text blocks are flag synopses: every --flag in them is in the tool's --help."""
    for language, code, where in readme_blocks():
        if language != "text":
            continue
        tool = re.search(r"python (tools/\w+\.py)", code)
        assert tool, where
        help_text = subprocess.run(
            [sys.executable, str(ROOT / tool[1]), "--helpfull"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
            env=_environment(),
        ).stdout
        for flag in set(re.findall(r"--(\w+)", code)):
            assert f"--{flag}" in help_text or f"--[no]{flag}" in help_text, (where, flag)
