"""Log callback and lifecycle-handle rules, through libkcsi.so."""
import threading

import pytest

import kcsi
from conftest import HOSTPATH_DRIVER, assert_shape, pod, pv_spec


@pytest.fixture
def log_records():
    records = []
    lock = threading.Lock()

    def sink(level, target, message):
        with lock:
            records.append((level, target, message))

    kcsi.set_log_callback(sink, 4)
    yield records
    kcsi.set_log_callback(None, 1)


def test_log_callback_receives_records(host, log_records):
    host.validate_plugin("logged.example.com", "/tmp/logged.sock", ["1.0.0"])
    msgs = [m for _, _, m in log_records]
    assert any("logged.example.com" in m for m in msgs), msgs
    assert all(0 <= lvl <= 4 for lvl, _, _ in log_records)
    assert all(isinstance(t, str) and t for _, t, _ in log_records)


def test_log_callback_respects_max_level(host):
    def levels(max_level):
        records = []
        kcsi.set_log_callback(lambda lvl, t, m: records.append(lvl), max_level)
        try:
            host.validate_plugin("quiet.example.com", "/tmp/quiet.sock", ["1.0.0"])
        finally:
            kcsi.set_log_callback(None, 1)
        return records

    # The same call logs at info (2) when allowed, and reaches no callback capped at errors (0).
    at_info = levels(2)
    assert 2 in at_info and all(lvl <= 2 for lvl in at_info), at_info
    assert levels(0) == []


def test_blocking_call_inside_log_callback_is_invalid_argument_not_deadlock(host, hostpath_driver):
    d = hostpath_driver()
    inner = []

    def sink(level, target, message):
        # Registration logs from inside its runtime future: call a blocking export from there.
        if not inner and "Register new plugin" in message:
            try:
                host.deregister_plugin("other.example.com")
                inner.append("returned OK")
            except kcsi.KcsiError as e:
                inner.append(e)
            try:
                kcsi.set_log_callback(None, 1)
                inner.append("set_log_callback OK")
            except kcsi.KcsiError as e:
                inner.append(e)

    kcsi.set_log_callback(sink, 4)
    done = threading.Event()
    outcome = []

    def register():
        try:
            host.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
            outcome.append("ok")
        except Exception as e:
            outcome.append(e)
        done.set()

    t = threading.Thread(target=register, daemon=True)
    t.start()
    try:
        assert done.wait(30), "register_plugin deadlocked after a kcsi call from the log callback"
    finally:
        kcsi.set_log_callback(None, 1)
    assert outcome == ["ok"]
    assert len(inner) == 2, inner
    assert isinstance(inner[0], kcsi.InvalidArgument), inner
    assert isinstance(inner[1], kcsi.InvalidArgument), inner
    assert [x["name"] for x in host.list_drivers()] == [HOSTPATH_DRIVER]


def test_log_callback_exception_does_not_break_calls(host, log_records):
    raised = []

    def boom(level, target, message):
        raised.append(message)
        raise RuntimeError("host bug")

    kcsi.set_log_callback(boom, 4)
    try:
        host.validate_plugin("boom.example.com", "/tmp/boom.sock", ["1.0.0"])  # returns normally
    finally:
        kcsi.set_log_callback(None, 1)
    assert raised, "the callback was never called: nothing was tested"
    # Logging still works afterwards: the next callback gets the next call's records.
    kcsi.set_log_callback(lambda lvl, t, m: log_records.append(m), 4)
    host.validate_plugin("after.example.com", "/tmp/after.sock", ["1.0.0"])
    assert any("after.example.com" in m for m in log_records), log_records


# ------------------------------------------------------------------------- lifecycle handles

def test_mounter_is_a_context_manager_with_idempotent_close(host):
    with host.mounter(pv_spec(HOSTPATH_DRIVER), pod()) as m:
        assert isinstance(m, kcsi.Mounter)
        path = m.path()
        assert path.startswith(host.root) and path.endswith("/mount")
    assert m.closed
    m.close()
    with pytest.raises(ValueError):
        m.path()


def test_mounter_after_host_closed_is_failed_precondition(make_host):
    h = make_host()
    m = h.mounter(pv_spec(HOSTPATH_DRIVER), pod())
    h.close()
    with pytest.raises(kcsi.FailedPrecondition):
        m.set_up(None)
    m.close()


def test_attacher_after_host_closed_is_failed_precondition(make_host):
    h = make_host()
    a = h.attacher()
    assert isinstance(a, kcsi.Attacher)
    h.close()
    with pytest.raises(kcsi.FailedPrecondition):
        a.device_mount_path(pv_spec(HOSTPATH_DRIVER))
    a.close()


def test_block_mapper_after_host_closed_is_failed_precondition(make_host):
    h = make_host()
    m = h.block_mapper(pv_spec(HOSTPATH_DRIVER, volume_mode="Block"), pod())
    assert isinstance(m, kcsi.BlockMapper)
    h.close()
    with pytest.raises(kcsi.FailedPrecondition):
        m.set_up_device()
    m.close()


def test_block_mapper_paths_have_their_declared_keys_and_lie_below_the_root(host):
    with host.block_mapper(pv_spec(HOSTPATH_DRIVER, volume_mode="Block", name="pv-p"), pod()) as m:
        paths = m.paths()
    assert_shape(paths, kcsi.BlockMapperPaths)
    assert paths["podDeviceMapName"] == "pv-p"
    assert all(p.startswith(host.root + "/") for k, p in paths.items() if k != "podDeviceMapName"), paths


def test_set_up_without_registered_driver_is_transient(host):
    with host.mounter(pv_spec("unregistered.csi.example.com"), pod()) as m:
        with pytest.raises(kcsi.KcsiError) as e:
            m.set_up()
    assert kcsi.is_transient(e.value), e.value


def test_block_unmapper_after_host_closed_is_failed_precondition(make_host):
    h = make_host()
    p = pod()
    # The mapper writes the volume's data/vol_data.json, which the unmapper loads.
    h.block_mapper(pv_spec(HOSTPATH_DRIVER, volume_mode="Block", name="pv-b"), p).close()
    u = h.block_unmapper("pv-b", p["metadata"]["uid"])
    assert isinstance(u, kcsi.BlockUnmapper)
    h.close()
    with pytest.raises(kcsi.FailedPrecondition):
        u.unmap_pod_device()
    with pytest.raises(kcsi.FailedPrecondition):
        u.tear_down_device(None, None)
    u.close()


def test_unmounter_after_host_closed_is_failed_precondition(make_host):
    import json
    import os
    h = make_host()
    uid = pod()["metadata"]["uid"]
    vol_dir = os.path.join(h.root, "pods", uid, "volumes", "kubernetes.io~csi", "pv-u")
    os.makedirs(os.path.join(vol_dir, "mount"))
    # What a kubelet finds after a restart: only the vol_data.json SetUp wrote.
    with open(os.path.join(vol_dir, "vol_data.json"), "w") as f:
        json.dump({"specVolID": "pv-u", "volumeHandle": "h", "driverName": HOSTPATH_DRIVER,
                   "nodeName": "node-1", "volumeLifecycleMode": "Persistent",
                   "attachmentID": "csi-0000"}, f)
    u = h.unmounter("pv-u", uid)
    assert isinstance(u, kcsi.Unmounter)
    h.close()
    with pytest.raises(kcsi.FailedPrecondition):
        u.tear_down()
    u.close()
