"""Which optional extra installs a module a feature needs, for one-line errors."""

from __future__ import annotations

from sharedstream.core.install import pip_install

# Module (top-level name) -> the extra of ``pip install 'sharedstream[<extra>]'``.
EXTRAS = {"httpx": "airflow", "pymysql": "mysql", "psycopg": "postgres",
          "psycopg2": "postgres", "fastapi": "web", "uvicorn": "web", "jinja2": "web"}


def missing_module(exc: ModuleNotFoundError) -> str:
    """What to say for a module that is not installed: its name and the extra to install."""
    name = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(name)
    fix = pip_install(extra) if extra else f"pip install {name}"
    return f"the Python module {name!r} is not installed: {fix}"
