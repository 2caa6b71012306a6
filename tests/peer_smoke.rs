//! Peer smoke check, not a kcsi test: csi-sanity (csi-test v5) runs its Node suite against the
//! real csi-driver-host-path the other suites use, so a broken peer build or a host without what
//! the driver needs (findmnt, mount, loop devices) fails here first, by name, not as a kcsi
//! failure. Not part of `cargo test` by default (`test = false` in Cargo.toml): scripts/test.sh
//! runs it as its own `peers` step before the kcsi suites (`cargo test --test peer_smoke`).

use kcsi_testkit as common;

use std::process::Command;

use common::{mounts_below, peer_binary, DriverProcess};

#[test]
fn hostpath_driver_passes_csi_sanity_node_suite() {
    let driver = DriverProcess::hostpath("sanity-node", &[]);
    let dir = driver.dir.path();
    let out = Command::new(peer_binary("sanity"))
        .arg(format!("--csi.endpoint={}", driver.endpoint()))
        .arg(format!("--csi.mountdir={}", dir.join("mnt").display()))
        .arg(format!("--csi.stagingdir={}", dir.join("stg").display()))
        .args(["--ginkgo.focus=Node Service", "--ginkgo.no-color"])
        .output()
        .expect("run csi-sanity");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "csi-sanity failed:\n{report}\n{}\ndriver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        driver.log()
    );
    assert!(report.contains("SUCCESS!"), "{report}");
    assert!(mounts_below(dir).is_empty(), "csi-sanity cleaned up");
}
