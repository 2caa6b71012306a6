//! The attacher with fuzzed input: fields spec JSON, mount-device args JSON, device mount path
//! below the root. `kcsi_attacher_wait_for_attach` (standalone: no VolumeAttachment to read),
//! `_device_mount_path`, `_mount_device` and `_unmount_device`, at the path kcsi computed and
//! at the fuzzed one.
#![no_main]
use std::ffi::CStr;
use std::ptr;

use kcsi_fuzz::ffi::attacher::*;
use kcsi_fuzz::{call, fields, fixture, opt, take_string};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let v = fields(data, 3);
    let mut a = ptr::null_mut();
    assert_eq!(
        call("kcsi_attacher_new", |e| kcsi_attacher_new(
            f.host, &mut a, e
        )),
        0
    );
    let mut dev = ptr::null_mut();
    call("kcsi_attacher_wait_for_attach", |e| {
        kcsi_attacher_wait_for_attach(a, v[0].as_ptr(), 1, &mut dev, e)
    });
    take_string(dev, false);
    let mut dmp = ptr::null_mut();
    if call("kcsi_attacher_device_mount_path", |e| {
        kcsi_attacher_device_mount_path(a, v[0].as_ptr(), &mut dmp, e)
    }) == 0
    {
        let path = unsafe { CStr::from_ptr(dmp) }.to_owned();
        assert!(
            path.to_str()
                .unwrap()
                .starts_with(&f.root().display().to_string()),
            "{path:?}"
        );
        call("kcsi_attacher_mount_device", |e| {
            kcsi_attacher_mount_device(a, v[0].as_ptr(), path.as_ptr(), opt(&v[1]), e)
        });
        call("kcsi_attacher_unmount_device", |e| {
            kcsi_attacher_unmount_device(a, path.as_ptr(), e)
        });
    }
    take_string(dmp, false);
    if let Some(path) = f.under_root(v[2].to_bytes()) {
        call("kcsi_attacher_mount_device", |e| {
            kcsi_attacher_mount_device(a, v[0].as_ptr(), path.as_ptr(), opt(&v[1]), e)
        });
        call("kcsi_attacher_unmount_device", |e| {
            kcsi_attacher_unmount_device(a, path.as_ptr(), e)
        });
    }
    kcsi_attacher_free(a);
    f.clean();
});
