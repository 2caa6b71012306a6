//! `kcsi_construct_volume_spec` with a fuzzed volume name and a mount path below the root
//! (fields: volume name, mount path relative to the root, vol_data.json content planted at
//! that path when the path is usable).
#![no_main]
use std::path::Path;
use std::ptr;

use kcsi_fuzz::ffi::reconstruct::kcsi_construct_volume_spec;
use kcsi_fuzz::{call, fields, fixture, take_string};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let v = fields(data, 3);
    let Some(path) = f.under_root(v[1].to_bytes()) else {
        return;
    };
    let dir = Path::new(path.to_str().unwrap());
    if !v[2].is_empty() && std::fs::create_dir_all(dir).is_ok() {
        let _ = std::fs::write(dir.join("vol_data.json"), v[2].to_bytes());
    }
    let mut out = ptr::null_mut();
    call("kcsi_construct_volume_spec", |e| {
        kcsi_construct_volume_spec(f.host, v[0].as_ptr(), path.as_ptr(), &mut out, e)
    });
    take_string(out, true);
    f.clean();
});
