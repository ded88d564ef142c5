"""Builds aiotb's C extension. Switches (environment):

AIOTB_NO_EXTENSIONS=1  install the pure-Python twin only
AIOTB_DEBUG_BUILD=1    -O0 -g, asserts on, warnings are errors
AIOTB_SANITIZE=1       AddressSanitizer + UndefinedBehaviorSanitizer (implies the debug build)
AIOTB_PUBLIC_CLOCK=1   read the running loop through public API only (binding/clock.h); the default on 3.14+

When the C engine cannot be built (no C compiler, no Python headers, a compiler that rejects the code), the
install goes on with the pure-Python twin and says so, unless a debug or sanitizer build was asked for: that
one fails.
"""

import glob
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, ExecError, PlatformError


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
    sources = ["src/_tokenbucket/_tokenbucketmodule.c", "src/_tokenbucket/limits.c", "src/_tokenbucket/rate.c",
               "src/_tokenbucket/window.c", "src/_tokenbucket/queue.c", "src/_tokenbucket/quota.c"]
    depends = ["src/_tokenbucket/limits.h", "src/_tokenbucket/rate.h", "src/_tokenbucket/window.h",
               "src/_tokenbucket/queue.h", "src/_tokenbucket/quota.h", *glob.glob("src/_tokenbucket/binding/*.h")]
    libraries = ["m"]
    if sys.platform.startswith("linux"):  # the shared segment (binding/segment.h: Linux only)
        sources += ["src/_tokenbucket/shm.c", "src/_tokenbucket/shm_grant.c", "src/_tokenbucket/shm_posix.c"]
        depends += glob.glob("src/_tokenbucket/shm*.h")
        libraries.append("rt")  # shm_open: in libc from glibc 2.34, in librt before (librt stays, empty, after)
    return [
        Extension(
            "aiotb._tokenbucket",
            sources=sources,
            depends=depends,
            extra_compile_args=compile_args,
            extra_link_args=link_args,
            libraries=libraries,
        )
    ]


FALLBACK_WARNING = """
*********************************************************************************************
WARNING: aiotb's C engine (aiotb._tokenbucket) was not built:
    {error}
aiotb is installed with its pure-Python engine only: the same limiter, slower.
For the C engine, install a C compiler and the Python headers (for example
`apt install gcc python3-dev`) and reinstall. To install the pure-Python engine on purpose
and silence this warning, set AIOTB_NO_EXTENSIONS=1.
*********************************************************************************************
"""


class build_ext_or_fall_back(build_ext):
    """build_ext that leaves the C engine out, with a warning, when it cannot be built (aiotb._core then
    chooses the twin). A debug or sanitizer build was asked for explicitly: its failure stays an error."""

    def run(self) -> None:
        try:
            super().run()
        except PlatformError as error:  # no C compiler known for this platform
            self._fall_back(error)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except (CCompilerError, ExecError, PlatformError) as error:
            self._fall_back(error)

    def _fall_back(self, error: Exception) -> None:
        if _flag("AIOTB_DEBUG_BUILD") or _flag("AIOTB_SANITIZE"):
            raise error
        sys.stderr.write(FALLBACK_WARNING.format(error=error))
        self.extensions = []  # nothing to copy in place or to install (the loop over the old list goes on safely)


setup(ext_modules=extensions(), cmdclass={"build_ext": build_ext_or_fall_back})
