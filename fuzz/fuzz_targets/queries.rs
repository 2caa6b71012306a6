//! The plugin queries with a fuzzed spec JSON: `kcsi_get_volume_name`, `kcsi_can_support`,
//! `kcsi_can_attach`, `kcsi_can_device_mount`, `kcsi_requires_remount`.
#![no_main]
use std::ptr;

use kcsi_fuzz::ffi::queries::*;
use kcsi_fuzz::{call, fields, fixture, take_string};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let spec = &fields(data, 1)[0];
    let h = f.host;
    let mut name = ptr::null_mut();
    call("kcsi_get_volume_name", |e| {
        kcsi_get_volume_name(h, spec.as_ptr(), &mut name, e)
    });
    take_string(name, false);
    let mut out = false;
    call("kcsi_can_support", |e| {
        kcsi_can_support(h, spec.as_ptr(), &mut out, e)
    });
    call("kcsi_can_attach", |e| {
        kcsi_can_attach(h, spec.as_ptr(), &mut out, e)
    });
    call("kcsi_can_device_mount", |e| {
        kcsi_can_device_mount(h, spec.as_ptr(), &mut out, e)
    });
    call("kcsi_requires_remount", |e| {
        kcsi_requires_remount(h, spec.as_ptr(), &mut out, e)
    });
});
