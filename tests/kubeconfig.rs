//! Hostile kubeconfig files given to `kcsi_host_new`: each is refused with INVALID_ARGUMENT (IO
//! when the file cannot be read) and a message naming the path, never with a panic.

use std::ffi::{CStr, CString};
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

use kcsi::ffi::error::{kcsi_error, kcsi_error_free, kcsi_error_message, kcsi_error_result};
use kcsi::ffi::host::{kcsi_host, kcsi_host_free, kcsi_host_new};
use kcsi::ffi::{KCSI_ERR_INVALID_ARGUMENT, KCSI_ERR_IO, KCSI_OK};
use serde_json::json;

const VALID: &str = "apiVersion: v1\nkind: Config\n\
clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n\
users:\n- name: u\n  user:\n    token: s3cr3t-token-value\n\
contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n\
current-context: x\n";

/// Panics anywhere in the process (caught at the C boundary or not) since the hook was set.
static PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info)
        }));
    });
}

/// `kcsi_host_new` with `kubeconfig`: the result code and the error message ("" on success;
/// the host is freed again at once).
fn host_new(kubeconfig: &Path) -> (i32, String) {
    count_panics();
    let config = CString::new(
        json!({"nodeName": "kc-node", "rootDir": "/tmp/kcsi-kubeconfig-test", "kubeconfig": kubeconfig})
            .to_string(),
    )
    .unwrap();
    let mut host: *mut kcsi_host = ptr::null_mut();
    let mut err: *mut kcsi_error = ptr::null_mut();
    let code = kcsi_host_new(config.as_ptr(), &mut host, &mut err);
    if code == KCSI_OK {
        kcsi_host_free(host);
        return (code, String::new());
    }
    assert_eq!(kcsi_error_result(err), code);
    let message = unsafe { CStr::from_ptr(kcsi_error_message(err)) }
        .to_string_lossy()
        .into_owned();
    kcsi_error_free(err);
    (code, message)
}

fn refused(path: &Path, code: i32, why: &str) {
    let (got, message) = host_new(path);
    assert_eq!(got, code, "{}: {message}", path.display());
    assert!(
        message.contains(&path.display().to_string()),
        "message names the path: {message}"
    );
    assert!(message.contains(why), "message says {why:?}: {message}");
    assert!(
        !message.contains("s3cr3t"),
        "message leaks the token: {message}"
    );
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "a panic happened");
}

fn file(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn utf16(text: &str, big_endian: bool) -> Vec<u8> {
    let mut out = if big_endian {
        vec![0xFE, 0xFF]
    } else {
        vec![0xFF, 0xFE]
    };
    for unit in text.encode_utf16() {
        out.extend(if big_endian {
            unit.to_be_bytes()
        } else {
            unit.to_le_bytes()
        });
    }
    out
}

#[test]
fn utf16_kubeconfig_of_odd_length_is_invalid_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    for (name, big_endian) in [("le", false), ("be", true)] {
        let mut bytes = utf16(VALID, big_endian);
        bytes.push(b'x');
        refused(
            &file(dir.path(), name, &bytes),
            KCSI_ERR_INVALID_ARGUMENT,
            "odd number of bytes",
        );
        refused(
            &file(dir.path(), name, &bytes[..3]),
            KCSI_ERR_INVALID_ARGUMENT,
            "odd number of bytes",
        );
    }
}

#[test]
fn utf16_and_utf8_bom_kubeconfigs_are_decoded() {
    let dir = tempfile::tempdir().unwrap();
    let mut bom8 = vec![0xEF, 0xBB, 0xBF];
    bom8.extend(VALID.as_bytes());
    for (name, bytes) in [
        ("plain", VALID.as_bytes().to_vec()),
        ("utf8-bom", bom8),
        ("utf16le", utf16(VALID, false)),
        ("utf16be", utf16(VALID, true)),
    ] {
        let path = file(dir.path(), name, &bytes);
        assert_eq!(host_new(&path), (KCSI_OK, String::new()), "{name}");
    }
    assert_eq!(PANICS.load(Ordering::SeqCst), 0);
}

#[test]
fn utf16_kubeconfig_with_a_lone_surrogate_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), "surrogate", &[0xFF, 0xFE, 0x00, 0xD8, b'a', 0]);
    refused(&path, KCSI_ERR_INVALID_ARGUMENT, "not valid UTF-16 LE");
}

#[test]
fn binary_garbage_kubeconfig_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(11);
    let mut bytes: Vec<u8> = (0..4096).map(|_| rng.u8(..)).collect();
    bytes[0] = 0x80; // no byte-order mark by chance
    refused(
        &file(dir.path(), "garbage", &bytes),
        KCSI_ERR_INVALID_ARGUMENT,
        "invalid UTF-8 at byte 0",
    );
    refused(
        &file(dir.path(), "nul", b"\0\0\0\0"),
        KCSI_ERR_INVALID_ARGUMENT,
        "cannot",
    );
}

#[test]
fn empty_kubeconfig_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    refused(
        &file(dir.path(), "empty", b""),
        KCSI_ERR_INVALID_ARGUMENT,
        "cannot use",
    );
}

#[test]
fn kubeconfig_larger_than_the_limit_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let size = (4 << 20) + 1; // one byte over kcsi's limit
    let path = file(dir.path(), "huge", &vec![b'#'; size]);
    refused(&path, KCSI_ERR_INVALID_ARGUMENT, "larger than 4 MiB");
}

#[test]
fn kubeconfig_that_is_a_directory_fifo_or_missing_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    refused(dir.path(), KCSI_ERR_INVALID_ARGUMENT, "it is a directory");
    // A FIFO would block a reader forever.
    let fifo = dir.path().join("fifo");
    let c = CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    refused(&fifo, KCSI_ERR_INVALID_ARGUMENT, "not a regular file");
    refused(
        &dir.path().join("missing"),
        KCSI_ERR_INVALID_ARGUMENT,
        "No such file",
    );
}

#[test]
fn unreadable_kubeconfig_is_an_io_error() {
    // A regular file whose read fails even for root (offset 0 is unmapped: EIO).
    refused(
        Path::new("/proc/self/mem"),
        KCSI_ERR_IO,
        "Input/output error",
    );
}

#[test]
fn yaml_bombs_and_deep_nesting_are_invalid_without_exhausting_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let mut laughs = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..12 {
        let p = i - 1;
        laughs += &format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        );
    }
    refused(
        &file(dir.path(), "laughs", laughs.as_bytes()),
        KCSI_ERR_INVALID_ARGUMENT,
        "not a valid kubeconfig",
    );
    let deep = "[".repeat(200_000);
    refused(
        &file(dir.path(), "deep", deep.as_bytes()),
        KCSI_ERR_INVALID_ARGUMENT,
        "not a valid kubeconfig",
    );
}

#[test]
fn parse_errors_give_the_position_but_never_the_content() {
    let dir = tempfile::tempdir().unwrap();
    let bad = VALID.replace(
        "    token: s3cr3t-token-value",
        "    token: [s3cr3t-token-value]",
    );
    refused(
        &file(dir.path(), "typed", bad.as_bytes()),
        KCSI_ERR_INVALID_ARGUMENT,
        "line 10",
    );
}

#[test]
fn relative_files_in_a_kubeconfig_are_resolved_against_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let text = VALID.replace(
        "    server: https://127.0.0.1:1",
        "    server: https://127.0.0.1:1\n    certificate-authority: certs/ca.pem",
    );
    let path = file(dir.path(), "relative", text.as_bytes());
    let (code, message) = host_new(&path);
    assert_eq!(code, KCSI_ERR_INVALID_ARGUMENT, "{message}");
    let ca = dir.path().join("certs/ca.pem");
    assert!(message.contains(&ca.display().to_string()), "{message}");
}
