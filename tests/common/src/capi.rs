//! kcsi's C API as the tests (and the lifecycle bench) use it: owned handles that free
//! themselves, failures read back into one plain [`CErr`], the Kubernetes objects the calls
//! take, and a [`Fixture`] (a host with a registered driver) that leaves no mount behind.

use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr;

use kcsi::ffi::attacher::*;
use kcsi::ffi::block::*;
use kcsi::ffi::error::*;
use kcsi::ffi::expand::kcsi_node_expand;
use kcsi::ffi::host::*;
use kcsi::ffi::host_metrics::kcsi_host_metrics;
use kcsi::ffi::mounter::*;
use kcsi::ffi::reconstruct::{kcsi_construct_block_volume_spec, kcsi_construct_volume_spec};
use kcsi::ffi::registration::{kcsi_deregister_plugin, kcsi_register_plugin};
use kcsi::ffi::{kcsi_result, KCSI_OK};
use serde_json::{json, Value};

use crate::{merge, short_tempdir, unmount_below, DriverProcess, DRIVER};

/// A failed call, read out of its `kcsi_error`.
#[derive(Debug, Clone, PartialEq)]
pub struct CErr {
    pub result: i32,
    pub class: i32,
    pub grpc: i32,
    pub message: String,
    /// `kcsi_error_upstream_message`.
    pub upstream: String,
}

pub fn cstr(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// Runs one fallible C call, turning its `err_out` into a [`CErr`] (and freeing it).
pub fn call(f: impl FnOnce(*mut *mut kcsi_error) -> kcsi_result) -> Result<(), CErr> {
    let mut err: *mut kcsi_error = ptr::null_mut();
    let rc = f(&mut err);
    check(rc, err)
}

/// A call's result and the error object it wrote (freed here) as a [`CErr`].
pub fn check(rc: kcsi_result, err: *mut kcsi_error) -> Result<(), CErr> {
    if rc == KCSI_OK {
        assert!(err.is_null(), "an error object with KCSI_OK");
        return Ok(());
    }
    assert!(!err.is_null(), "result {rc} without an error object");
    let e = CErr {
        result: kcsi_error_result(err),
        class: kcsi_error_class(err),
        grpc: kcsi_error_grpc_code(err),
        message: unsafe { CStr::from_ptr(kcsi_error_message(err)) }
            .to_str()
            .unwrap()
            .to_string(),
        upstream: unsafe { CStr::from_ptr(kcsi_error_upstream_message(err)) }
            .to_str()
            .unwrap()
            .to_string(),
    };
    kcsi_error_free(err);
    assert_eq!(e.result, rc, "kcsi_error_result matches the return value");
    Err(e)
}

/// Takes an owned string out of an `*_out` parameter.
pub fn take_string(s: *mut c_char) -> String {
    assert!(!s.is_null());
    let out = unsafe { CStr::from_ptr(s) }.to_str().unwrap().to_string();
    kcsi_string_free(s);
    out
}

/// Takes an owned JSON string out of an `*_out` parameter.
pub fn take_json(s: *mut c_char) -> Value {
    serde_json::from_str(&take_string(s)).unwrap()
}

/// A `kcsi_host`. One that owns its root dir unmounts everything below it when dropped.
pub struct Host {
    pub ptr: *mut kcsi_host,
    root: PathBuf,
    owned_root: Option<tempfile::TempDir>,
}

// The C API allows calls on one host from any thread.
unsafe impl Send for Host {}
unsafe impl Sync for Host {}

impl Host {
    /// A standalone host for node `node-1` on a fresh root; `extra` is merged into the config
    /// (e.g. `csiDrivers`, `featureGates`, `timeoutSeconds`).
    pub fn new(extra: Value) -> Host {
        let root = short_tempdir("kcsi-root");
        let config = config(root.path(), extra);
        Self::open(&config, root.path().to_path_buf(), Some(root))
    }

    /// A second host on a root someone else owns (a restarted kubelet on the same disk).
    pub fn on_root(root: &Path, extra: Value) -> Host {
        Self::open(&config(root, extra), root.to_path_buf(), None)
    }

    /// A host with exactly `config`, owning `root` (which the config names as rootDir).
    pub fn owning(root: tempfile::TempDir, config: &Value) -> Host {
        Self::open(config, root.path().to_path_buf(), Some(root))
    }

    /// A host with exactly `config`, on a root someone else owns.
    pub fn from_config(config: &Value) -> Host {
        let root = PathBuf::from(config["rootDir"].as_str().expect("rootDir"));
        Self::open(config, root, None)
    }

    /// A `"role": "controller"` host (no root dir) on `kubeconfig`.
    pub fn controller(kubeconfig: &Path) -> Host {
        let config = json!({"role": "controller", "kubeconfig": kubeconfig});
        Self::open(&config, PathBuf::new(), None)
    }

    fn open(config: &Value, root: PathBuf, owned_root: Option<tempfile::TempDir>) -> Host {
        let mut h = ptr::null_mut();
        let c = cstr(&config.to_string());
        call(|e| kcsi_host_new(c.as_ptr(), &mut h, e)).expect("kcsi_host_new");
        Host {
            ptr: h,
            root,
            owned_root,
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn layout(&self) -> kcsi::Layout {
        kcsi::Layout::new(&self.root)
    }

    /// Frees the host early (as a restarting kubelet would), keeping the root.
    pub fn free(&mut self) {
        kcsi_host_free(std::mem::replace(&mut self.ptr, ptr::null_mut()));
    }

    pub fn status(&self) -> Value {
        let mut out = ptr::null_mut();
        call(|e| kcsi_host_status(self.ptr, &mut out, e)).expect("kcsi_host_status");
        take_json(out)
    }

    /// `kcsi_host_metrics`' Prometheus text.
    pub fn metrics_text(&self) -> String {
        let mut out = ptr::null_mut();
        call(|e| kcsi_host_metrics(self.ptr, &mut out, e)).expect("kcsi_host_metrics");
        take_string(out)
    }

    pub fn register(&self, name: &str, endpoint: &str) {
        let (n, ep, v) = (cstr(name), cstr(endpoint), cstr("1.0.0"));
        let versions = [v.as_ptr()];
        call(|e| {
            kcsi_register_plugin(
                self.ptr,
                n.as_ptr(),
                ep.as_ptr(),
                versions.as_ptr(),
                1,
                0,
                e,
            )
        })
        .expect("kcsi_register_plugin");
    }

    pub fn register_driver(&self, d: &DriverProcess) {
        self.register(&d.name, &d.endpoint());
    }

    pub fn deregister(&self, name: &str) {
        let n = cstr(name);
        call(|e| kcsi_deregister_plugin(self.ptr, n.as_ptr(), e)).expect("kcsi_deregister_plugin");
    }

    pub fn mounter(&self, spec: &Value, pod: &Value) -> Result<Mounter, CErr> {
        let (s, p) = (cstr(&spec.to_string()), cstr(&pod.to_string()));
        let mut m = ptr::null_mut();
        call(|e| kcsi_mounter_new(self.ptr, s.as_ptr(), p.as_ptr(), &mut m, e))?;
        Ok(Mounter(m))
    }

    pub fn unmounter(&self, spec_name: &str, pod_uid: &str) -> Result<Unmounter, CErr> {
        let (s, p) = (cstr(spec_name), cstr(pod_uid));
        let mut u = ptr::null_mut();
        call(|e| kcsi_unmounter_new(self.ptr, s.as_ptr(), p.as_ptr(), &mut u, e))?;
        Ok(Unmounter(u))
    }

    pub fn tear_down(&self, spec_name: &str, pod_uid: &str) -> Result<(), CErr> {
        self.unmounter(spec_name, pod_uid)?.tear_down()
    }

    /// kcsi_construct_volume_spec for the mount dir `mount_path` (volume name `vol`).
    pub fn construct(&self, mount_path: &Path) -> Result<Value, CErr> {
        let (name, path) = (cstr("vol"), cstr(&mount_path.display().to_string()));
        let mut out = ptr::null_mut();
        call(|e| kcsi_construct_volume_spec(self.ptr, name.as_ptr(), path.as_ptr(), &mut out, e))?;
        Ok(take_json(out))
    }

    pub fn attacher(&self) -> Attacher {
        let mut a = ptr::null_mut();
        call(|e| kcsi_attacher_new(self.ptr, &mut a, e)).expect("kcsi_attacher_new");
        Attacher(a)
    }

    pub fn mapper(&self, spec: &Value, pod: &Value) -> Result<Mapper, CErr> {
        let (s, p) = (cstr(&spec.to_string()), cstr(&pod.to_string()));
        let mut m = ptr::null_mut();
        call(|e| kcsi_block_mapper_new(self.ptr, s.as_ptr(), p.as_ptr(), &mut m, e))?;
        Ok(Mapper(m))
    }

    pub fn unmapper(&self, spec_name: &str, pod_uid: &str) -> Result<Unmapper, CErr> {
        let (s, p) = (cstr(spec_name), cstr(pod_uid));
        let mut u = ptr::null_mut();
        call(|e| kcsi_block_unmapper_new(self.ptr, s.as_ptr(), p.as_ptr(), &mut u, e))?;
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
        call(|e| {
            kcsi_construct_block_volume_spec(
                self.ptr,
                p.as_ptr(),
                s.as_ptr(),
                m.as_ptr(),
                &mut out,
                e,
            )
        })?;
        Ok(take_json(out))
    }

    pub fn expand(&self, options: &Value) -> Result<bool, CErr> {
        let o = cstr(&options.to_string());
        let mut resized = false;
        call(|e| kcsi_node_expand(self.ptr, o.as_ptr(), &mut resized, e))?;
        Ok(resized)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if self.owned_root.is_some() {
            unmount_below(&self.root);
        }
        kcsi_host_free(self.ptr);
    }
}

/// The standalone config for node `node-1` at `root`, with `extra` merged in.
pub fn config(root: &Path, extra: Value) -> Value {
    let mut c = json!({"nodeName": "node-1", "rootDir": root});
    merge(&mut c, extra);
    c
}

/// A CSIDriver object for [`DRIVER`] in a host config's `csiDrivers`.
pub fn csi_driver(spec: Value) -> Value {
    json!({"metadata": {"name": DRIVER}, "spec": spec})
}

/// Standalone hosts have no VolumeAttachments: a CSIDriver that needs no attach, with
/// `extra` merged into its spec.
pub fn no_attach(extra: Value) -> Value {
    let mut spec = json!({"attachRequired": false});
    merge(&mut spec, extra);
    json!({"csiDrivers": [csi_driver(spec)]})
}

pub struct Mounter(pub *mut kcsi_mounter);

// The C API allows calls on one handle from any thread.
unsafe impl Send for Mounter {}
unsafe impl Sync for Mounter {}

impl Mounter {
    pub fn path(&self) -> PathBuf {
        let mut out = ptr::null_mut();
        call(|e| kcsi_mounter_path(self.0, &mut out, e)).expect("kcsi_mounter_path");
        PathBuf::from(take_string(out))
    }

    pub fn set_up(&self, args: Option<Value>) -> Result<(), CErr> {
        let args = args.map(|a| cstr(&a.to_string()));
        call(|e| kcsi_mounter_set_up(self.0, args.as_ref().map_or(ptr::null(), |a| a.as_ptr()), e))
    }

    pub fn metrics(&self) -> Result<Value, CErr> {
        let mut out = ptr::null_mut();
        call(|e| kcsi_mounter_metrics(self.0, &mut out, e))?;
        Ok(take_json(out))
    }
}

impl Drop for Mounter {
    fn drop(&mut self) {
        kcsi_mounter_free(self.0);
    }
}

pub struct Unmounter(pub *mut kcsi_unmounter);

impl Unmounter {
    pub fn tear_down(&self) -> Result<(), CErr> {
        call(|e| kcsi_unmounter_tear_down(self.0, e))
    }
}

impl Drop for Unmounter {
    fn drop(&mut self) {
        kcsi_unmounter_free(self.0);
    }
}

#[derive(Debug)]
pub struct Attacher(pub *mut kcsi_attacher);

unsafe impl Send for Attacher {}

impl Attacher {
    pub fn wait_for_attach(&self, spec: &Value, timeout_ms: i64) -> Result<String, CErr> {
        let s = cstr(&spec.to_string());
        let mut out = ptr::null_mut();
        call(|e| kcsi_attacher_wait_for_attach(self.0, s.as_ptr(), timeout_ms, &mut out, e))?;
        Ok(take_string(out))
    }

    pub fn device_mount_path(&self, spec: &Value) -> Result<String, CErr> {
        let s = cstr(&spec.to_string());
        let mut out = ptr::null_mut();
        call(|e| kcsi_attacher_device_mount_path(self.0, s.as_ptr(), &mut out, e))?;
        Ok(take_string(out))
    }

    pub fn mount_device(&self, spec: &Value, path: &str, args: Option<&Value>) -> Result<(), CErr> {
        let (s, p) = (cstr(&spec.to_string()), cstr(path));
        let a = args.map(|a| cstr(&a.to_string()));
        call(|e| {
            kcsi_attacher_mount_device(
                self.0,
                s.as_ptr(),
                p.as_ptr(),
                a.as_ref().map_or(ptr::null(), |a| a.as_ptr()),
                e,
            )
        })
    }

    pub fn unmount_device(&self, path: &str) -> Result<(), CErr> {
        let p = cstr(path);
        call(|e| kcsi_attacher_unmount_device(self.0, p.as_ptr(), e))
    }

    /// Controller hosts: Attach of `spec` to `node`; the VolumeAttachment's name.
    pub fn attach(&self, spec: &Value, node: &str, timeout_ms: i64) -> Result<String, CErr> {
        let (s, n) = (cstr(&spec.to_string()), cstr(node));
        let mut out = ptr::null_mut();
        call(|e| kcsi_attacher_attach(self.0, s.as_ptr(), n.as_ptr(), timeout_ms, &mut out, e))?;
        Ok(take_string(out))
    }

    /// Controller hosts: Detach of `driver^handle` from `node`.
    pub fn detach(&self, volume_name: &str, node: &str, timeout_ms: i64) -> Result<(), CErr> {
        let (v, n) = (cstr(volume_name), cstr(node));
        call(|e| kcsi_attacher_detach(self.0, v.as_ptr(), n.as_ptr(), timeout_ms, e))
    }

    /// Controller hosts: VolumesAreAttached of the specs (a JSON array) on `node`.
    pub fn volumes_are_attached(&self, specs: &Value, node: &str) -> Result<Value, CErr> {
        let (s, n) = (cstr(&specs.to_string()), cstr(node));
        let mut out = ptr::null_mut();
        call(|e| kcsi_attacher_volumes_are_attached(self.0, s.as_ptr(), n.as_ptr(), &mut out, e))?;
        Ok(take_json(out))
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
        call(|e| kcsi_block_mapper_paths(self.0, &mut out, e)).expect("kcsi_block_mapper_paths");
        take_json(out)
    }

    pub fn set_up_device(&self) -> Result<String, CErr> {
        let mut out = ptr::null_mut();
        call(|e| kcsi_block_mapper_set_up_device(self.0, &mut out, e))?;
        Ok(take_string(out))
    }

    pub fn map_pod_device(&self) -> Result<String, CErr> {
        let mut out = ptr::null_mut();
        call(|e| kcsi_block_mapper_map_pod_device(self.0, &mut out, e))?;
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
        call(|e| kcsi_block_unmapper_unmap_pod_device(self.0, e))
    }

    pub fn tear_down_device(&self, global_map_path: &str) -> Result<(), CErr> {
        let g = cstr(global_map_path);
        call(|e| kcsi_block_unmapper_tear_down_device(self.0, g.as_ptr(), ptr::null(), e))
    }
}

impl Drop for Unmapper {
    fn drop(&mut self) {
        kcsi_block_unmapper_free(self.0);
    }
}

/// A PersistentVolume spec for [`DRIVER`]; `extra_csi` and `extra_spec` are merged into its
/// `csi` source and its `spec`.
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

/// A pod in namespace `test-ns` with service account `test-sa`.
pub fn pod(name: &str, uid: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "test-ns", "uid": uid}, "spec": {"serviceAccountName": "test-sa", "containers": []}})
}

/// A standalone host with a driver registered. Dropping it unmounts everything below the
/// host's root, then stops the driver (which removes its own mounts and loop devices).
pub struct Fixture {
    pub host: Host,
    pub driver: DriverProcess,
}

impl Fixture {
    /// The real hostpath driver; `extra` is merged into the host config.
    pub fn new(extra: Value) -> Fixture {
        Self::with(DriverProcess::hostpath("node-1", &[]), extra)
    }

    /// The fault driver with `flags` (only for tests that inject a fault).
    pub fn faulty(flags: &[&str], extra: Value) -> Fixture {
        Self::with(DriverProcess::faulty("node-1", flags), extra)
    }

    pub fn with(driver: DriverProcess, extra: Value) -> Fixture {
        let host = Host::new(extra);
        host.register_driver(&driver);
        Fixture { host, driver }
    }

    pub fn root(&self) -> &Path {
        self.host.root()
    }
}
