//! What every fuzz target shares: one standalone host on a private temp root, inputs split into
//! C strings, and the checks a result must pass.
//!
//! An input is a list of fields separated by NUL bytes (a C string cannot hold one), so corpus
//! seeds are readable text. Any path handed to kcsi that could make it create, write or remove
//! something is put under the temp root first (and refused when it has a `..` component);
//! nothing outside that root is written. Logging goes to a callback that drops the records.
#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::OnceLock;

use kcsi::ffi::error::{kcsi_error, kcsi_error_free, kcsi_error_message, kcsi_error_result};
use kcsi::ffi::host::{kcsi_host, kcsi_host_new};
use kcsi::ffi::log::kcsi_set_log_callback;
use kcsi::ffi::{KCSI_ERR_INTERNAL, KCSI_OK};

pub use kcsi::ffi;

/// CSIDriver objects the host knows, so queries and set-ups get past the driver lookup.
pub const ATTACH_DRIVER: &str = "attach.fuzz.example.com";
pub const NO_ATTACH_DRIVER: &str = "noattach.fuzz.example.com";

pub struct Fixture {
    pub root: PathBuf,
    pub host: *mut kcsi_host,
}

// The C API allows calls on one host from any thread.
unsafe impl Sync for Fixture {}
unsafe impl Send for Fixture {}

static FIXTURE: OnceLock<Fixture> = OnceLock::new();

extern "C" fn remove_root_at_exit() {
    if let Some(f) = FIXTURE.get() {
        let _ = std::fs::remove_dir_all(&f.root);
    }
}

unsafe extern "C" fn drop_log(_: *mut c_void, _: i32, _: *const c_char, _: *const c_char) {}

/// The shared host (created on first use) on a fresh temp root removed at exit.
pub fn fixture() -> &'static Fixture {
    FIXTURE.get_or_init(|| {
        let mut err = ptr::null_mut();
        assert_eq!(
            kcsi_set_log_callback(Some(drop_log), ptr::null_mut(), 0, &mut err),
            KCSI_OK
        );
        let root = std::env::temp_dir().join(format!("kcsi-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&root).expect("create the fuzz root");
        unsafe { libc::atexit(remove_root_at_exit) };
        let config = serde_json::json!({
            "nodeName": "fuzz-node",
            "rootDir": root,
            "timeoutSeconds": 1,
            "csiDrivers": [
                {"metadata": {"name": ATTACH_DRIVER}, "spec": {"attachRequired": true}},
                {"metadata": {"name": NO_ATTACH_DRIVER}, "spec": {
                    "attachRequired": false, "podInfoOnMount": true, "requiresRepublish": true,
                    "seLinuxMount": true, "fsGroupPolicy": "File",
                    "volumeLifecycleModes": ["Persistent", "Ephemeral"]}}
            ]
        });
        let text = CString::new(config.to_string()).unwrap();
        let mut host = ptr::null_mut();
        assert_eq!(kcsi_host_new(text.as_ptr(), &mut host, &mut err), KCSI_OK);
        Fixture { root, host }
    })
}

impl Fixture {
    /// Removes everything kcsi created under the root, so a long run does not fill the disk.
    pub fn clean(&self) {
        if let Ok(entries) = std::fs::read_dir(&self.root) {
            for e in entries.flatten() {
                let _ =
                    std::fs::remove_dir_all(e.path()).or_else(|_| std::fs::remove_file(e.path()));
            }
        }
    }

    /// `<root>/<rel>`, or `None` when `rel` could climb out of the root.
    pub fn under_root(&self, rel: &[u8]) -> Option<CString> {
        let rel = std::str::from_utf8(rel).ok()?;
        if rel.split('/').any(|c| c == "..") {
            return None;
        }
        CString::new(format!(
            "{}/{}",
            self.root.display(),
            rel.trim_start_matches('/')
        ))
        .ok()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// The input's first `n` NUL-separated fields (missing ones empty; more are ignored).
pub fn fields(data: &[u8], n: usize) -> Vec<CString> {
    let mut parts: Vec<CString> = data
        .split(|b| *b == 0)
        .take(n)
        .map(|p| CString::new(p).expect("split at NUL"))
        .collect();
    parts.resize_with(n, CString::default);
    parts
}

/// A field as an optional argument: empty means NULL.
pub fn opt(field: &CStr) -> *const c_char {
    if field.is_empty() {
        ptr::null()
    } else {
        field.as_ptr()
    }
}

/// Runs a fallible export and checks the contract of its result: an error object exactly on
/// failure, carrying the same code and a UTF-8 message; never `KCSI_ERR_INTERNAL` (a kcsi bug
/// or a caught panic). Returns the result code.
pub fn call(what: &str, f: impl FnOnce(*mut *mut kcsi_error) -> i32) -> i32 {
    let mut err: *mut kcsi_error = ptr::null_mut();
    let code = f(&mut err);
    if code == KCSI_OK {
        assert!(err.is_null(), "{what}: error object on success");
        return code;
    }
    assert!(
        !err.is_null(),
        "{what}: result {code} without an error object"
    );
    assert_eq!(
        kcsi_error_result(err),
        code,
        "{what}: error object carries another code"
    );
    let message = unsafe { CStr::from_ptr(kcsi_error_message(err)) };
    let message = message.to_str().expect("messages are UTF-8").to_string();
    kcsi_error_free(err);
    assert_ne!(code, KCSI_ERR_INTERNAL, "{what}: internal error: {message}");
    code
}

/// Frees a string kcsi returned, checking it is UTF-8 (and JSON when `json`).
pub fn take_string(s: *mut c_char, json: bool) {
    if s.is_null() {
        return;
    }
    let text = unsafe { CStr::from_ptr(s) }
        .to_str()
        .expect("returned strings are UTF-8");
    if json {
        serde_json::from_str::<serde_json::Value>(text).expect("returned JSON parses");
    }
    kcsi::ffi::error::kcsi_string_free(s);
}
