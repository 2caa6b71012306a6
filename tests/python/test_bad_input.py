"""Bad input on every export, enumerated from include/kcsi.h (via the generated signatures), so
exports added later are covered as soon as they land: NULL for every required pointer, invalid
UTF-8 for every string, malformed JSON for every *_json, NULL out-pointers, NULL/invalid array
elements. Each must return KCSI_ERR_INVALID_ARGUMENT with a message naming the argument, never
crash the interpreter, and change nothing (driver list, status, files under rootDir)."""
import ctypes
import json
import os
import re

import pytest

import kcsi
from kcsi import _signatures as sig
from conftest import (DriverProcess, HOSTPATH_DRIVER, peer_binary, pod, pv_spec, short_tempdir,
                      unmount_below)

INVALID = kcsi.KCSI_ERR_INVALID_ARGUMENT
BAD_UTF8 = b"\xff\xfe\xc3(bad"
BAD_JSON = b'{"unterminated": '

# Arguments whose messages name them by what they hold rather than by the C parameter name.
MESSAGE_ALIASES = {"config_json": ("config_json", "host config")}

SENTINEL = ctypes.c_void_p(0xDEAD0)
SPEC_NAME = "pv-sweep"
POD_UID = "5d4c3b2a-1111-2222-3333-444455556666"


def handle_type(ctype):
    """`kcsi_mounter *` -> "kcsi_mounter" for handle parameters (not errors, not outputs)."""
    m = re.fullmatch(r"(?:const )?(kcsi_\w+) \*", ctype)
    return m.group(1) if m and m.group(1) in sig.OPAQUE and m.group(1) != "kcsi_error" else None


def is_out(ctype, name):
    return (name == "out" or name.endswith("_out")) and name != "err_out"


def fallible(fname):
    params = sig.FUNCTIONS[fname][1]
    return bool(params) and params[-1][1] == "err_out"


def array_params(params):
    names = [n for _, n in params]
    return {n for t, n in params if "*const *" in t and f"{n}_len" in names}


def mutations(fname):
    """(param, kind) pairs for one export."""
    params = sig.FUNCTIONS[fname][1]
    arrays = array_params(params)
    out = []
    for t, n in params:
        if n == "err_out" or (n.endswith("_len") and n[:-4] in arrays):
            continue
        if handle_type(t) and not is_out(t, n):
            out.append((n, "null"))
        elif n in arrays:
            out += [(n, "null_array"), (n, "null_element"), (n, "bad_utf8_element")]
        elif t == "const char *":
            if not kcsi.nullable(fname, n):
                out.append((n, "null"))
            out.append((n, "bad_utf8"))
            if n.endswith("_json"):
                out.append((n, "bad_json"))
        elif is_out(t, n):
            out.append((n, "null_out"))
    return out


CASES = [(f, p, k) for f in sig.FUNCTIONS if fallible(f) for p, k in mutations(f)]


# ------------------------------------------------------------------------- the sweep's world

class World:
    """One host with a registered real driver, the handles of every type, and baseline values
    valid enough that only the mutated argument is wrong."""

    def __init__(self):
        self.driver = DriverProcess(
            peer_binary("hostpath"),
            lambda d: [f"--endpoint=unix://{d.socket}", "--nodeid=node-sweep",
                       f"--statedir={os.path.join(d.dir, 'state')}", f"--drivername={HOSTPATH_DRIVER}"],
            HOSTPATH_DRIVER, "kcsi-pw")
        self.root = short_tempdir("kcsi-pw")
        self.host = kcsi.Host({"nodeName": "node-sweep", "rootDir": self.root})
        self.host.register_plugin(HOSTPATH_DRIVER, self.driver.endpoint, ["1.0.0"], 10_000)
        self.handles = {"kcsi_host": self.host}
        self.keep = []

    def close(self):
        for t, h in list(self.handles.items()):
            if t != "kcsi_host":
                h.close()
        self.host.close()
        self.driver.stop()
        unmount_below(self.root)
        import shutil
        shutil.rmtree(self.root, ignore_errors=True)

    def string(self, fname, name):
        spec = pv_spec(HOSTPATH_DRIVER, handle="vol-sweep", name=SPEC_NAME)
        pod_dir = os.path.join(self.root, "pods", POD_UID, "volumes", "kubernetes.io~csi", SPEC_NAME)
        values = {
            "config_json": {"nodeName": "node-x", "rootDir": self.root},
            "spec_json": spec,
            "specs_json": [spec],
            "pod_json": pod(uid=POD_UID),
            "args_json": {},
            "options_json": {"spec": spec, "devicePath": "/dev/null", "deviceMountPath": pod_dir,
                             "deviceStagePath": pod_dir, "newSize": "2Gi", "oldSize": "1Gi"},
            "name": HOSTPATH_DRIVER,
            "endpoint": self.driver.endpoint,
            "volume_name": f"{HOSTPATH_DRIVER}^vol-sweep",
            "mount_path": pod_dir,
            "spec_name": SPEC_NAME,
            "pod_uid": POD_UID,
            "map_path": os.path.join(self.root, "plugins", "kubernetes.io", "csi", "volumeDevices", SPEC_NAME, "dev"),
            "device_mount_path": os.path.join(self.root, "plugins", "kubernetes.io", "csi", HOSTPATH_DRIVER, "x", "globalmount"),
            "global_map_path": os.path.join(self.root, "gmp"),
            "device_path": "/dev/null",
        }
        v = values.get(name, "sweep")
        return json.dumps(v).encode() if not isinstance(v, str) else v.encode()

    def handle(self, htype):
        """A live handle of `htype`, made with its `<htype>_new` constructor."""
        if htype in self.handles:
            return self.handles[htype]
        ctor = htype + "_new"
        if ctor not in sig.FUNCTIONS:
            pytest.fail(f"no constructor {ctor} in kcsi.h for handle type {htype}")
        rc, args, out = self.call(ctor, None)
        if rc == kcsi.KCSI_ERR_NOT_FOUND:
            # Unmappers load the vol_data.json their mapper wrote: make the siblings first.
            for other in sig.OPAQUE:
                if other not in self.handles and other not in (htype, "kcsi_error") and other + "_new" in sig.FUNCTIONS:
                    try:
                        self.handle(other)
                    except BaseException:
                        pass
            rc, args, out = self.call(ctor, None)
        if rc != 0:
            pytest.fail(f"cannot construct a {htype} for the sweep: {ctor} -> {kcsi.result_name(rc)}")
        cls = kcsi._HANDLE_CLASSES[htype + " *"]
        self.handles[htype] = cls(out[0])
        return self.handles[htype]

    def call(self, fname, mutation, err_out=True):
        """Calls `fname` with baseline arguments, one of them replaced per `mutation`
        ((param, kind) or None). Returns (rc, message or None, outputs)."""
        params = sig.FUNCTIONS[fname][1]
        fn = getattr(kcsi.lib, fname)
        arrays = array_params(params)
        args = [None] * len(params)
        outs = []
        err = ctypes.POINTER(sig.kcsi_error)()
        mp, kind = mutation or (None, None)
        for i, (t, n) in enumerate(params):
            at = fn.argtypes[i]
            if n == "err_out":
                args[i] = ctypes.byref(err) if err_out else None
            elif n.endswith("_len") and n[:-4] in arrays:
                continue  # filled with its array
            elif n in arrays:
                items = [b"1.0.0"]
                length = 1
                if n == mp:
                    if kind == "null_array":
                        items = None
                    elif kind == "null_element":
                        items = [b"1.0.0", None]
                    elif kind == "bad_utf8_element":
                        items = [b"1.0.0", BAD_UTF8]
                    length = 1 if items is None else len(items)
                args[i] = (ctypes.c_char_p * len(items))(*items) if items else None
                args[params.index((f"size_t", f"{n}_len"))] = length
            elif is_out(t, n):
                # A sentinel, to prove that a failed call leaves outputs alone.
                holder = at._type_(True) if at._type_ is ctypes.c_bool else ctypes.cast(SENTINEL, at._type_)
                outs.append(holder)
                args[i] = None if (n == mp and kind == "null_out") else ctypes.byref(holder)
            elif handle_type(t):
                args[i] = None if n == mp else self.handle(handle_type(t))._ptr
            elif t == "const char *":
                v = self.string(fname, n)
                if n == mp:
                    v = {"null": None, "bad_utf8": BAD_UTF8, "bad_json": BAD_JSON}[kind]
                args[i] = v
            elif t == "kcsi_log_fn":
                args[i] = ctypes.cast(None, at)
            elif t in ("int64_t", "int32_t", "size_t", "bool"):
                args[i] = 1000 if n.endswith("_ms") else 2
            elif t == "void *":
                args[i] = None
            else:
                pytest.fail(f"sweep has no baseline value for {fname}({t} {n}): extend World.call")
        rc = fn(*args)
        msg = None
        if err:
            m = kcsi.lib.kcsi_error_message(err)
            msg = m.decode("utf-8", "replace") if m is not None else None
            assert kcsi.lib.kcsi_error_result(err) == rc
            kcsi.lib.kcsi_error_free(err)
        if rc == 0:
            return rc, msg, outs
        return rc, msg, outs

    def snapshot(self):
        # Blanks (".vol_data.json.<pid>.<random>.blank" in .kcsi-tmp) are not state: the host
        # makes them ahead of need, 10 ms after its saves pause, so one can appear just after
        # the handle construction that preceded a snapshot.
        files = []
        for d, dirs, fs in os.walk(self.root):
            files += [os.path.join(d, x) for x in dirs + fs if not is_blank(d, x)]
        return self.host.list_drivers(), self.host.status(), sorted(files)


def is_blank(d, name):
    return (os.path.basename(d) == ".kcsi-tmp" and name.startswith(".vol_data.json.")
            and name.endswith(".blank"))


@pytest.fixture(scope="module")
def world():
    w = World()
    yield w
    w.close()


def message_names(msg, fname, param):
    params = dict((n, t) for t, n in sig.FUNCTIONS[fname][1])
    ht = handle_type(params[param])
    if ht:
        noun = ht[len("kcsi_"):]
        wanted = (noun, noun.replace("_", " "), param if len(param) > 2 else noun)
    else:
        wanted = MESSAGE_ALIASES.get(param, (param,))
    return any(w in msg for w in wanted)


@pytest.mark.parametrize("fname,param,kind", CASES, ids=[f"{f}-{p}-{k}" for f, p, k in CASES])
def test_bad_input_is_invalid_argument_naming_it_without_state_change(world, fname, param, kind):
    if fname in kcsi.MISSING:
        pytest.fail(f"{fname} is in kcsi.h but libkcsi does not export it")
    # Child handles are made before the snapshot: their construction may write files.
    for t, n in sig.FUNCTIONS[fname][1]:
        if handle_type(t) and n != param:
            world.handle(handle_type(t))
    before = world.snapshot()
    rc, msg, outs = world.call(fname, (param, kind))
    assert rc == INVALID, f"{fname}({param}={kind}) -> {kcsi.result_name(rc)}: {msg}"
    for o in outs:  # outputs are written only on success
        assert (o.value is True) if isinstance(o, ctypes.c_bool) else (ctypes.cast(o, ctypes.c_void_p).value == SENTINEL.value), fname
    assert msg and message_names(msg, fname, param), f"{fname}({param}={kind}): message does not name {param!r}: {msg!r}"
    # The same call without an error slot still just returns the code.
    rc2, msg2, _ = world.call(fname, (param, kind), err_out=False)
    assert rc2 == INVALID and msg2 is None
    assert world.snapshot() == before


def test_sweep_covers_every_fallible_export():
    covered = {f for f, _, _ in CASES}
    expected = {f for f in sig.FUNCTIONS if fallible(f) and mutations(f)}
    assert covered == expected
    # Every contract function with a pointer argument is in the sweep.
    assert {"kcsi_host_new", "kcsi_register_plugin", "kcsi_validate_plugin", "kcsi_get_volume_name"} <= covered


FREE_FUNCTIONS = [f for f, (r, p, _d) in sig.FUNCTIONS.items() if f.endswith("_free") and r == "void" and len(p) == 1]


@pytest.mark.parametrize("fname", FREE_FUNCTIONS)
def test_free_null_is_a_no_op(fname):
    getattr(kcsi.lib, fname)(None)


def test_error_accessors_on_null():
    assert kcsi.lib.kcsi_error_result(None) == INVALID
    assert kcsi.lib.kcsi_error_message(None) is None
    assert kcsi.lib.kcsi_error_grpc_code(None) == -1
    assert kcsi.lib.kcsi_error_upstream_message(None) is None
    assert kcsi.lib.kcsi_error_class(None) == -1


@pytest.mark.parametrize("level", [-1, 5, 2**31 - 1])
def test_set_log_callback_rejects_out_of_range_level(level):
    err = ctypes.POINTER(sig.kcsi_error)()
    rc = kcsi.lib.kcsi_set_log_callback(ctypes.cast(None, sig.kcsi_log_fn), None, level, ctypes.byref(err))
    assert rc == INVALID
    assert b"max_level" in kcsi.lib.kcsi_error_message(err)
    kcsi.lib.kcsi_error_free(err)


def test_validate_rejects_unsafe_driver_names(host):
    for name in ["", "../evil", "a//b", "/abs", "a\nb"]:
        with pytest.raises(kcsi.InvalidArgument):
            host.validate_plugin(name, "/tmp/x.sock", ["1.0.0"])


def test_register_rejects_relative_and_overlong_endpoints(host):
    for endpoint in ["relative.sock", "unix://", "/" + "a" * 200]:
        with pytest.raises(kcsi.InvalidArgument):
            host.register_plugin("a.example.com", endpoint, ["1.0.0"], 1000)
    assert host.list_drivers() == []


@pytest.mark.parametrize("name", ["..", ".", "", "a\tb"])
def test_unsafe_spec_names_are_invalid_argument(host, name):
    calls = {
        "mounter": lambda: host.mounter(pv_spec(HOSTPATH_DRIVER, name=name), pod()),
        "unmounter": lambda: host.unmounter(name, POD_UID),
        "block_mapper": lambda: host.block_mapper(pv_spec(HOSTPATH_DRIVER, name=name), pod()),
        "block_unmapper": lambda: host.block_unmapper(name, POD_UID),
        "construct_block_volume_spec": lambda: host.construct_block_volume_spec(POD_UID, name, "/x"),
    }
    for what, f in calls.items():
        with pytest.raises(kcsi.InvalidArgument):
            f()
    assert os.listdir(host.root) == []  # nothing was created on the way to the refusal


def test_spec_name_with_slash_is_escaped_inside_the_pod_dir(host):
    # As upstream (EscapeQualifiedName): "/" becomes "~", so no name leaves the pod's dir.
    with host.mounter(pv_spec(HOSTPATH_DRIVER, name="../../../../tmp/x"), pod()) as m:
        path = m.path()
    assert path.startswith(os.path.join(host.root, "pods", ""))
    assert os.path.basename(os.path.dirname(path)) == "..~..~..~..~tmp~x"


@pytest.mark.parametrize("uid", ["..", "../../etc", "", "a/b"])
def test_unsafe_pod_uids_are_invalid_argument(host, uid):
    with pytest.raises(kcsi.InvalidArgument):
        host.mounter(pv_spec(HOSTPATH_DRIVER), pod(uid=uid))
    with pytest.raises(kcsi.InvalidArgument):
        host.unmounter("pv-1", uid)
