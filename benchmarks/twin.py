"""aiotb on its pure-Python engine, next to the C one in the same process.

The installed package is loaded a second time, as ``aiotb_twin``, with AIOTB_NO_EXTENSIONS=1 set
while it imports: the same modules, on the engine that variable chooses. When this process already
runs aiotb on that engine, aiotb itself is the twin."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import aiotb

NAME = "aiotb_twin"


def package() -> ModuleType:
    """The pure-Python aiotb: loaded once, then the same module every call."""
    if aiotb.IMPLEMENTATION == "python":
        return aiotb
    if NAME not in sys.modules:
        folder = Path(aiotb.__file__).parent
        spec = importlib.util.spec_from_file_location(NAME, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load aiotb again from {folder}")
        twin = importlib.util.module_from_spec(spec)
        sys.modules[NAME] = twin
        saved = os.environ.get("AIOTB_NO_EXTENSIONS")
        os.environ["AIOTB_NO_EXTENSIONS"] = "1"
        try:
            spec.loader.exec_module(twin)
        except BaseException:
            del sys.modules[NAME]
            raise
        finally:
            if saved is None:
                del os.environ["AIOTB_NO_EXTENSIONS"]
            else:
                os.environ["AIOTB_NO_EXTENSIONS"] = saved
        if twin.IMPLEMENTATION != "python":
            raise ImportError(f"aiotb loaded again runs on the {twin.IMPLEMENTATION!r} engine, not the pure-Python one")
    return sys.modules[NAME]
