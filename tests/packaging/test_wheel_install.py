"""The wheel as a user gets it: one import package, ``stowage``, that works from a project of its own.

The wheel is built from a copy of the checkout (only what the build reads: no ``build/``,
``.venv``, ``*.egg-info`` or caches, so nothing stale from an earlier build gets in and nothing is
written to the checkout). It is installed into a fresh venv inside a temporary project that has
its own top-level ``storage``, ``runtime`` and ``actors`` packages, the folder names of this
repository. The installed ``stowage`` must come from the wheel and must never pick those up.

No dependency is downloaded for the install: a ``.pth`` file puts the development venv's
site-packages on the fresh venv's path. A plain path line in a ``.pth`` file is only appended to
``sys.path``; the ``.pth`` files inside that directory (the editable install's finder among them)
are not run, so ``stowage`` itself can only come from the wheel. Building the wheel needs
setuptools>=77: the development venv's, with ``--no-build-isolation``, when it is new enough;
otherwise pip builds in isolation and fetches it from the index (or its cache).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: repository folder -> where it lands inside the wheel
FOLDERS = {"runtime": "stowage", "actors": "stowage/actors", "storage": "stowage/storage"}

MARK = "project-storage-7f3a"  # what the project's own tool returns, from its own storage package

PROJECT_FILES = {
    "storage/__init__.py": '"""The project\'s own storage package: stowage\'s folder name."""\n',
    "storage/_protocol.py": f"class LogStore:\n    pass\n\n\nMARK = {MARK!r}\n",
    "runtime/__init__.py": '"""The project\'s own runtime package."""\n\nRuntime = None\n',
    "actors/__init__.py": '"""The project\'s own actors package."""\n',
    "mytools.py": textwrap.dedent(
        """\
        import pydantic
        from stowage import FunctionTool, ToolRegistry

        from storage._protocol import MARK  # the project's storage package, not stowage's


        class NoArgs(pydantic.BaseModel):
            pass


        async def project_mark(args: NoArgs) -> str:
            return MARK


        registry = ToolRegistry(
            [FunctionTool(name="project_mark", description="the project's mark",
                          args_model=NoArgs, fn=project_mark)]
        )
        """
    ),
}


@dataclass(frozen=True)
class Installed:
    sources: Path  # the copy of the checkout the wheel was built from
    wheel: Path
    version: str
    venv: Path
    python: Path
    site_packages: Path
    project: Path
    env: dict[str, str]

    def run(
        self, argv: Sequence[str | Path], timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the project directory with the fresh venv's environment."""
        return subprocess.run(
            [str(a) for a in argv],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _checked(argv: Sequence[str | Path], timeout: float, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, check=False,
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, f"{argv}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _copy_sources(repo: Path, dest: Path) -> Path:
    """The checkout without what a build leaves behind or does not read."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n == "__pycache__" or n.endswith((".pyc", ".egg-info"))}
        if Path(folder) == repo:
            skipped |= {n for n in names if n.startswith(".")}
            skipped |= {"build", "dist", "tests", "reports"} & set(names)
        return skipped

    shutil.copytree(repo, dest, ignore=ignore)
    return dest


def _setuptools_is_new_enough() -> bool:
    try:
        parts = re.findall(r"\d+", version("setuptools"))
    except PackageNotFoundError:
        return False
    return bool(parts) and int(parts[0]) >= 77


def _pip_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return env | {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    src = _copy_sources(repo_root, work / "src")
    dist = work / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", dist, src]
    if _setuptools_is_new_enough():
        build.insert(5, "--no-build-isolation")
    _checked(build, timeout=400, env=_pip_env())
    (wheel,) = dist.glob("*.whl")
    wheel_version = wheel.name.split("-")[1]

    project = work / "project"
    for name, text in PROJECT_FILES.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)

    venv = project / ".venv"
    _checked([sys.executable, "-m", "venv", "--without-pip", venv], timeout=120)
    python = venv / "bin" / "python"
    # installed before the .pth exists: pip must not see the development venv's stowage-runtime
    _checked(
        [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
         "--quiet", wheel],
        timeout=120, env=_pip_env(),
    )  # fmt: skip
    site_packages = Path(
        _checked(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], 60
        ).strip()
    )
    dev_site_packages = Path(sysconfig.get_path("purelib"))
    assert dev_site_packages != site_packages
    (site_packages / "_dev_venv_dependencies.pth").write_text(f"{dev_site_packages}\n")

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("OPENAI_")
    }
    env |= {"PYTHONUNBUFFERED": "1", "PYTHONNOUSERSITE": "1"}
    return Installed(src, wheel, wheel_version, venv, python, site_packages, project, env)


def test_the_wheel_holds_one_package_with_every_module_and_its_marker(
    installed: Installed,
) -> None:
    with zipfile.ZipFile(installed.wheel) as whl:
        names = set(whl.namelist())
        tops = {name.split("/", 1)[0] for name in names}
        dist_info = f"stowage_runtime-{installed.version}.dist-info"
        assert tops == {"stowage", dist_info}
        metadata = whl.read(f"{dist_info}/METADATA").decode()
        entry_points = whl.read(f"{dist_info}/entry_points.txt").decode()
    assert "Name: stowage-runtime\n" in metadata
    assert re.search(r"^stowage = stowage\.cli:main$", entry_points, re.MULTILINE), entry_points
    assert {
        "stowage/py.typed",
        "stowage/actors/__init__.py",
        "stowage/storage/__init__.py",
        "stowage/storage/contract.py",
        "stowage/testing/__init__.py",
    } <= names
    # every module of the three folders, and nothing else: a package missing from pyproject's
    # list, or a stale file, shows up here
    expected = {
        f"{inside}/{path.relative_to(installed.sources / folder).as_posix()}"
        for folder, inside in FOLDERS.items()
        for path in (installed.sources / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    shipped = {name for name in names if name.endswith(".py")}
    assert sorted(shipped - expected) == []
    assert sorted(expected - shipped) == []


def test_stowage_comes_from_the_wheel_beside_the_projects_own_packages(
    installed: Installed,
) -> None:
    probe = textwrap.dedent(
        """\
        import json
        import actors, runtime, storage, storage._protocol
        import stowage, stowage.actors, stowage.storage, stowage.storage.contract, stowage.testing
        from importlib.metadata import version
        print(json.dumps({
            "project": [m.__file__ for m in (actors, runtime, storage)],
            "stowage": [m.__file__ for m in (stowage, stowage.actors, stowage.storage)],
            "version": stowage.__version__,
            "metadata": version("stowage-runtime"),
            "store": stowage.storage.JsonlStore.__module__,
        }))
        """
    )
    done = installed.run([installed.python, "-c", probe])
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert all(Path(f).is_relative_to(installed.project) for f in seen["project"])
    assert not any(Path(f).is_relative_to(installed.venv) for f in seen["project"])
    assert all(Path(f).is_relative_to(installed.site_packages / "stowage") for f in seen["stowage"])
    assert seen["version"] == seen["metadata"] == installed.version
    assert seen["store"] == "stowage.storage._jsonl"


def test_the_readme_example_runs_in_the_project(installed: Installed) -> None:
    readme = (installed.sources / "README.md").read_text()
    example = re.search(r"^```python\n(.*?)^```", readme, re.MULTILINE | re.DOTALL)
    assert example, "README.md has no ```python example"
    code = example.group(1)
    assert 'model="scripted"' in code, "the first README example should run offline"
    (installed.project / "readme_example.py").write_text(code)
    done = installed.run([installed.python, "readme_example.py"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip()
    assert list((installed.project / ".stowage").glob("*.jsonl")), "no session log was written"


def test_the_command_prints_its_version(installed: Installed) -> None:
    done = installed.run([installed.venv / "bin" / "stowage", "--version"], timeout=60)
    assert done.returncode == 0, done.stderr
    assert installed.version in done.stdout


def test_the_command_runs_the_projects_own_tools(installed: Installed) -> None:
    stowage = installed.venv / "bin" / "stowage"
    done = installed.run(
        [stowage, "run", "--session", "own-tools", "--store", "st", "--tools-from",
         "mytools:registry", "call the project tool"]
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"project_mark -> {MARK}" in done.stdout
    checked = installed.run([stowage, "check", "own-tools", "--store", "st"])
    assert checked.returncode == 0, checked.stdout + checked.stderr
