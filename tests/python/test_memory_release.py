"""What kcsi's calls leave mapped in the host process is given back once they are done: the
kernel's own account of libkcsi.so's code mapping (/proc/self/smaps), not kcsi's."""
import os
import time

from conftest import HOSTPATH_DRIVER, csi_driver, inline_spec, pod, wait_for


def code_pages_kib():
    """Resident KiB of libkcsi.so's code (its executable mapping)."""
    total, ours = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:
                ours = fields[-1] == os.path.realpath(os.environ["KCSI_LIB"]) and fields[1] == "r-xp"
            elif ours and fields[0] == "Rss:":
                total += int(fields[1])
    return total


def test_library_pages_a_lifecycle_ran_are_unmapped_after_it_and_map_back_on_the_next_call(
        needs_root, make_host, hostpath_driver):
    h = make_host(node="node-1", csiDrivers=[csi_driver(
        HOSTPATH_DRIVER, attachRequired=False, podInfoOnMount=True,
        volumeLifecycleModes=["Ephemeral"])])  # podInfoOnMount: kubelet then sends csi.storage.k8s.io/ephemeral=true
    d = hostpath_driver(node_id="node-1")
    h.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
    p = pod(uid="0b0e2c7e-7a3d-4d4e-9f1a-0000000000bb")
    # A release an earlier call scheduled (10 s after it) must not fall between set-up and the
    # first reading: wait it out.
    time.sleep(11)
    with h.mounter(inline_spec(HOSTPATH_DRIVER, name="released"), p) as m:
        m.set_up()
        after_calls = code_pages_kib()
        assert after_calls >= 1024, f"a lifecycle mapped only {after_calls} KiB of libkcsi.so's code"
        # What runs after the release (the release's own return, the runtime parking) maps a
        # little back at once: a quarter of the lifecycle's code is given back at least.
        low = after_calls * 3 // 4
        wait_for("libkcsi.so's code pages given back", 30, lambda: code_pages_kib() <= low)
        released = code_pages_kib()
        m.metrics()  # runs again from pages mapped back
    with h.unmounter("released", p["metadata"]["uid"]) as u:
        u.tear_down()
    assert code_pages_kib() > released
