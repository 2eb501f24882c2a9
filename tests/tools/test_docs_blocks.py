"""The documentation runs as written: every ```python and ```bash block of README.md and of
every docs/ page, page after page in the order of PAGES, as one chain.

The blocks run in a scratch directory, as a user who installed ``megadata-core`` runs
them: console scripts (``megadata-preprocess``, ...) from this environment's ``bin/``,
imports by the installed names (``megadata_core``, ``megadata_adapters``,
``megadata_cli``); the scratch directory holds no link to the checkout. Each Python block
is saved to a file and run as ``python block.py``, as a user who copies it runs it (a
block that starts worker processes then needs the ``if __name__ == "__main__":`` guard:
spawned workers import the script again), in a fresh interpreter (it must carry its own
imports; JAX and TensorStore never start in this process); a block that starts workers
also runs as ``python -c``. Nothing may be printed on stderr by a Python block (at exit
included: no ``Exception ignored in ...`` from a ``__del__``, no leaked-resource warnings);
the only warnings filtered are megatron-core's own at import. The object-storage block
reads from moto's S3 server on 127.0.0.1, holding what the preprocessing block wrote.
README.md's set-up block (``bash tools/demo.sh`` / ``tools/test.sh``) is not run here
(tests/tools/test_demo_smoke.py runs the demo); tests/tools/test_readme.py checks it.
The ```text blocks are flag synopses: every --flag in one is in its command's --helpfull.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: The chain's order: a page may read what an earlier one wrote (the quickstart writes
#: quickstart/, format out/corpus, preprocessing data/*.jsonl and out/*_text_document).
PAGES = (
    "README.md",
    "docs/getting-started.md",
    "docs/format.md",
    "docs/preprocessing.md",
    "docs/gpt-samples.md",
    "docs/packing.md",
    "docs/conversations.md",
    "docs/blends.md",
    "docs/raw-shards.md",
    "docs/object-storage.md",
    "docs/adapters.md",
    "docs/megatron.md",
    "docs/inspecting.md",
    "docs/scale.md",
    "docs/benchmarks.md",
    "docs/layout.md",
    "docs/roadmap.md",
    "docs/index.md",
    "docs/changelog.md",
    "docs/api/core.md",
    "docs/api/adapters.md",
)
#: Pages whose blocks need a trainer (MaxText, torchtitan) that this venv does not have:
#: not in the chain; tests/trainers/test_maxtext.py and test_torchtitan_train.py run
#: their blocks in the trainers' venvs.
TRAINER_PAGES = ("docs/trainers.md",)
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
BUCKET = "corpora"
TIMEOUT_S = 600
#: What user-facing blocks no longer write: checkout paths and the old import names.
OLD_SPELLINGS = re.compile(
    r"python tools/(?!bench)|--config=configs/|(from|import) (adapters|tools)\b"
    r"|python -m adapters\b|megadata\[|(from|import) megadata\b(?!_)"
)


def page_blocks(page: str) -> list[tuple[str, str, str]]:
    """``(language, code, "page line N (section)")`` of every fenced block, in order."""
    text = (ROOT / page).read_text()
    blocks = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        titles = re.findall(r"^#{1,3} (.+)$", text[: match.start()], re.MULTILINE)
        where = f"{page} line {line} ({titles[-1] if titles else 'top'})"
        blocks.append((match[1], match[2], where))
    return blocks


def all_blocks() -> list[tuple[str, str, str]]:
    return [block for page in PAGES for block in page_blocks(page)]


def is_setup(code: str) -> bool:
    """README.md's newcomer block: it sets up a venv, so it is checked, not run."""
    return "bash tools/" in code


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the installed packages, as a user has them
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


def test_every_page_is_in_the_chain():
    pages = {str(path.relative_to(ROOT)) for path in DOCS.rglob("*.md")
             if "_build" not in path.parts}
    assert pages | {"README.md"} == set(PAGES) | set(TRAINER_PAGES)
    assert not set(PAGES) & set(TRAINER_PAGES)


def test_docs_blocks_run_as_written(tmp_path):
    pytest.importorskip("torch", reason="the pages' torch and Megatron blocks run where "
                        "torch is (the 3.11 leg)")
    blocks = all_blocks()
    assert sum(language == "python" for language, _, _ in blocks) >= 14
    env = environment()
    servers = []
    try:
        for number, (language, code, where) in enumerate(blocks):
            if language == "python":
                if "s3://" in code and not servers:
                    servers.append(_serve_s3(tmp_path, env))
                script = tmp_path / f"docs_block_{number}.py"
                script.write_text(code)
                _run([sys.executable, script.name], tmp_path, env, where, code, quiet=True)
                if starts_workers(code):
                    _run([sys.executable, "-c", code], tmp_path, env, where, code, quiet=True)
            elif language == "bash" and not is_setup(code):
                _run(["bash", "-euo", "pipefail", "-c", code], tmp_path, env, where, code)
    finally:
        for server in servers:
            server.stop()
    assert (tmp_path / "quickstart" / "corpus_text_document.idx").exists()
    assert (tmp_path / "out" / "code_text_document.idx").exists()
    assert (tmp_path / "index_cache").is_dir()


def test_python_blocks_that_start_workers_are_guarded():
    guarded = [code for language, code, _ in all_blocks()
               if language == "python" and starts_workers(code)]
    assert guarded  # the framework adapters' block
    for code in guarded:
        assert f"\n{GUARD}" in code, code[:200]


def test_blocks_use_console_scripts_and_installed_names():
    for language, code, where in all_blocks():
        if language in ("python", "bash", "text") and not is_setup(code):
            old = OLD_SPELLINGS.search(code)
            assert not old, (where, old and old[0])


def test_only_the_readme_sets_up():
    setups = [where for language, code, where in all_blocks()
              if language == "bash" and is_setup(code)]
    assert all(where.startswith("README.md ") for where in setups), setups


@pytest.fixture(scope="module")
def helpfull():
    """--helpfull of each console script, once."""
    texts: dict[str, str] = {}

    def get(command: str) -> str:
        if command not in texts:
            texts[command] = subprocess.run(
                [str(Path(sys.executable).parent / command), "--helpfull"],
                capture_output=True, text=True, timeout=300, cwd=ROOT, env=environment(),
            ).stdout
        return texts[command]

    return get


def test_option_synopses_name_real_flags(helpfull):
    """The ```text blocks are flag synopses: every --flag in one is in the --helpfull of
    the console scripts it names."""
    checked = 0
    for language, code, where in all_blocks():
        if language != "text":
            continue
        flags = set(re.findall(r"(?<![\w-])--(\w[\w-]*)", code))
        commands = set(re.findall(r"^\s*(megadata-[\w-]+)", code, re.MULTILINE))
        if not flags:
            continue
        assert commands, (where, "flags without a megadata-* command")
        help_text = "\n".join(helpfull(command) for command in sorted(commands))
        assert help_text.strip(), (where, commands)
        for flag in flags:  # Megatron's dashed spellings are aliases of the underscored
            names = {flag, flag.replace("-", "_")}
            assert any(f"--{name}" in help_text or f"--[no]{name}" in help_text
                       for name in names), (where, flag)
        checked += 1
    assert checked >= 4
