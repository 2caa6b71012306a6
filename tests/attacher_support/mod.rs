//! C API helpers for the attacher, block and expansion tests (and the lifecycle bench): owned
//! handles that free themselves, errors read back into plain values, CSI volumes created on
//! the stand-in driver, and a fixture that leaves no mount or loop device behind.
#![allow(dead_code)]

use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr;

use kcsi::csi::proto::csi;
use kcsi::ffi::attacher::*;
use kcsi::ffi::block::*;
use kcsi::ffi::error::*;
use kcsi::ffi::expand::kcsi_node_expand;
use kcsi::ffi::host::*;
use kcsi::ffi::reconstruct::kcsi_construct_block_volume_spec;
use kcsi::ffi::registration::kcsi_register_plugin;
use serde_json::{json, Value};

use super::common::{short_tempdir, unmount_below, DriverProcess, DRIVER};

/// A failed call, read out of its `kcsi_error`.
#[derive(Debug, Clone, PartialEq)]
pub struct CErr {
    pub result: i32,
    pub class: i32,
    pub grpc: i32,
    pub message: String,
}

pub fn cstr(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// Turns a result code and its error object into a Result, freeing the error.
pub fn check(rc: i32, err: *mut kcsi_error) -> Result<(), CErr> {
    if rc == 0 {
        assert!(err.is_null());
        return Ok(());
    }
    assert!(!err.is_null(), "rc {rc} without an error object");
    let e = CErr {
        result: kcsi_error_result(err),
        class: kcsi_error_class(err),
        grpc: kcsi_error_grpc_code(err),
        message: unsafe { CStr::from_ptr(kcsi_error_message(err)) }
            .to_str()
            .unwrap()
            .to_string(),
    };
    assert_eq!(e.result, rc);
    kcsi_error_free(err);
    Err(e)
}

/// Takes an owned string out of an `*_out` parameter.
pub fn take_string(s: *mut c_char) -> String {
    assert!(!s.is_null());
    let out = unsafe { CStr::from_ptr(s) }.to_str().unwrap().to_string();
    kcsi::ffi::error::kcsi_string_free(s);
    out
}

pub struct CHost(pub *mut kcsi_host);

unsafe impl Send for CHost {}
unsafe impl Sync for CHost {}

impl CHost {
    pub fn new(config: &Value) -> CHost {
        let mut h = ptr::null_mut();
        let mut err = ptr::null_mut();
        let c = cstr(&config.to_string());
        check(kcsi_host_new(c.as_ptr(), &mut h, &mut err), err).expect("kcsi_host_new");
        CHost(h)
    }

    pub fn register(&self, name: &str, endpoint: &str) {
        let (n, e, v) = (cstr(name), cstr(endpoint), cstr("1.0.0"));
        let versions = [v.as_ptr()];
        let mut err = ptr::null_mut();
        check(
            kcsi_register_plugin(
                self.0,
                n.as_ptr(),
                e.as_ptr(),
                versions.as_ptr(),
                1,
                0,
                &mut err,
            ),
            err,
        )
        .expect("kcsi_register_plugin");
    }

    pub fn attacher(&self) -> Attacher {
        let mut a = ptr::null_mut();
        let mut err = ptr::null_mut();
        check(kcsi_attacher_new(self.0, &mut a, &mut err), err).expect("kcsi_attacher_new");
        Attacher(a)
    }

    pub fn mapper(&self, spec: &Value, pod: &Value) -> Result<Mapper, CErr> {
        let (s, p) = (cstr(&spec.to_string()), cstr(&pod.to_string()));
        let mut m = ptr::null_mut();
        let mut err = ptr::null_mut();
        check(
            kcsi_block_mapper_new(self.0, s.as_ptr(), p.as_ptr(), &mut m, &mut err),
            err,
        )?;
        Ok(Mapper(m))
    }

    pub fn unmapper(&self, spec_name: &str, pod_uid: &str) -> Result<Unmapper, CErr> {
        let (s, p) = (cstr(spec_name), cstr(pod_uid));
        let mut u = ptr::null_mut();
        let mut err = ptr::null_mut();
        check(
            kcsi_block_unmapper_new(self.0, s.as_ptr(), p.as_ptr(), &mut u, &mut err),
            err,
        )?;
        Ok(Unmapper(u))
    }

    pub fn construct_block_spec(
        &self,
        pod_uid: &str,
        spec_name: &str,
        map_path: &str,
    ) -> Result<Value, CErr> {
        let (p, s, m) = (cstr(pod_uid), cstr(spec_name), cstr(map_path));
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        let rc = kcsi_construct_block_volume_spec(
            self.0,
            p.as_ptr(),
            s.as_ptr(),
            m.as_ptr(),
            &mut out,
            &mut err,
        );
        check(rc, err)?;
        Ok(serde_json::from_str(&take_string(out)).unwrap())
    }

    pub fn expand(&self, options: &Value) -> Result<bool, CErr> {
        let o = cstr(&options.to_string());
        let mut resized = false;
        let mut err = ptr::null_mut();
        check(
            kcsi_node_expand(self.0, o.as_ptr(), &mut resized, &mut err),
            err,
        )?;
        Ok(resized)
    }
}

impl Drop for CHost {
    fn drop(&mut self) {
        kcsi_host_free(self.0);
    }
}

#[derive(Debug)]
pub struct Attacher(pub *mut kcsi_attacher);

unsafe impl Send for Attacher {}

impl Attacher {
    pub fn wait_for_attach(&self, spec: &Value, timeout_ms: i64) -> Result<String, CErr> {
        let s = cstr(&spec.to_string());
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        check(
            kcsi_attacher_wait_for_attach(self.0, s.as_ptr(), timeout_ms, &mut out, &mut err),
            err,
        )?;
        Ok(take_string(out))
    }

    pub fn device_mount_path(&self, spec: &Value) -> Result<String, CErr> {
        let s = cstr(&spec.to_string());
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        check(
            kcsi_attacher_device_mount_path(self.0, s.as_ptr(), &mut out, &mut err),
            err,
        )?;
        Ok(take_string(out))
    }

    pub fn mount_device(&self, spec: &Value, path: &str, args: Option<&Value>) -> Result<(), CErr> {
        let (s, p) = (cstr(&spec.to_string()), cstr(path));
        let a = args.map(|a| cstr(&a.to_string()));
        let mut err = ptr::null_mut();
        let rc = kcsi_attacher_mount_device(
            self.0,
            s.as_ptr(),
            p.as_ptr(),
            a.as_ref().map_or(ptr::null(), |a| a.as_ptr()),
            &mut err,
        );
        check(rc, err)
    }

    pub fn unmount_device(&self, path: &str) -> Result<(), CErr> {
        let p = cstr(path);
        let mut err = ptr::null_mut();
        check(
            kcsi_attacher_unmount_device(self.0, p.as_ptr(), &mut err),
            err,
        )
    }
}

impl Drop for Attacher {
    fn drop(&mut self) {
        kcsi_attacher_free(self.0);
    }
}

#[derive(Debug)]
pub struct Mapper(pub *mut kcsi_block_mapper);

unsafe impl Send for Mapper {}

impl Mapper {
    pub fn paths(&self) -> Value {
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        check(kcsi_block_mapper_paths(self.0, &mut out, &mut err), err)
            .expect("kcsi_block_mapper_paths");
        serde_json::from_str(&take_string(out)).unwrap()
    }

    pub fn set_up_device(&self) -> Result<String, CErr> {
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        check(
            kcsi_block_mapper_set_up_device(self.0, &mut out, &mut err),
            err,
        )?;
        Ok(take_string(out))
    }

    pub fn map_pod_device(&self) -> Result<String, CErr> {
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        check(
            kcsi_block_mapper_map_pod_device(self.0, &mut out, &mut err),
            err,
        )?;
        Ok(take_string(out))
    }
}

impl Drop for Mapper {
    fn drop(&mut self) {
        kcsi_block_mapper_free(self.0);
    }
}

#[derive(Debug)]
pub struct Unmapper(pub *mut kcsi_block_unmapper);

unsafe impl Send for Unmapper {}

impl Unmapper {
    pub fn unmap_pod_device(&self) -> Result<(), CErr> {
        let mut err = ptr::null_mut();
        check(kcsi_block_unmapper_unmap_pod_device(self.0, &mut err), err)
    }

    pub fn tear_down_device(&self, global_map_path: &str) -> Result<(), CErr> {
        let g = cstr(global_map_path);
        let mut err = ptr::null_mut();
        check(
            kcsi_block_unmapper_tear_down_device(self.0, g.as_ptr(), ptr::null(), &mut err),
            err,
        )
    }
}

impl Drop for Unmapper {
    fn drop(&mut self) {
        kcsi_block_unmapper_free(self.0);
    }
}

/// A PersistentVolume spec for the C API.
pub fn pv_spec(
    name: &str,
    handle: &str,
    block: bool,
    extra_csi: Value,
    extra_spec: Value,
) -> Value {
    let mut csi = json!({"driver": DRIVER, "volumeHandle": handle});
    merge(&mut csi, extra_csi);
    let mut spec = json!({"accessModes": ["ReadWriteOnce"], "csi": csi});
    if block {
        spec["volumeMode"] = json!("Block");
    }
    merge(&mut spec, extra_spec);
    json!({"persistentVolume": {"metadata": {"name": name}, "spec": spec}, "readOnly": false})
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

pub fn pod(name: &str, uid: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "test-ns", "uid": uid}, "spec": {"serviceAccountName": "test-sa", "containers": []}})
}

/// CreateVolume on the driver's controller service; returns the volume id.
pub fn create_volume(driver: &DriverProcess, name: &str, block: bool, size: i64) -> String {
    use csi::volume_capability::{
        access_mode::Mode, AccessMode, AccessType, BlockVolume, MountVolume,
    };
    let access_type = if block {
        AccessType::Block(BlockVolume {})
    } else {
        AccessType::Mount(MountVolume::default())
    };
    let req = csi::CreateVolumeRequest {
        name: name.to_string(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: size,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![csi::VolumeCapability {
            access_type: Some(access_type),
            access_mode: Some(AccessMode {
                mode: Mode::SingleNodeWriter as i32,
            }),
        }],
        ..Default::default()
    };
    let socket = driver.socket.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let channel = tonic::transport::Endpoint::from_static("http://localhost")
            .connect_with_connector(tower::service_fn(move |_| {
                let socket = socket.clone();
                async move {
                    tokio::net::UnixStream::connect(socket)
                        .await
                        .map(hyper_util::rt::TokioIo::new)
                }
            }))
            .await
            .expect("connect to driver");
        let mut client = csi::controller_client::ControllerClient::new(channel);
        client
            .create_volume(req)
            .await
            .expect("CreateVolume")
            .into_inner()
            .volume
            .unwrap()
            .volume_id
    })
}

/// The RPCs the stand-in logged for `method` (short name), oldest first.
pub fn rpcs(driver: &DriverProcess, method: &str) -> Vec<Value> {
    let suffix = format!("/{method}");
    driver
        .log()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["method"].as_str().is_some_and(|m| m.ends_with(&suffix)))
        .collect()
}

/// Loop devices backed by `file` (`losetup -j`).
pub fn loop_devices(file: &Path) -> Vec<String> {
    let out = Command::new("losetup")
        .arg("-j")
        .arg(file)
        .output()
        .expect("losetup -j");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(':').next().map(str::to_string))
        .filter(|s| !s.is_empty())
        .collect()
}

/// Waits until no loop device is backed by `file`: `losetup -d` of a device something still
/// has open (udev probing it, say) only marks it for auto-clear, so detaching may finish late.
pub fn wait_loop_detached(file: &Path) {
    super::common::wait_for(
        "loop device detach",
        std::time::Duration::from_secs(10),
        || loop_devices(file).is_empty(),
    );
}

/// Mount points at or below `dir`.
pub fn mounts_below(dir: &Path) -> Vec<String> {
    let prefix = dir.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|t| t == &prefix || t.starts_with(&format!("{prefix}/")))
        .collect()
}

/// A host rooted in a temp dir with the stand-in driver registered. Dropping it unmounts
/// everything below the root and detaches the driver's loop devices, even after a failure.
pub struct Fixture {
    pub host: CHost,
    pub root: tempfile::TempDir,
    pub driver: DriverProcess,
}

impl Fixture {
    /// `config` is merged into `{"nodeName", "rootDir"}`; `flags` go to the stand-in.
    pub fn new(flags: &[&str], config: Value) -> Fixture {
        let driver = DriverProcess::hostpath("node-1", flags);
        let root = short_tempdir("kcsi-root");
        let host = CHost::new(&Self::config(root.path(), config));
        host.register(DRIVER, &driver.endpoint());
        Fixture { host, root, driver }
    }

    pub fn config(root: &Path, extra: Value) -> Value {
        let mut c = json!({"nodeName": "node-1", "rootDir": root});
        merge(&mut c, extra);
        c
    }

    /// Standalone config with a CSIDriver that needs no attach.
    pub fn no_attach() -> Value {
        json!({"csiDrivers": [{"metadata": {"name": DRIVER}, "spec": {"attachRequired": false}}]})
    }

    pub fn backing_file(&self, volume_id: &str) -> PathBuf {
        self.driver.dir.path().join("state").join(volume_id)
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        unmount_below(self.root.path());
        unmount_below(self.driver.dir.path());
        if let Ok(entries) = std::fs::read_dir(self.driver.dir.path().join("state")) {
            for e in entries.flatten() {
                for dev in loop_devices(&e.path()) {
                    let _ = Command::new("losetup").arg("-d").arg(dev).status();
                }
            }
        }
    }
}
