"""Builds aiotb's C extension. Switches (environment):

AIOTB_NO_EXTENSIONS=1  install the pure-Python twin only
AIOTB_DEBUG_BUILD=1    -O0 -g, asserts on, warnings are errors
AIOTB_SANITIZE=1       AddressSanitizer + UndefinedBehaviorSanitizer (implies the debug build)
AIOTB_PUBLIC_CLOCK=1   read the running loop through public API only (binding/clock.h); the default on 3.14+
"""

import glob
import os

from setuptools import Extension, setup


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def extensions() -> list:
    if _flag("AIOTB_NO_EXTENSIONS"):
        return []
    # no fused multiply-add, so results match the twin; hidden symbols and LTO let the binding inline the core
    compile_args = ["-std=c11", "-ffp-contract=off", "-fvisibility=hidden", "-flto"]
    link_args = ["-flto"]
    if _flag("AIOTB_DEBUG_BUILD") or _flag("AIOTB_SANITIZE"):
        compile_args += ["-O0", "-g", "-UNDEBUG", "-Wall", "-Wextra", "-Werror"]
    if _flag("AIOTB_PUBLIC_CLOCK"):
        compile_args.append("-DAIOTB_PUBLIC_CLOCK")
    if _flag("AIOTB_SANITIZE"):
        sanitize = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
        compile_args += sanitize
        link_args += sanitize
    return [
        Extension(
            "aiotb._tokenbucket",
            sources=["src/_tokenbucket/_tokenbucketmodule.c", "src/_tokenbucket/limits.c", "src/_tokenbucket/queue.c"],
            depends=["src/_tokenbucket/limits.h", "src/_tokenbucket/queue.h", *glob.glob("src/_tokenbucket/binding/*.h")],
            extra_compile_args=compile_args,
            extra_link_args=link_args,
            libraries=["m"],
        )
    ]


setup(ext_modules=extensions())
