"""Python bindings for libkcsi (the kubelet's CSI volume plugin as a C library), via ctypes.

    import kcsi
    with kcsi.Host({"nodeName": "node-1", "rootDir": "/var/lib/kubelet"}) as host:
        host.register_plugin("hostpath.csi.k8s.io", "/run/csi.sock", ["1.0.0"])
        with host.mounter(spec, pod) as m:
            m.set_up()

Each C function whose first parameter is a handle is a method of that handle's class, with type
hints and a docstring (`help(kcsi.Mounter)`): `Host.mounter(spec, pod)` returns a `Mounter`,
`Mounter.set_up(args=None)` publishes, `Host.register_plugin(..., timeout_ms=0)` waits at most
the host's timeout. Conventions:
  * JSON parameters (`spec`, `pod`, `args`, `options`) take dicts or lists, or JSON text as
    str or bytes; their C names work as keywords too (`spec_json=`);
  * other string parameters take str (sent as UTF-8) or bytes; an `Optional` one takes None;
  * results are returned: str, bool, int, a handle object, or parsed JSON (the `TypedDict`s
    `HostStatus`, `DriverInfo`, `DeviceMount`, `BlockMapperPaths`, `VolumeMetrics` name its keys);
  * a failure raises a `KcsiError` subclass chosen by the result code (`kcsi.NotFound`, ...);
  * the constructors' C-derived names stay as aliases (`Host.mounter_new` is `Host.mounter`).
Library: $KCSI_LIB, else the checkout's target/release/libkcsi.so when this package runs from a
checkout, else libkcsi.so.1 from the system loader path (`make install`).
"""
import collections
import ctypes
import json
import os
import re
import threading

from . import _methods
from . import _signatures as sig
from ._methods import (_AttacherMethods, _BlockMapperMethods, _BlockUnmapperMethods,
                       _HostMethods, _MounterMethods, _UnmounterMethods)
from ._signatures import CONSTANTS, FUNCTIONS, NULLABLE
from ._types import (BlockMapperPaths, DeviceMount, DriverInfo, HostStatus, PluginSocket,
                     PluginWatcherStatus, VolumeMetrics)

__all__ = [
    "Host", "Mounter", "Unmounter", "Attacher", "BlockMapper", "BlockUnmapper", "KcsiError",
    "lib", "call", "version", "result_name", "nullable", "set_log_callback", "is_uncertain", "is_transient",
    "ERRORS", "CONSTANTS", "FUNCTIONS", "NULLABLE", "MISSING", "Sample", "parse_metrics",
    "HostStatus", "DriverInfo", "PluginSocket", "PluginWatcherStatus", "DeviceMount",
    "BlockMapperPaths", "VolumeMetrics",
]

# <checkout>/bindings/python/kcsi/__init__.py: the checkout's build, when run from there.
_CHECKOUT_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, os.pardir,
                             "target", "release", "libkcsi.so")


def _load():
    path = os.environ.get("KCSI_LIB")
    if path:
        return ctypes.CDLL(path)
    local = os.path.normpath(_CHECKOUT_LIB)
    if os.path.exists(local):
        return ctypes.CDLL(local)
    try:
        return ctypes.CDLL("libkcsi.so.1")
    except OSError as e:
        raise ImportError(f"kcsi: libkcsi not found: KCSI_LIB is unset, {local} does not exist, and the "
                          f"system loader has no libkcsi.so.1 ({e}); set KCSI_LIB to the library "
                          "(target/release/libkcsi.so after `make build`) or run `make install`") from e


lib = _load()
# Header functions this library build does not export (it is older than the header).
MISSING = sig.apply(lib)

for _name, _value in CONSTANTS.items():
    if _name.startswith("KCSI_"):
        globals()[_name] = _value

RESULT_CODES = {v: k for k, v in CONSTANTS.items() if k == "KCSI_OK" or k.startswith("KCSI_ERR_")}


def version():
    return lib.kcsi_version().decode()


def result_name(code):
    return lib.kcsi_result_name(code).decode()


# ---------------------------------------------------------------------------------------------
# Errors

class KcsiError(Exception):
    """A failed kcsi call: `.result` (code), `.result_name`, `.error_class` (KCSI_CLASS_*),
    `.grpc_code` (-1 unless the CSI driver returned it), `.message`, `.upstream_message` (the
    message as upstream's plugin words it), `.function`."""

    def __init__(self, result, message, error_class=-1, grpc_code=-1, function=None, upstream_message=None):
        self.result = result
        self.result_name = RESULT_CODES.get(result) or result_name(result)
        self.message = message
        self.upstream_message = message if upstream_message is None else upstream_message
        self.error_class = error_class
        self.grpc_code = grpc_code
        self.function = function
        super().__init__(f"{function or 'kcsi'}: {self.result_name}: {message}")

    @property
    def is_uncertain(self):
        return self.error_class == CONSTANTS["KCSI_CLASS_UNCERTAIN"]

    @property
    def is_transient(self):
        return self.error_class == CONSTANTS["KCSI_CLASS_TRANSIENT"]


def is_uncertain(err):
    """True when the operation may still be in progress in the driver (treat as mounted)."""
    return isinstance(err, KcsiError) and err.is_uncertain


def is_transient(err):
    """True when nothing changed and a retry later may succeed."""
    return isinstance(err, KcsiError) and err.is_transient


def _camel(result_const):
    return "".join(p.capitalize() for p in result_const[len("KCSI_ERR_"):].split("_"))


# One subclass per result code, named from the header: KCSI_ERR_NOT_FOUND -> kcsi.NotFound.
ERRORS = {}
for _code, _const in sorted(RESULT_CODES.items()):
    if _const == "KCSI_OK":
        continue
    _cls = type(_camel(_const), (KcsiError,), {"__doc__": f"{_const} ({_code})"})
    ERRORS[_code] = _cls
    globals()[_cls.__name__] = _cls
    __all__.append(_cls.__name__)


def _error_from(err_ptr, rc, function):
    """Builds the exception from a kcsi_error and frees it."""
    if not err_ptr:
        return ERRORS.get(rc, KcsiError)(rc, "(no error object)", function=function)
    try:
        msg = lib.kcsi_error_message(err_ptr)
        upstream = lib.kcsi_error_upstream_message(err_ptr)
        exc = ERRORS.get(rc, KcsiError)(
            lib.kcsi_error_result(err_ptr),
            msg.decode("utf-8", "replace") if msg is not None else "",
            lib.kcsi_error_class(err_ptr),
            lib.kcsi_error_grpc_code(err_ptr),
            function,
            upstream.decode("utf-8", "replace") if upstream is not None else None,
        )
    finally:
        lib.kcsi_error_free(err_ptr)
    return exc


def _take_string(ptr):
    """Copies an owned C string and frees it."""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8")
    finally:
        lib.kcsi_string_free(ptr)


# ---------------------------------------------------------------------------------------------
# Generic calling from the signatures

def _encode_str(value, json_param):
    if value is None:
        return None
    if not isinstance(value, bytes):
        if json_param and not isinstance(value, str):
            value = json.dumps(value)
        value = str(value).encode("utf-8")
    if b"\0" in value:
        # C would silently see only the part before the NUL.
        raise ValueError(f"kcsi: string argument contains a NUL byte: {value!r}")
    return value


def nullable(fname, param):
    """Whether `param` of `fname` may be NULL (the header's "Nullable:" line names it)."""
    return param == "err_out" or param in NULLABLE.get(fname, ())


def _is_output(ctype, name):
    return (name == "out" or name.endswith("_out")) and name != "err_out" and ctype.endswith("*")


class _Plan:
    """How a Python call maps onto one C function's parameters."""

    def __init__(self, fname):
        self.fname = fname
        self.ret, self.params, self.doc = FUNCTIONS[fname]
        self.fn = getattr(lib, fname)
        self.inputs = []  # (index, ctype, name)
        self.outputs = []
        names = [n for _, n in self.params]
        self.fallible = bool(self.params) and self.params[-1][1] == "err_out"
        skip = set()
        for i, (t, n) in enumerate(self.params):
            if i in skip or n == "err_out":
                continue
            if "*const *" in t and f"{n}_len" in names:
                skip.add(names.index(f"{n}_len"))
                self.inputs.append((i, "array", n))
            elif _is_output(t, n):
                self.outputs.append((i, t, n))
            else:
                self.inputs.append((i, t, n))
        self.argtypes = self.fn.argtypes


def _convert_in(plan, slot, ctype, value, args):
    i = slot
    if ctype == "array":
        items = [_encode_str(v, False) for v in (value or [])]
        args[i] = (ctypes.c_char_p * len(items))(*items) if items else None
        args[i + 1] = len(items)
    elif ctype.startswith("const char *"):
        args[i] = _encode_str(value, plan.params[i][1].endswith("_json"))
    else:
        args[i] = value


_plans = {}


def call(fname, *args, **kwargs):
    """Calls any header function by name with the generic conventions (for functions that take
    no handle, or to pass a raw handle pointer explicitly as the first argument)."""
    if fname in MISSING:
        raise AttributeError(f"{fname} is declared in kcsi.h but this libkcsi does not export it")
    return _call(fname, None, args, kwargs)


def _call(fname, handle_ptr, pyargs, kwargs):
    plan = _plans.get(fname)
    if plan is None:
        plan = _plans[fname] = _Plan(fname)
    args = [None] * len(plan.params)
    inputs = plan.inputs
    if handle_ptr is not None:
        args[0] = handle_ptr
        inputs = inputs[1:]
    given = list(pyargs)
    for idx, (i, t, n) in enumerate(inputs):
        if idx < len(given):
            value = given[idx]
        elif n in kwargs:
            value = kwargs.pop(n)
        elif n.endswith("_json") and n[: -len("_json")] in kwargs:
            value = kwargs.pop(n[: -len("_json")])
        elif t.startswith("const char *") and nullable(fname, n):
            value = None  # documented optional
        else:
            raise TypeError(f"{fname}: missing argument {n!r}")
        _convert_in(plan, i, t, value, args)
    if len(given) > len(inputs) or kwargs:
        raise TypeError(f"{fname}: unexpected arguments {given[len(inputs):]!r} {sorted(kwargs)!r}")
    holders = []
    for i, t, n in plan.outputs:
        target = plan.argtypes[i]._type_
        holder = target()
        holders.append((holder, t, n))
        args[i] = ctypes.byref(holder)
    err = ctypes.POINTER(sig.kcsi_error)()
    if plan.fallible:
        args[-1] = ctypes.byref(err)
    rc = plan.fn(*args)
    if not plan.fallible:
        return rc
    if rc != 0:
        raise _error_from(err, rc, fname)
    results = [_convert_out(h, t, n) for h, t, n in holders]
    if not results:
        return None
    return results[0] if len(results) == 1 else tuple(results)


def _convert_out(holder, ctype, name):
    if ctype == "char **":
        text = _take_string(holder)
        is_json = name == "json_out" or name.endswith("_json_out")
        return json.loads(text) if is_json and text is not None else text
    if ctype.endswith("**"):
        base = ctype[: -2].strip()
        cls = _HANDLE_CLASSES.get(base + " *")
        return cls(holder) if cls else holder
    return holder.value


# ---------------------------------------------------------------------------------------------
# Handles

_HANDLE_CLASSES = {}


class _Handle:
    """An owned kcsi handle; its methods are generated from the header (`_methods.py`).
    `close()` is idempotent and waits for calls in flight on other threads, so a pointer is
    never used after it was freed."""

    _ctype = None  # e.g. "kcsi_host"

    def __init__(self, ptr):
        if not ptr:
            raise ValueError(f"{type(self).__name__}: NULL handle")
        self._ptr = ptr
        self._cond = threading.Condition()
        self._busy = 0

    def _invoke(self, fname, args):
        if fname in MISSING:
            raise AttributeError(f"{fname} is declared in kcsi.h but this libkcsi does not export it")
        with self._use() as ptr:
            return _call(fname, ptr, args, {})

    class _Use:
        def __init__(self, h):
            self.h = h

        def __enter__(self):
            h = self.h
            with h._cond:
                if not h._ptr:
                    raise ValueError(f"{type(h).__name__} is closed")
                h._busy += 1
                return h._ptr

        def __exit__(self, *exc):
            h = self.h
            with h._cond:
                h._busy -= 1
                h._cond.notify_all()

    def _use(self):
        return _Handle._Use(self)

    @property
    def closed(self):
        return not self._ptr

    def close(self):
        with self._cond:
            ptr, self._ptr = self._ptr, None
            while ptr and self._busy:
                self._cond.wait()
        if ptr:
            getattr(lib, self._ctype + "_free")(ptr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # Safety net only; hosts should close() (or use `with`) deterministically.
        try:
            self.close()
        except Exception:
            pass


class Host(_HostMethods, _Handle):
    """A kcsi host (one per node agent). `config`: dict or JSON string."""

    _ctype = "kcsi_host"

    def __init__(self, config):
        out = ctypes.POINTER(sig.kcsi_host)()
        err = ctypes.POINTER(sig.kcsi_error)()
        rc = lib.kcsi_host_new(_encode_str(config, True), ctypes.byref(out), ctypes.byref(err))
        if rc != 0:
            raise _error_from(err, rc, "kcsi_host_new")
        super().__init__(out)

    def metrics_samples(self) -> "list[Sample]":
        """The host's metrics parsed: a list of `Sample(name, labels, value)`."""
        return parse_metrics(self.metrics())


Sample = collections.namedtuple("Sample", "name labels value")

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse_metrics(text):
    """Parses the Prometheus text format 0.0.4 that `kcsi_host_metrics` writes into a list of
    `Sample(name, labels, value)`: `labels` a dict, `value` a float; comments are skipped."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError(f"not a Prometheus sample line: {line!r}")
        labels = {k: re.sub(r'\\[\\"n]', lambda e: _UNESCAPE[e.group(0)], v)
                  for k, v in _LABEL.findall(m.group(2) or "")}
        samples.append(Sample(m.group(1), labels, float(m.group(3))))
    return samples


class Mounter(_MounterMethods, _Handle):
    _ctype = "kcsi_mounter"


class Unmounter(_UnmounterMethods, _Handle):
    _ctype = "kcsi_unmounter"


class Attacher(_AttacherMethods, _Handle):
    _ctype = "kcsi_attacher"


class BlockMapper(_BlockMapperMethods, _Handle):
    _ctype = "kcsi_block_mapper"


class BlockUnmapper(_BlockUnmapperMethods, _Handle):
    _ctype = "kcsi_block_unmapper"


for _cls in (Host, Mounter, Unmounter, Attacher, BlockMapper, BlockUnmapper):
    _HANDLE_CLASSES[_cls._ctype + " *"] = _cls


def _generic_handle_class(ctype):
    """A class for an opaque handle type the header gained that has no named class here."""
    name = "".join(p.capitalize() for p in ctype[len("kcsi_"):].split("_"))
    methods = getattr(_methods, f"_{name}Methods", None)
    return type(name, (methods, _Handle) if methods else (_Handle,), {"_ctype": ctype})


for _opaque in sig.OPAQUE:
    if _opaque != "kcsi_error" and _opaque + " *" not in _HANDLE_CLASSES:
        _HANDLE_CLASSES[_opaque + " *"] = _generic_handle_class(_opaque)


# ---------------------------------------------------------------------------------------------
# Logging

_log_lock = threading.Lock()
# Every callback thunk ever installed stays referenced: a log record may still be running on a
# kcsi thread through the previous one while it is replaced, and freeing a CFUNCTYPE thunk
# that C still calls crashes the interpreter.
_log_thunks = []


def set_log_callback(fn, max_level=2):
    """Routes kcsi's log records with level <= max_level (0 error .. 4 trace) to
    `fn(level, target, message)` (any thread, concurrently); None restores stderr. Exceptions
    raised by `fn` are swallowed. `fn` must not call blocking kcsi functions."""
    if fn is None:
        thunk = ctypes.cast(None, sig.kcsi_log_fn)
    else:
        def trampoline(_user, level, target, message):
            try:
                fn(level, (target or b"").decode("utf-8", "replace"), (message or b"").decode("utf-8", "replace"))
            except BaseException:  # never let an exception unwind into C
                pass

        thunk = sig.kcsi_log_fn(trampoline)
    if fn is not None:
        with _log_lock:
            _log_thunks.append(thunk)
    # Not under _log_lock: a callback running on another thread may call this too (kcsi
    # refuses that call), and must not wait on a lock held across the C call.
    _call("kcsi_set_log_callback", None, (thunk, None, max_level), {})
