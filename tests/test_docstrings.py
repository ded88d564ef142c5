"""Every public class, function, method and property of aiotb says what it does: a docstring, which the API
reference is built from (the pure-Python engine's classes are checked in its run, the C engine's in the other)."""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Iterator

import pytest

import aiotb

MODULES = ("aiotb", "aiotb.httpx", "aiotb.aiohttp")


def public_names() -> Iterator[tuple[str, Any]]:
    """(dotted name, object) of every public class and function of the modules, and of every public method and
    property of those classes that aiotb defines (not those a class takes from the standard library)."""
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")]):
            value = getattr(module, name)
            if not (inspect.isclass(value) or inspect.isfunction(value) or inspect.isbuiltin(value)):
                continue
            yield f"{module_name}.{name}", value
            if not inspect.isclass(value):
                continue
            for attribute in dir(value):
                owner = next((c for c in value.__mro__ if attribute in vars(c)), None)
                if attribute.startswith("_") or owner is None or not owner.__module__.startswith("aiotb"):
                    continue
                member = vars(owner)[attribute]
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if callable(member) or isinstance(member, property) or inspect.isdatadescriptor(member):
                    yield f"{module_name}.{name}.{attribute}", member


NAMES = dict(public_names())


def test_there_are_names_to_check() -> None:
    assert len(NAMES) > 100 and "aiotb.Limiter.acquire" in NAMES and "aiotb.httpx.LimitedTransport" in NAMES


@pytest.mark.parametrize("name", sorted(NAMES))
def test_each_public_name_has_a_docstring(name: str) -> None:
    doc = inspect.getdoc(NAMES[name]) if not isinstance(NAMES[name], property) else NAMES[name].__doc__
    assert doc and doc.strip(), f"{name} has no docstring"
