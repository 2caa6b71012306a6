"""kcsi_host_metrics through the Python binding: the text and its parsed view."""
import typing

import kcsi
from conftest import HOSTPATH_DRIVER, assert_shape


def test_metrics_text_and_samples_count_a_registration_and_its_rpc(host, hostpath_driver):
    d = hostpath_driver()
    host.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
    text = host.metrics()
    assert "# TYPE csi_operations_seconds histogram\n" in text
    samples = host.metrics_samples()
    counts = [s for s in samples if s.name == "csi_operations_seconds_count"]
    assert [(s.labels, s.value) for s in counts] == [
        ({"driver_name": HOSTPATH_DRIVER, "method_name": "/csi.v1.Node/NodeGetInfo",
          "grpc_status_code": "OK", "migrated": "false"}, 1.0)]
    by_name = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in samples}
    assert by_name[("kcsi_driver_registrations_total", (("result", "success"),))] == 1.0
    assert by_name[("kcsi_registered_drivers", ())] == 1.0


def test_status_and_drivers_have_their_declared_keys_and_types(host, hostpath_driver):
    status = host.status()
    assert_shape(status, kcsi.HostStatus)
    assert (status["role"], status["standalone"], status["drivers"], status["pluginWatcher"]) == (
        "node", True, [], None)
    d = hostpath_driver()
    host.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
    drivers = host.list_drivers()
    assert_shape(drivers, typing.List[kcsi.DriverInfo])
    assert [(x["name"], x["nodeId"]) for x in drivers] == [(HOSTPATH_DRIVER, "node-1")]
    assert_shape(host.status(), kcsi.HostStatus)


def test_each_host_has_its_own_registry(make_host, hostpath_driver):
    d = hostpath_driver()
    a, b = make_host(), make_host()
    a.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
    assert not [s for s in b.metrics_samples() if s.name.startswith("csi_operations_seconds")]


def test_parse_metrics_unescapes_label_values():
    (s,) = kcsi.parse_metrics('x_total{a="q\\"z\\\\",b="n\\n"} 2.5\n# HELP x y\n')
    assert s == kcsi.Sample("x_total", {"a": 'q"z\\', "b": "n\n"}, 2.5)


def test_each_csi_call_is_one_debug_record_with_its_fields(host, hostpath_driver):
    d = hostpath_driver()
    records = []
    kcsi.set_log_callback(lambda lvl, target, msg: records.append((lvl, target, msg)), 3)
    try:
        host.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
    finally:
        kcsi.set_log_callback(None, 1)
    calls = [m for lvl, _, m in records if lvl == 3 and m.startswith("CSI call ")]
    assert len(calls) == 1, records
    assert f'driver="{d.name}"' in calls[0] and 'method="/csi.v1.Node/NodeGetInfo"' in calls[0]
    assert 'code="OK"' in calls[0] and "duration=" in calls[0]
    assert all(t.startswith("kcsi") for _, t, _ in records), records
