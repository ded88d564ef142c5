"""Builds the no-op async context manager next to the benchmarks: python build.py OUTDIR.

Uses setuptools' build_ext, so the interpreter's own compiler and flags apply;
prints the path of the built module on the last line."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

SOURCE = Path(__file__).with_name("_noopcm.c")


def build(out_dir: Path) -> Path:
    from setuptools import Distribution, Extension

    target = out_dir / f"_noopcm{sysconfig.get_config_var('EXT_SUFFIX')}"
    if target.exists() and target.stat().st_mtime >= SOURCE.stat().st_mtime:
        return target
    distribution = Distribution({
        "name": "noopcm",
        "ext_modules": [Extension("_noopcm", [str(SOURCE)], extra_compile_args=["-O2", "-std=c11"])],
    })
    command = distribution.get_command_obj("build_ext")
    command.build_lib = str(out_dir)
    command.build_temp = str(out_dir / "build")
    command.ensure_finalized()
    command.run()
    if not target.exists():
        raise RuntimeError(f"build_ext did not produce {target}")
    return target


if __name__ == "__main__":
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(build(out))
