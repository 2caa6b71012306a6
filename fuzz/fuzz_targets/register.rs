//! Registration with fuzzed name, endpoint and versions (fields: name, endpoint, versions...).
//! `kcsi_validate_plugin` gets the endpoint as is (it has no side effects);
//! `kcsi_register_plugin` gets it below the root, where no socket listens, with a short
//! deadline; then `kcsi_deregister_plugin` and `kcsi_list_drivers`.
#![no_main]
use std::ffi::{c_char, CString};
use std::ptr;

use kcsi_fuzz::ffi::registration::*;
use kcsi_fuzz::{call, fields, fixture, take_string};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let v = fields(data, 8);
    let versions: Vec<*const c_char> = v[2..]
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| s.as_ptr())
        .collect();
    let h = f.host;
    call("kcsi_validate_plugin", |e| {
        kcsi_validate_plugin(
            h,
            v[0].as_ptr(),
            v[1].as_ptr(),
            versions.as_ptr(),
            versions.len(),
            e,
        )
    });
    let endpoint = v[1].to_bytes();
    let endpoint: Option<CString> = match endpoint.strip_prefix(b"unix://") {
        Some(rest) => f
            .under_root(rest)
            .map(|p| CString::new([b"unix://", p.as_bytes()].concat()).unwrap()),
        None => f.under_root(endpoint),
    };
    if let Some(endpoint) = endpoint {
        call("kcsi_register_plugin", |e| {
            kcsi_register_plugin(
                h,
                v[0].as_ptr(),
                endpoint.as_ptr(),
                versions.as_ptr(),
                versions.len(),
                20,
                e,
            )
        });
    }
    call("kcsi_deregister_plugin", |e| {
        kcsi_deregister_plugin(h, v[0].as_ptr(), e)
    });
    let mut list = ptr::null_mut();
    call("kcsi_list_drivers", |e| kcsi_list_drivers(h, &mut list, e));
    take_string(list, true);
    f.clean();
});
