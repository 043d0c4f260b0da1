"""Loads the native library with cffi (ABI mode: no compiler needed at install time).

The cdef is the committed header `native/include/sidecar_native.h`, generated from the Rust `ffi`
module, so the declarations Python uses cannot drift from the exports. The library's ABI version is
checked at load; a stale build is refused with the command that fixes it.

Two builds of the library load alike: the user build (`make native`) and the test build (`make
native-testing`, cargo feature `testing`), which adds the test- and benchmark-only exports the
header declares under `#if defined(SIDECAR_TESTING)`. Those declarations are kept in the cdef; in
ABI mode a symbol is looked up when first used, so the user build simply lacks them
(`has_testing_exports()` says which build is loaded).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import cffi

#: The ABI version this Python code was written for (`SC_ABI_VERSION` in native/src/ffi/version.rs).
EXPECTED_ABI_VERSION = 12

_PACKAGE_DIR = Path(__file__).resolve().parent
_REPO_ROOT = _PACKAGE_DIR.parent.parent
_LIB_NAME = "libsidecar_native.so"
_HEADER_NAME = "sidecar_native.h"


class NativeLibraryError(ImportError):
    """The native library is missing or does not match this Python code."""


def _find(name: str, candidates: list[Path]) -> Path:
    for path in candidates:
        if path.is_file():
            return path
    tried = ", ".join(str(p) for p in candidates)
    raise NativeLibraryError(f"{name} not found (tried {tried}); build it with `make native`")


def _cdef_from_header(text: str) -> str:
    # cffi's parser takes C declarations only: keep `#define NAME <int>` (cffi understands those),
    # drop includes, guards and `extern "C"` wrappers.
    kept = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if re.match(r"#define\s+\w+\s+-?\d+\s*$", stripped):
                kept.append(stripped)
            continue
        if stripped in ('extern "C" {', "}  // extern \"C\"") or stripped.startswith("} // extern"):
            continue
        kept.append(line)
    return "\n".join(kept)


def _load() -> tuple[cffi.FFI, object]:
    lib_path = Path(os.environ["SIDECAR_NATIVE_LIB"]) if os.environ.get("SIDECAR_NATIVE_LIB") else _find(
        _LIB_NAME, [_PACKAGE_DIR / _LIB_NAME, _REPO_ROOT / "native" / "target" / "release" / _LIB_NAME]
    )
    header = _find(_HEADER_NAME, [_PACKAGE_DIR / _HEADER_NAME, _REPO_ROOT / "native" / "include" / _HEADER_NAME])
    ffi = cffi.FFI()
    ffi.cdef(_cdef_from_header(header.read_text()))
    try:
        lib = ffi.dlopen(str(lib_path))
    except OSError as e:
        raise NativeLibraryError(f"cannot load {lib_path}: {e}; rebuild it with `make native`") from e
    check_abi_version(lib.sc_abi_version(), lib_path)
    return ffi, lib


def check_abi_version(found: int, lib_path: Path | str) -> None:
    """Refuses a library built from other sources than this Python code."""
    if found != EXPECTED_ABI_VERSION:
        raise NativeLibraryError(
            f"{lib_path} has ABI version {found}, this code expects {EXPECTED_ABI_VERSION}; "
            "rebuild it with `make native`"
        )


ffi, lib = _load()
LIBRARY_VERSION: str = ffi.string(ffi.cast("char *", lib.sc_version())).decode()

#: The exports only the test build has (cargo feature `testing`).
TESTING_EXPORTS = ("sc_test_panic", "sc_tokenizer_from_json", "sc_parse_bench")


def has_testing_exports() -> bool:
    """Whether the loaded library is the test build (it has every export of `TESTING_EXPORTS`)."""
    return all(hasattr(lib, name) for name in TESTING_EXPORTS)
