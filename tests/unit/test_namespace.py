"""What installing delayq adds to a Python environment: one import name, `delayq`, with its SQL
migrations and IDL; and a client that a business system can import with only `thrift` loaded."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVER_LIBRARIES = ("sqlalchemy", "pymysql", "kazoo", "pika", "prometheus_client", "click")


def _loaded_after(statement: str) -> list[str]:
    code = f"import sys\n{statement}\nprint(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in {SERVER_LIBRARIES!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_submitting_through_the_client_loads_no_database_zookeeper_or_amqp_library():
    assert _loaded_after("from delayq.client import DelayqClient, TaskSpec, CallbackService, connect") == []
    assert _loaded_after("import delayq, delayq.client.scheduler") == []


def test_the_consumer_helper_needs_pika_and_says_so_by_loading_it():
    assert "pika" in _loaded_after("import delayq.client.consumer")


def test_the_built_package_has_one_top_level_name_and_its_data(tmp_path):
    src = tmp_path / "src"
    for name in ("shared", "nodes", "master", "ops", "sql"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                          "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("delayq-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"delayq"}
    assert "delayq/client/delayq.thrift" in names
    assert "delayq/py.typed" in names  # PEP 561: type checkers read the package's annotations
    assert "delayq/client/gen/delayq_thrift/ttypes.py" in names
    assert sorted(n.split("/")[-1] for n in names if n.startswith("delayq/sql/")) == \
        sorted(p.name for p in (ROOT / "sql").glob("*.sql"))
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "delayq = delayq.ops.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
