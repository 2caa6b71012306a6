"""Fixtures for kcsi's Python tests: the installed kcsi package over libkcsi.so, the real
csi-driver-host-path (hostpathplugin) as driver process in short /tmp dirs, and the one allowed
fake, `silent_socket`. Teardown never leaves a process, socket dir or mount behind.

A test that cannot run here (not root) is skipped, unless KCSI_REQUIRE_ROOT=1 (set by
scripts/test-python.sh, so by `make test`): then it fails, naming what is missing."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import typing

import pytest

import kcsi
from kube import ApiServer
from mountinfo import mount_points, mounts_below

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTPATH_DRIVER = "hostpath.csi.k8s.io"
REQUIRE_ALL = os.environ.get("KCSI_REQUIRE_ROOT") == "1"


def unavailable(what):
    """A test that cannot run here: skipped, or failed where KCSI_REQUIRE_ROOT=1."""
    if REQUIRE_ALL:
        pytest.fail(f"{what}, and KCSI_REQUIRE_ROOT=1 requires every test to run", pytrace=False)
    pytest.skip(what)


@pytest.fixture
def needs_root():
    """For a test that mounts: root, or it cannot run."""
    if os.geteuid() != 0:
        unavailable(f"needs root to mount (running as uid {os.geteuid()})")


def shape_mismatch(value, typ, where="result"):
    """Where `value` is not of the type `typ` (a TypedDict, List, Dict, Optional, Literal or a
    class), or None: checks that a result's declared TypedDict is what kcsi really returns."""
    origin, args = typing.get_origin(typ), typing.get_args(typ)
    if typing.is_typeddict(typ):
        if not isinstance(value, dict):
            return f"{where}: {value!r} is not a dict ({typ.__name__})"
        hints = typing.get_type_hints(typ)
        if not typ.__required_keys__ <= set(value) <= set(hints):
            return (f"{where}: keys {sorted(value)}, but {typ.__name__} requires "
                    f"{sorted(typ.__required_keys__)} and allows {sorted(hints)}")
        return next(filter(None, (shape_mismatch(v, hints[k], f"{where}[{k!r}]") for k, v in value.items())), None)
    if origin is typing.Union:
        wrong = [shape_mismatch(value, a, where) for a in args]
        return None if None in wrong else " / ".join(wrong)
    if origin is typing.Literal:
        return None if value in args else f"{where}: {value!r} is not one of {args}"
    if origin is list:
        if not isinstance(value, list):
            return f"{where}: {value!r} is not a list"
        return next(filter(None, (shape_mismatch(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))), None)
    if origin is dict:
        if not isinstance(value, dict):
            return f"{where}: {value!r} is not a dict"
        return next(filter(None, (shape_mismatch(k, args[0], f"{where} key") or shape_mismatch(v, args[1], f"{where}[{k!r}]")
                                  for k, v in value.items())), None)
    if typ is type(None):
        return None if value is None else f"{where}: {value!r} is not None"
    if isinstance(value, bool) and typ is not bool:
        return f"{where}: {value!r} is a bool, not {typ.__name__}"
    return None if isinstance(value, typ) else f"{where}: {value!r} is not {typ.__name__}"


def assert_shape(value, typ):
    wrong = shape_mismatch(value, typ)
    assert wrong is None, wrong


def peer_binary(name):
    r = subprocess.run(["bash", os.path.join(REPO, "scripts/peers/path.sh"), name],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"peer {name} is not built: {r.stderr.strip()} (scripts/peers/build.sh {name})")
    return r.stdout.strip()


def short_tempdir(prefix):
    # Unix socket paths hold at most 107 bytes: keep dirs directly under /tmp.
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


def unmount_below(path):
    """Lazily unmounts everything at or below `path`, deepest first."""
    for t in sorted(set(mounts_below(path)), key=len, reverse=True):
        subprocess.run(["umount", "-l", t], capture_output=True)


def wait_for(what, timeout, ready, proc=None):
    deadline = time.monotonic() + timeout
    while not ready():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: process exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


class DriverProcess:
    """A real CSI driver on its own socket in its own short temp dir."""

    def __init__(self, program, args_fn, name, prefix):
        self.dir = short_tempdir(prefix)
        self.socket = os.path.join(self.dir, "csi.sock")
        self.name = name
        self.program = program
        self.args = args_fn(self)
        self.proc = None
        self.start()

    @property
    def endpoint(self):
        return self.socket

    @property
    def log_path(self):
        return os.path.join(self.dir, "driver.log")

    def log(self):
        try:
            with open(self.log_path) as f:
                return f.read()
        except OSError:
            return ""

    def calls(self, method):
        """The driver's own record of its `method` calls, oldest first: the `gRPCCall: {"Method",
        "Request", "Response", "Error"}` lines hostpathplugin logs at -v=5 (messages as Go's
        encoding/json renders them, proto field names). An unreadable log or a record that does
        not parse fails."""
        calls = []
        with open(self.log_path) as f:
            lines = f.read().splitlines()
        for line in lines:
            if "gRPCCall: " not in line:
                continue
            text = line.split("gRPCCall: ", 1)[1]
            try:
                call = json.loads(text)
            except ValueError as e:
                raise AssertionError(f"{self.log_path}: unparsable gRPCCall record ({e}): {text!r}") from None
            if call["Method"].endswith("/" + method):
                calls.append(call)
        return calls

    def requests(self, method):
        return [c["Request"] for c in self.calls(method)]

    def start(self):
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen([self.program] + self.args, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, start_new_session=True)
        finally:
            log.close()
        # Ready when a connect succeeds: the socket file appears at bind(), before listen().
        wait_for(f"{self.name} listening on {self.socket}", 20, self._accepts, self.proc)

    def _accepts(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(self.socket)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def kill(self):
        """SIGKILL, as a crashing driver."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        try:
            os.unlink(self.socket)
        except FileNotFoundError:
            pass

    def stop(self):
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        unmount_below(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def hostpath_driver():
    """Factory: hostpath_driver(node_id="node-1", name=HOSTPATH_DRIVER, extra=[...]) starts
    the real csi-driver-host-path (real mounts below its state dir; flags such as
    --maxvolumespernode=N, --enable-topology=false)."""
    program = peer_binary("hostpath")
    started = []

    def start(node_id="node-1", name=HOSTPATH_DRIVER, extra=()):
        d = DriverProcess(
            program,
            lambda d: [f"--endpoint=unix://{d.socket}", f"--nodeid={node_id}",
                       f"--statedir={os.path.join(d.dir, 'state')}",
                       f"--drivername={name}", "-v=5", *extra],
            name, "kcsi-ph")
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


@pytest.fixture(scope="session")
def apiserver():
    """A real kube-apiserver on etcd, one for the session (tests use their own node names)."""
    for peer in ("etcd", "kube-apiserver"):
        peer_binary(peer)
    api = ApiServer(REPO, short_tempdir("kcsi-pa"))
    yield api
    api.stop()


@pytest.fixture
def peer_process():
    """Factory: peer_process(peer, args, log) runs a real peer program (scripts/peers/path.sh
    names it) with its output in `log`; stopped at teardown."""
    started = []

    def start(peer, args, log):
        with open(log, "ab") as out:
            p = subprocess.Popen([peer_binary(peer)] + list(args), stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=out, start_new_session=True)
        started.append(p)
        return p

    yield start
    for p in started:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.fixture
def make_host():
    """Factory: make_host(node="node-1", **config) -> an open kcsi.Host rooted in its own
    short temp dir; closed and removed (mounts first) at teardown."""
    made = []

    def make(node="node-1", **config):
        root = short_tempdir("kcsi-pr")
        cfg = {"nodeName": node, "rootDir": root}
        cfg.update(config)
        made.append((None, root))
        h = kcsi.Host(cfg)
        made[-1] = (h, root)
        h.root = root
        return h

    yield make
    for h, root in made:
        if h is not None:
            h.close()
        unmount_below(root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def host(make_host):
    return make_host()


class SilentSocket:
    """A Unix socket that never answers a CSI call: mode "no-accept" listens but never accepts
    (the connect succeeds from the backlog); mode "no-http2" accepts and reads but never
    writes a byte, so the HTTP/2 handshake never completes; `accepted` is set at its first
    connection (a call is then in flight inside kcsi)."""

    def __init__(self, mode):
        self.dir = short_tempdir("kcsi-ps")
        self.path = os.path.join(self.dir, "silent.sock")
        self.mode = mode
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(64)
        self.conns = []
        self._stop = threading.Event()
        self.accepted = threading.Event()
        self.thread = None
        if mode == "no-http2":
            self.thread = threading.Thread(target=self._serve, daemon=True)
            self.thread.start()

    def _serve(self):
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            c.setblocking(False)
            self.conns.append(c)
            self.accepted.set()
            # Drain nothing and answer nothing: the client's preface just sits in our buffer.

    def close(self):
        self._stop.set()
        if self.thread:
            self.thread.join(timeout=2)
        for c in self.conns:
            c.close()
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def silent_socket():
    made = []

    def make(mode="no-accept"):
        s = SilentSocket(mode)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def pv_spec(driver, handle="vol-1", read_only=False, name="pv-1", volume_mode="Filesystem", **csi):
    source = {"driver": driver, "volumeHandle": handle}
    source.update(csi)
    return {
        "persistentVolume": {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
                     "volumeMode": volume_mode, "csi": source},
        },
        "readOnly": read_only,
    }


def inline_spec(driver, name="inline-1", attrs=None):
    return {"volume": {"name": name, "csi": {"driver": driver, "volumeAttributes": attrs or {}}}}


def pod(uid="3c1a3a26-3f4b-4b77-9c0c-000000000001", name="pod-1", namespace="default"):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def csi_driver(name, **spec):
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": name},
            "spec": spec}


def _children():
    """PIDs whose parent is this process (drivers a test forgot to stop)."""
    me = str(os.getpid())
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me and fields[0] != "Z":
                kids.append(int(entry))
    return kids


def _our_mounts():
    return [p for p in mount_points() if p.startswith("/tmp/kcsi-p")]


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind():
    """Fails the session if any test left a driver process or a mount behind."""
    yield
    assert _children() == [], "driver processes left running"
    assert _our_mounts() == [], "mounts left behind"
