"""No module over about 450 lines, no class over about 25 methods (issue 44).

A class that holds several jobs, or one object split over files by base classes, makes
every change read more than it touches. Methods are counted as the issue counts them:
the class's own and those it inherits from the package's own base classes. A class may
be bigger when its docstring says why, in a paragraph starting "Bigger than 25
methods:"; that reason is then the place to argue about it. Modules fail above 500
lines ("about 450": the last few lines of a module are not worth splitting it for).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings
from pathlib import Path

import sharedstream

PACKAGE = Path(sharedstream.__file__).resolve().parent
MAX_LINES = 500
MAX_METHODS = 25
REASON = "Bigger than 25 methods:"


def classes() -> list[type]:
    found: list[type] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the deprecated aliases
        for info in pkgutil.walk_packages(sharedstream.__path__, "sharedstream."):
            if ".migrations." in info.name:  # alembic's scripts, run by alembic only
                continue
            module = importlib.import_module(info.name)
            found += [cls for cls in vars(module).values()
                      if inspect.isclass(cls) and cls.__module__ == module.__name__]
    return found


def methods(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith("sharedstream."):
            names |= {name for name, value in vars(klass).items()
                      if inspect.isfunction(value)
                      or isinstance(value, (staticmethod, classmethod, property))}
    return names


def test_no_class_has_more_than_25_methods_without_saying_why() -> None:
    big = {f"{cls.__module__}.{cls.__qualname__}": len(methods(cls)) for cls in classes()
           if len(methods(cls)) > MAX_METHODS and REASON not in (cls.__doc__ or "")}
    assert not big, (f"split these classes by job, or say why in their docstring "
                     f"({REASON!r}): {big}")


def test_no_module_is_over_500_lines() -> None:
    long = {str(path.relative_to(PACKAGE)): n for path in PACKAGE.rglob("*.py")
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these modules by job: {long}"
