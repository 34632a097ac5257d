"""The low-level layer: libpipit.so through ctypes.

Every PIPIT_API function of include/*.h is declared (argtypes, restype)
from the generated table _decls.py and reachable as `lib.pipit_<name>`;
every `typedef struct` of the headers is a ctypes Structure in `S`
(S.pipit_options, S.pipit_gpt2_config, ...); the enum constants and
integer #defines are in `C` (C.PIPIT_SCHED_1F1B, C.PIPIT_MAX_DIMS, ...).

Where the library is found, first match wins:
  1. $PIPIT_LIBRARY (a path to libpipit.so);
  2. the path _libpath.py names, relative to this package (written by
     CMake for the build tree and by `cmake --install` for the installed
     package: no LD_LIBRARY_PATH needed);
  3. the system's loader search ("libpipit.so").

ctypes releases the GIL for the length of every foreign call, so a
compile or a step in one Python thread runs beside another thread's.
"""
import atexit
import ctypes
import os
import threading
import weakref
from ctypes import (c_char, c_char_p, c_double, c_float, c_int, c_int8, c_int16, c_int32, c_int64,  # noqa: F401
                    c_long, c_size_t, c_uint, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p)

from . import _decls

__all__ = ["lib", "S", "C", "Error", "check", "library_path"]


class _Namespace:
    pass


S = _Namespace()  # the structs
C = _Namespace()  # the constants
for _k, _v in list(_decls.ENUMS.items()) + list(_decls.DEFINES.items()):
    setattr(C, _k, _v)


def _ctype(name):
    if name == "None":
        return None
    if name.startswith("S."):
        return getattr(S, name[2:])
    return globals()[name]


for _name, _fields in _decls.STRUCTS:
    _f = []
    for _fname, _fty, _n in _fields:
        _t = _ctype(_fty)
        _f.append((_fname, _t * _n if _n else _t))
    setattr(S, _name, type(_name, (ctypes.Structure,), {"_fields_": _f}))


def _find_library():
    env = os.environ.get("PIPIT_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from . import _libpath  # written by CMake (build tree, install)
        p = os.path.normpath(os.path.join(here, _libpath.RELATIVE))
        if os.path.exists(p):
            return p
    except ImportError:
        pass
    return "libpipit.so"


library_path = _find_library()
try:
    lib = ctypes.CDLL(library_path)
except OSError as e:
    raise ImportError("pipit: cannot load the library '%s' (%s); set PIPIT_LIBRARY to the path of libpipit.so, "
                      "a shared build's (cmake -DBUILD_SHARED_LIBS=ON)" % (library_path, e)) from None

missing = []  # functions of the headers this library lacks (an older libpipit): calling one raises
for _name, (_ret, _args) in _decls.FUNCTIONS.items():
    try:
        _fn = getattr(lib, _name)
    except AttributeError:
        missing.append(_name)
        continue
    _fn.restype = _ctype(_ret)
    _fn.argtypes = [_ctype(t) for _, t in _args]


# ----------------------------------------------------------------- errors

class Error(Exception):
    """A failing pipit call: .status (the pipit_status number), .status_name
    and the message pipit gave (str(e))."""
    status = -1

    def __init__(self, message, status=None):
        super().__init__(message)
        if status is not None:
            self.status = status

    @property
    def status_name(self):
        return _text(lib.pipit_status_name(self.status))


class InvalidError(Error, ValueError):
    status = C.PIPIT_STATUS_INVALID


class ShapeError(Error, ValueError):
    status = C.PIPIT_STATUS_SHAPE


class IOFailure(Error, OSError):
    status = C.PIPIT_STATUS_IO


class FormatError(Error, ValueError):
    status = C.PIPIT_STATUS_FORMAT


class NoMemoryError(Error, MemoryError):
    status = C.PIPIT_STATUS_NOMEM


class MisuseError(Error):
    status = C.PIPIT_STATUS_MISUSE


class ScheduleError(Error):
    status = C.PIPIT_STATUS_SCHEDULE


class DeadlockError(ScheduleError):
    status = C.PIPIT_STATUS_DEADLOCK


class RuntimeFailure(Error, RuntimeError):
    status = C.PIPIT_STATUS_RUNTIME


class InternalError(Error):
    status = C.PIPIT_STATUS_INTERNAL


_CLASSES = {c.status: c for c in (InvalidError, ShapeError, IOFailure, FormatError, NoMemoryError, MisuseError,
                                  ScheduleError, DeadlockError, RuntimeFailure, InternalError)}


def _text(b):
    return b.decode("utf-8", "replace") if b is not None else ""


def error(status, message=None):
    """The Error subclass for `status`, carrying `message` (default: the
    thread's last pipit message, pipit_errmsg())."""
    if message is None:
        message = _text(lib.pipit_errmsg())
    if not message:
        message = _text(lib.pipit_status_name(status))
    return _CLASSES.get(status, Error)(message, status)


def check(status, message=None):
    """Raises the Error for a failing status (the message: pipit_errmsg() of
    this thread, read right after the call, or `message` when given)."""
    if status != 0:
        raise error(status, message() if callable(message) else message)
    return status


# -------------------------------------------------------------- handles

class Handle:
    """An owned pipit handle: close() frees it once (also on `with` exit
    and, as the backstop, when the object is collected). A closed handle
    passes NULL to the library, which answers MISUSE with its message."""
    _free = None  # the pipit_*_free function name

    def __init__(self, ptr):
        self._ptr = ptr
        self._lock = threading.Lock()
        if ptr:
            _live.add(self)

    @property
    def ptr(self):
        return self._ptr

    @property
    def closed(self):
        return not self._ptr

    def close(self):
        with self._lock:
            p, self._ptr = self._ptr, None
        if p:
            _live.discard(self)
            getattr(lib, self._free)(p)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the module may be gone
            pass


def cstr(s):
    if s is None:
        return None
    if isinstance(s, bytes):
        return s
    return os.fsencode(s) if isinstance(s, os.PathLike) else str(s).encode("utf-8")


def cstr_array(items):
    """A NULL-terminated const char *const * (keep the returned array alive)."""
    arr = (c_char_p * (len(items) + 1))(*[cstr(x) for x in items], None)
    return arr


# ------------------------------------------------------------------ MPI

_live = weakref.WeakSet()  # open handles, closed before MPI ends at exit
_finalized = False


def finalize():
    """Closes every open handle (decoders, then programs: they borrow programs, schedules and
    graphs) and, in an MPI job, ends MPI (pipit_finalize). Registered at
    exit; calling it earlier is allowed once everything is done."""
    global _finalized
    if _finalized:
        return
    _finalized = True
    order = {"Decoder": 0, "Program": 1}  # a decoder borrows its program, a program schedules and graphs
    hs = sorted(list(_live), key=lambda h: order.get(type(h).__name__, 2))
    for h in hs:
        h.close()
    if lib.pipit_process_count() > 1:
        lib.pipit_finalize()


atexit.register(finalize)
