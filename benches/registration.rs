//! Figures for the C API's hot paths; prints, never asserts.
//! `kcsi_get_volume_name` on a typical PV (target: under 5 µs per call), and a register +
//! deregister round trip against a real driver process (standalone host).

use kcsi_testkit as common;

use std::ffi::CString;
use std::ptr;
use std::time::{Duration, Instant};

use kcsi::ffi;

const PV: &str = r#"{"persistentVolume":{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"pvc-3f1b2c4d-5e6f-4a1b-8c9d-0e1f2a3b4c5d","annotations":{"pv.kubernetes.io/provisioned-by":"hostpath.csi.k8s.io"}},"spec":{"accessModes":["ReadWriteOnce"],"capacity":{"storage":"10Gi"},"claimRef":{"apiVersion":"v1","kind":"PersistentVolumeClaim","name":"data","namespace":"default","uid":"0e1f2a3b-4c5d-4a1b-8c9d-3f1b2c4d5e6f"},"csi":{"driver":"hostpath.csi.k8s.io","fsType":"ext4","volumeAttributes":{"storage.kubernetes.io/csiProvisionerIdentity":"1700000000000-8081-hostpath.csi.k8s.io"},"volumeHandle":"7f0e1d2c-3b4a-5968-7a6b-5c4d3e2f1a0b"},"persistentVolumeReclaimPolicy":"Delete","storageClassName":"csi-hostpath-sc","volumeMode":"Filesystem"}},"readOnly":false}"#;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let root = common::short_tempdir("kcsi-bench");
    let config = CString::new(common::host_config(root.path(), "bench-node")).unwrap();
    let mut h = ptr::null_mut();
    assert_eq!(
        ffi::host::kcsi_host_new(config.as_ptr(), &mut h, ptr::null_mut()),
        ffi::KCSI_OK
    );

    let spec = CString::new(PV).unwrap();
    let rounds = 200_000;
    for _ in 0..10_000 {
        let mut name = ptr::null_mut();
        ffi::queries::kcsi_get_volume_name(h, spec.as_ptr(), &mut name, ptr::null_mut());
        ffi::error::kcsi_string_free(name);
    }
    let start = Instant::now();
    for _ in 0..rounds {
        let mut name = ptr::null_mut();
        let rc = ffi::queries::kcsi_get_volume_name(h, spec.as_ptr(), &mut name, ptr::null_mut());
        assert_eq!(rc, ffi::KCSI_OK);
        ffi::error::kcsi_string_free(name);
    }
    let per_call = start.elapsed() / rounds;
    println!("kcsi_get_volume_name (typical PV, {} bytes): {:.2} µs/call over {rounds} calls (target < 5 µs)", PV.len(), per_call.as_nanos() as f64 / 1000.0);

    let driver = common::DriverProcess::hostpath("bench-node", &[]);
    let name = CString::new(common::DRIVER).unwrap();
    let endpoint = CString::new(driver.endpoint()).unwrap();
    let v1 = CString::new("1.0.0").unwrap();
    let versions = [v1.as_ptr()];
    let mut times = Vec::new();
    for i in 0..520 {
        let start = Instant::now();
        let rc = ffi::registration::kcsi_register_plugin(
            h,
            name.as_ptr(),
            endpoint.as_ptr(),
            versions.as_ptr(),
            1,
            0,
            ptr::null_mut(),
        );
        assert_eq!(rc, ffi::KCSI_OK);
        let rc = ffi::registration::kcsi_deregister_plugin(h, name.as_ptr(), ptr::null_mut());
        assert_eq!(rc, ffi::KCSI_OK);
        if i >= 20 {
            times.push(start.elapsed());
        }
    }
    times.sort();
    println!(
        "register+deregister round trip (standalone, real driver): median {:.3} ms, p99 {:.3} ms over {} rounds",
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
        times.len()
    );
    ffi::host::kcsi_host_free(h);
}
