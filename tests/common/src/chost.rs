//! The C API for the disk-safety suite: a host with its attacher as one value, and the calls
//! that suite makes (device mounts, unmount by handle), each returning `Result<_, CErr>`.

use std::path::{Path, PathBuf};
use std::ptr;

use kcsi::ffi::attacher::*;
use kcsi::ffi::block::*;
use kcsi::ffi::device_mounts::*;
use kcsi::ffi::error::*;
use kcsi::ffi::host::{kcsi_host, kcsi_host_free, kcsi_host_new};
use kcsi::ffi::mounter::*;
use kcsi::ffi::registration::kcsi_register_plugin;
use serde_json::Value;

pub use crate::capi::{call, cstr as c, take_string, CErr};

/// A kcsi host and an attacher of it. Frees both when dropped (the root stays).
pub struct CHost {
    pub host: *mut kcsi_host,
    pub attacher: *mut kcsi_attacher,
}

// The C API allows calls on one host from any thread.
unsafe impl Send for CHost {}
unsafe impl Sync for CHost {}

impl CHost {
    pub fn new(config: &Value) -> CHost {
        let text = c(&config.to_string());
        let (mut host, mut attacher) = (ptr::null_mut(), ptr::null_mut());
        call(|e| kcsi_host_new(text.as_ptr(), &mut host, e)).unwrap();
        call(|e| kcsi_attacher_new(host, &mut attacher, e)).unwrap();
        CHost { host, attacher }
    }

    pub fn register(&self, name: &str, endpoint: &str) {
        let (name, endpoint, v) = (c(name), c(endpoint), c("1.0.0"));
        let versions = [v.as_ptr()];
        call(|e| {
            kcsi_register_plugin(
                self.host,
                name.as_ptr(),
                endpoint.as_ptr(),
                versions.as_ptr(),
                1,
                0,
                e,
            )
        })
        .unwrap();
    }

    pub fn set_up(&self, spec: &Value, pod: &Value) -> Result<(), CErr> {
        let (spec, pod) = (c(&spec.to_string()), c(&pod.to_string()));
        let mut m = ptr::null_mut();
        call(|e| kcsi_mounter_new(self.host, spec.as_ptr(), pod.as_ptr(), &mut m, e))?;
        let result = call(|e| kcsi_mounter_set_up(m, ptr::null(), e));
        kcsi_mounter_free(m);
        result
    }

    pub fn tear_down(&self, spec_name: &str, pod_uid: &str) -> Result<(), CErr> {
        let (spec, uid) = (c(spec_name), c(pod_uid));
        let mut u = ptr::null_mut();
        call(|e| kcsi_unmounter_new(self.host, spec.as_ptr(), uid.as_ptr(), &mut u, e))?;
        let result = call(|e| kcsi_unmounter_tear_down(u, e));
        kcsi_unmounter_free(u);
        result
    }

    pub fn mount_device(&self, spec: &Value, path: &Path) -> Result<(), CErr> {
        let (spec, path) = (c(&spec.to_string()), c(&path.display().to_string()));
        call(|e| {
            kcsi_attacher_mount_device(self.attacher, spec.as_ptr(), path.as_ptr(), ptr::null(), e)
        })
    }

    pub fn unmount_device(&self, path: &Path) -> Result<(), CErr> {
        let path = c(&path.display().to_string());
        call(|e| kcsi_attacher_unmount_device(self.attacher, path.as_ptr(), e))
    }

    pub fn unmount_device_by_handle(&self, driver: &str, handle: &str) -> Result<(), CErr> {
        let (driver, handle) = (c(driver), c(handle));
        call(|e| kcsi_unmount_device_by_handle(self.host, driver.as_ptr(), handle.as_ptr(), e))
    }

    pub fn list_device_mounts(&self) -> Result<Value, CErr> {
        let mut out = ptr::null_mut();
        call(|e| kcsi_list_device_mounts(self.host, &mut out, e))?;
        Ok(serde_json::from_str(&take_string(out)).unwrap())
    }

    /// Block: mapper, SetUpDevice and MapPodDevice; returns the publish path.
    pub fn map_block(&self, spec: &Value, pod: &Value) -> Result<PathBuf, CErr> {
        let (spec, pod) = (c(&spec.to_string()), c(&pod.to_string()));
        let mut m = ptr::null_mut();
        call(|e| kcsi_block_mapper_new(self.host, spec.as_ptr(), pod.as_ptr(), &mut m, e))?;
        let mapped = (|| {
            let mut staging = ptr::null_mut();
            call(|e| kcsi_block_mapper_set_up_device(m, &mut staging, e))?;
            if !staging.is_null() {
                kcsi_string_free(staging);
            }
            let mut publish = ptr::null_mut();
            call(|e| kcsi_block_mapper_map_pod_device(m, &mut publish, e))?;
            Ok(PathBuf::from(take_string(publish)))
        })();
        kcsi_block_mapper_free(m);
        mapped
    }

    /// Block: unmapper, UnmapPodDevice and TearDownDevice.
    pub fn unmap_block(&self, spec_name: &str, pod_uid: &str) -> Result<(), CErr> {
        self.with_unmapper(spec_name, pod_uid, |u| {
            call(|e| kcsi_block_unmapper_unmap_pod_device(u, e)).and_then(|()| {
                call(|e| kcsi_block_unmapper_tear_down_device(u, ptr::null(), ptr::null(), e))
            })
        })
    }

    /// Block: unmapper and UnmapPodDevice only (the pod went; the volume stays staged).
    pub fn unmap_pod_block(&self, spec_name: &str, pod_uid: &str) -> Result<(), CErr> {
        self.with_unmapper(spec_name, pod_uid, |u| {
            call(|e| kcsi_block_unmapper_unmap_pod_device(u, e))
        })
    }

    fn with_unmapper(
        &self,
        spec_name: &str,
        pod_uid: &str,
        f: impl FnOnce(*mut kcsi_block_unmapper) -> Result<(), CErr>,
    ) -> Result<(), CErr> {
        let (spec, uid) = (c(spec_name), c(pod_uid));
        let mut u = ptr::null_mut();
        call(|e| kcsi_block_unmapper_new(self.host, spec.as_ptr(), uid.as_ptr(), &mut u, e))?;
        let result = f(u);
        kcsi_block_unmapper_free(u);
        result
    }
}

impl Drop for CHost {
    fn drop(&mut self) {
        kcsi_attacher_free(self.attacher);
        kcsi_host_free(self.host);
    }
}
