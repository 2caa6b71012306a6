//! `kcsi_host_new` with a fuzzed config JSON (then `kcsi_host_status`, `kcsi_host_free`). A
//! config object gets the fuzz root as `rootDir` when it names one and loses `kubeconfig`
//! (the `kubeconfig` target reads those files; a host with one would start watches and could
//! run an exec plugin the file names).
#![no_main]
use std::ffi::CString;
use std::ptr;

use kcsi_fuzz::ffi::host::{kcsi_host_free, kcsi_host_new, kcsi_host_status};
use kcsi_fuzz::{call, fixture, take_string};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let mut text = data.to_vec();
    if let Ok(serde_json::Value::Object(mut config)) = serde_json::from_slice(data) {
        config.remove("kubeconfig");
        if config.get("rootDir").is_some_and(|r| r.is_string()) {
            config.insert("rootDir".into(), f.root().display().to_string().into());
        }
        text = serde_json::Value::Object(config).to_string().into_bytes();
    }
    text.retain(|b| *b != 0);
    let config = CString::new(text).unwrap();
    let mut host = ptr::null_mut();
    if call("kcsi_host_new", |e| {
        kcsi_host_new(config.as_ptr(), &mut host, e)
    }) == 0
    {
        let mut status = ptr::null_mut();
        call("kcsi_host_status", |e| {
            kcsi_host_status(host, &mut status, e)
        });
        take_string(status, true);
        kcsi_host_free(host);
    }
});
