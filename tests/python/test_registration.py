"""Registration through libkcsi.so as a host calls it: the kubelet plugin watcher's CSI handler
against real CSI driver processes."""
import os
import threading
import time

import pytest

import kcsi
from conftest import HOSTPATH_DRIVER


def names(host):
    return [d["name"] for d in host.list_drivers()]


def test_register_list_deregister_hostpath_driver(host, hostpath_driver):
    d = hostpath_driver()
    host.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
    [entry] = host.list_drivers()
    assert entry["name"] == HOSTPATH_DRIVER
    assert entry["endpoint"] == d.endpoint
    assert entry["highestSupportedVersion"] == "1.0.0"
    # The node id the driver answered NodeGetInfo with over the socket.
    assert entry["nodeId"] == "node-1"
    assert {"maxVolumesPerNode", "topology"} <= entry.keys()
    assert host.status()["drivers"] == host.list_drivers()
    assert "NodeGetInfo" in d.log()
    host.deregister_plugin(d.name)
    assert host.list_drivers() == []


def test_register_reports_attach_limit_and_topology(host, hostpath_driver):
    d = hostpath_driver(extra=["--maxvolumespernode=7"])
    host.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
    [entry] = host.list_drivers()
    assert entry["maxVolumesPerNode"] == 7
    assert entry["topology"] and all(isinstance(v, str) for v in entry["topology"].values())


def test_register_accepts_unix_scheme_endpoint(host, hostpath_driver):
    d = hostpath_driver()
    host.register_plugin(d.name, "unix://" + d.endpoint, ["1.0.0"], 10_000)
    assert names(host) == [HOSTPATH_DRIVER]


def test_deregister_unknown_driver_is_not_found(host):
    with pytest.raises(kcsi.NotFound):
        host.deregister_plugin("nobody.example.com")


# Upstream TestValidatePlugin (pkg/volume/csi/csi_plugin_test.go) plus ParseGeneric edge cases.
VALID_VERSIONS = [
    (["v1.0.0"], "1.0.0"),
    (["0.2.0", "v1.0.0"], "1.0.0"),
    (["0.2.0", "v1.2.3"], "1.2.3"),
    (["v1.2.3", "v0.3.0"], "1.2.3"),
    (["v1.2.3", "v0.3.0", "2.0.1"], "1.2.3"),
    (["v1.2.3", "4.9.12", "v0.3.0", "2.0.1"], "1.2.3"),
    (["v1.2.3", "boo", "v0.3.0", "2.0.1"], "1.2.3"),
    (["1.0"], "1.0"),           # two components are enough; printed as parsed
    (["1.0.0-beta"], "1.0.0"),  # trailing junk after the numbers is ignored by ParseGeneric
    ([" 1.0.0"], "1.0.0"),      # leading whitespace allowed by its regex
]
INVALID_VERSIONS = [
    ["0.3.0"],
    ["0.2.0"],
    ["0.2.0", "v0.3.0"],
    ["4.9.12", "2.0.1"],
    [],
    ["var", "boo", "foo"],
    ["1"],       # a single component is not a version
    ["01.0"],    # leading zero in the first component
    ["2.0.0"],
]


@pytest.mark.parametrize("versions,highest", VALID_VERSIONS, ids=[",".join(v) for v, _ in VALID_VERSIONS])
def test_validate_accepts_versions_with_a_1x_and_register_records_the_highest(host, hostpath_driver, versions, highest):
    host.validate_plugin("a.example.com", "/tmp/a.sock", versions)
    assert host.list_drivers() == []  # validation registers nothing
    d = hostpath_driver()
    host.register_plugin(d.name, d.endpoint, versions, 10_000)
    [entry] = host.list_drivers()
    assert entry["highestSupportedVersion"] == highest


@pytest.mark.parametrize("versions", INVALID_VERSIONS, ids=[",".join(v) or "empty" for v in INVALID_VERSIONS])
def test_validate_rejects_versions_without_a_1x(host, versions):
    with pytest.raises(kcsi.UnsupportedVersion) as e:
        host.validate_plugin("a.example.com", "/tmp/a.sock", versions)
    assert 'CSI driver "a.example.com" failed' in e.value.message
    assert host.list_drivers() == []


def test_validate_rejects_empty_versions_with_upstream_message(host):
    with pytest.raises(kcsi.UnsupportedVersion) as e:
        host.validate_plugin("a.example.com", "/tmp/a.sock", [])
    assert "Plugin returned an empty list for supported versions" in e.value.message


def test_register_rejects_0x_only_driver(host, hostpath_driver):
    d = hostpath_driver()
    with pytest.raises(kcsi.UnsupportedVersion) as e:
        host.register_plugin(d.name, d.endpoint, ["0.3.0"], 10_000)
    assert "must be v1.x" in e.value.message
    assert host.list_drivers() == []


@pytest.mark.parametrize("versions", [["v1.2.3", "boo", "v0.3.0", "2.0.1"], ["0.2.0", "v1.0.0"]])
def test_register_records_highest_1x_version(host, hostpath_driver, versions):
    d = hostpath_driver()
    host.register_plugin(d.name, d.endpoint, versions, 10_000)
    [entry] = host.list_drivers()
    assert entry["highestSupportedVersion"] == ("1.2.3" if "v1.2.3" in versions else "1.0.0")


def test_register_same_version_twice_is_already_exists(host, hostpath_driver):
    d = hostpath_driver()
    host.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
    with pytest.raises(kcsi.AlreadyExists) as e:
        host.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
    assert "already registered with a higher supported version" in e.value.message
    with pytest.raises(kcsi.AlreadyExists):
        host.validate_plugin(d.name, d.endpoint, ["1.0.0"])
    # The first registration is untouched.
    assert names(host) == [HOSTPATH_DRIVER]


def test_register_lower_version_is_already_exists(host, hostpath_driver):
    d = hostpath_driver()
    host.register_plugin(d.name, d.endpoint, ["1.2.0"], 10_000)
    with pytest.raises(kcsi.AlreadyExists):
        host.register_plugin(d.name, d.endpoint, ["1.1.0"], 10_000)
    assert host.list_drivers()[0]["highestSupportedVersion"] == "1.2.0"


def test_register_higher_version_replaces_driver(host, hostpath_driver):
    old = hostpath_driver()
    new = hostpath_driver()
    host.register_plugin(HOSTPATH_DRIVER, old.endpoint, ["1.0.0"], 10_000)
    host.validate_plugin(HOSTPATH_DRIVER, new.endpoint, ["1.1.0"])
    host.register_plugin(HOSTPATH_DRIVER, new.endpoint, ["1.1.0"], 10_000)
    [entry] = host.list_drivers()
    assert entry["endpoint"] == new.endpoint and entry["highestSupportedVersion"] == "1.1.0"


def test_reregister_after_deregister_succeeds(host, hostpath_driver):
    d = hostpath_driver()
    host.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
    host.deregister_plugin(d.name)
    host.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
    assert names(host) == [HOSTPATH_DRIVER]


def test_register_missing_socket_is_unavailable_and_rolled_back(host):
    t0 = time.monotonic()
    with pytest.raises(kcsi.Unavailable) as e:
        host.register_plugin("gone.example.com", "/tmp/kcsi-no-such-dir/csi.sock", ["1.0.0"], 120_000)
    assert kcsi.is_transient(e.value)
    assert "gone.example.com" in e.value.message
    assert time.monotonic() - t0 < 60  # refused, not kept retrying until the 120 s timeout
    assert host.list_drivers() == []
    host.validate_plugin("gone.example.com", "/tmp/kcsi-no-such-dir/csi.sock", ["1.0.0"])  # no leftover


def test_register_crashed_driver_stale_socket_is_unavailable(host, hostpath_driver):
    d = hostpath_driver()
    d.proc.kill()  # SIGKILL: the socket file stays, nobody listens
    d.proc.wait()
    d.proc = None
    assert os.path.exists(d.socket)
    with pytest.raises(kcsi.Unavailable) as e:
        host.register_plugin(d.name, d.endpoint, ["1.0.0"], 5_000)
    assert kcsi.is_transient(e.value)
    assert host.list_drivers() == []


def test_register_after_driver_restart_on_same_socket(host, hostpath_driver):
    d = hostpath_driver()
    d.kill()
    with pytest.raises(kcsi.Unavailable):
        host.register_plugin(d.name, d.endpoint, ["1.0.0"], 5_000)
    d.start()
    host.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
    assert names(host) == [HOSTPATH_DRIVER]


@pytest.mark.parametrize("mode", ["no-accept", "no-http2"])
def test_register_silent_socket_times_out_within_timeout(host, silent_socket, mode):
    s = silent_socket(mode)
    t0 = time.monotonic()
    with pytest.raises(kcsi.Timeout) as e:
        host.register_plugin("silent.example.com", s.path, ["1.0.0"], 700)
    elapsed = time.monotonic() - t0
    assert 0.6 <= elapsed < 30, elapsed  # waited for the timeout, then gave up
    assert e.value.result_name == "KCSI_ERR_TIMEOUT"
    assert kcsi.is_transient(e.value)
    assert host.list_drivers() == []


def test_register_silent_socket_uses_host_timeout_when_timeout_is_zero(make_host, silent_socket):
    h = make_host(timeoutSeconds=0.8)
    s = silent_socket("no-accept")
    t0 = time.monotonic()
    with pytest.raises(kcsi.Timeout):
        h.register_plugin("silent.example.com", s.path, ["1.0.0"], 0)
    assert 0.7 <= time.monotonic() - t0 < 30


def test_register_16_drivers_concurrently(host, hostpath_driver):
    drivers = [hostpath_driver(node_id=f"d{i:02}.csi.example.com", name=f"d{i:02}.csi.example.com")
               for i in range(16)]
    errors = []
    barrier = threading.Barrier(len(drivers))

    def register(d):
        try:
            barrier.wait()
            host.register_plugin(d.name, d.endpoint, ["1.0.0"], 20_000)
        except Exception as e:  # collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=register, args=(d,)) for d in drivers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    listed = host.list_drivers()
    assert [d["name"] for d in listed] == sorted(d.name for d in drivers)
    assert all(d["nodeId"] == d["name"] for d in listed)


def test_16_concurrent_registrations_of_one_name_admit_exactly_one(host, hostpath_driver):
    d = hostpath_driver()
    results = []
    barrier = threading.Barrier(16)

    def register():
        barrier.wait()
        try:
            host.register_plugin(d.name, d.endpoint, ["1.0.0"], 20_000)
            results.append("ok")
        except kcsi.AlreadyExists:
            results.append("exists")

    threads = [threading.Thread(target=register) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["exists"] * 15 + ["ok"]
    assert names(host) == [HOSTPATH_DRIVER]


def test_two_hosts_do_not_see_each_others_drivers(make_host, hostpath_driver):
    a = make_host(node="node-a")
    b = make_host(node="node-b")
    d = hostpath_driver()
    a.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
    assert names(a) == [HOSTPATH_DRIVER]
    assert b.list_drivers() == []
    # The same driver can be registered independently on the other host ...
    b.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
    # ... and deregistering it there leaves the first host alone.
    b.deregister_plugin(d.name)
    assert names(a) == [HOSTPATH_DRIVER] and b.list_drivers() == []
    assert a.status()["nodeName"] == "node-a"


def test_host_close_is_idempotent_and_refuses_later_calls(make_host):
    h = make_host()
    h.close()
    h.close()
    assert h.closed
    with pytest.raises(ValueError):
        h.list_drivers()


def test_host_close_waits_for_a_call_in_flight(make_host, silent_socket):
    # close() on one thread while another is blocked in kcsi must not free the host under it.
    h = make_host()
    s = silent_socket("no-http2")
    outcome = []

    def register():
        try:
            h.register_plugin("slow.example.com", s.path, ["1.0.0"], 1500)
        except kcsi.KcsiError as e:
            outcome.append(e)

    t = threading.Thread(target=register)
    t.start()
    assert s.accepted.wait(30), "the registration never reached the socket"
    t0 = time.monotonic()
    h.close()
    closed_after = time.monotonic() - t0
    t.join()
    assert isinstance(outcome[0], kcsi.Timeout)
    assert closed_after >= 0.8, closed_after
    assert h.closed


def test_deregister_during_registration_leaves_nothing_registered(host, silent_socket):
    s = silent_socket("no-http2")
    outcome = []

    def register():
        try:
            host.register_plugin("race.example.com", s.path, ["1.0.0"], 1500)
            outcome.append("ok")
        except kcsi.KcsiError as e:
            outcome.append(e)

    t = threading.Thread(target=register)
    t.start()
    # Connected for NodeGetInfo: the registration is stored and waiting for the answer.
    assert s.accepted.wait(30), "the registration never reached the socket"
    host.deregister_plugin("race.example.com")
    t.join()
    assert isinstance(outcome[0], kcsi.KcsiError), outcome
    assert host.list_drivers() == []


def test_register_deregister_list_storm_stays_consistent(host, hostpath_driver):
    d = hostpath_driver()
    stop = time.monotonic() + 2.0
    errors = []

    def churn():
        while time.monotonic() < stop:
            try:
                host.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
            except (kcsi.AlreadyExists, kcsi.FailedPrecondition):
                pass
            except Exception as e:
                errors.append(e)
            try:
                host.deregister_plugin(d.name)
            except kcsi.NotFound:
                pass
            except Exception as e:
                errors.append(e)
            for entry in host.list_drivers():
                if entry["name"] != d.name:
                    errors.append(entry)

    threads = [threading.Thread(target=churn) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    host.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
    [entry] = host.list_drivers()
    assert entry["nodeId"] == "node-1"


def test_forked_child_gets_failed_precondition_not_a_hang(host, hostpath_driver):
    import os
    d = hostpath_driver()
    host.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)  # the runtime is running
    host.deregister_plugin(d.name)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: one kcsi call, report, and leave without running any Python teardown
        code = 99
        try:
            host.register_plugin(d.name, d.endpoint, ["1.0.0"], 2_000)
            code = 0
        except kcsi.KcsiError as e:
            code = e.result
        finally:
            os.write(w, bytes([code]))
            os._exit(0)
    os.close(w)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("kcsi call in a forked child hung")
    got = os.read(r, 1)
    os.close(r)
    assert got == bytes([kcsi.KCSI_ERR_FAILED_PRECONDITION])


def test_register_with_huge_timeout_fails_cleanly_or_succeeds_and_leaves_no_hidden_entry(host, hostpath_driver):
    d = hostpath_driver()
    try:
        host.register_plugin(d.name, d.endpoint, ["1.0.0"], 2**63 - 1)
    except kcsi.KcsiError as e:
        assert e.result != kcsi.KCSI_ERR_INTERNAL, e
        assert host.list_drivers() == []
        host.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)  # nothing was left behind
    assert [x["name"] for x in host.list_drivers()] == [HOSTPATH_DRIVER]
