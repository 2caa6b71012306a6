//! `kcsi_node_expand` with fuzzed options JSON. Paths in an options object are put below the
//! root (none exists: no driver is registered).
#![no_main]
use std::ffi::CString;

use kcsi_fuzz::ffi::expand::kcsi_node_expand;
use kcsi_fuzz::{call, fixture};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let mut text = data.to_vec();
    if let Ok(serde_json::Value::Object(mut options)) = serde_json::from_slice(data) {
        for key in ["devicePath", "deviceMountPath", "deviceStagePath"] {
            if let Some(serde_json::Value::String(p)) = options.get(key) {
                let path = f
                    .under_root(p.as_bytes())
                    .map(|c| c.into_string().unwrap())
                    .unwrap_or_default();
                options.insert(key.into(), path.into());
            }
        }
        text = serde_json::Value::Object(options).to_string().into_bytes();
    }
    text.retain(|b| *b != 0);
    let options = CString::new(text).unwrap();
    let mut resized = false;
    call("kcsi_node_expand", |e| {
        kcsi_node_expand(f.host, options.as_ptr(), &mut resized, e)
    });
});
