//! A kubeconfig whose server is plain `http://` (the loopback relay the Go binding hands over
//! for its host's client) needs no TLS: a host is made on a machine without any root
//! certificate, where kube's TLS stack refuses a kubeconfig without a CA. Its own process
//! (one test), since it points the system's certificate store at nothing for the whole process.

use kcsi::ffi::host::{kcsi_host_free, kcsi_host_new};
use kcsi_testkit::capi::{call, cstr};
use kcsi_testkit::short_tempdir;
use serde_json::json;

/// `kcsi_host_new` with an in-memory kubeconfig for `server`: the error message, or "" when a
/// host was made (and freed again).
fn host_new(server: &str) -> String {
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
    });
    let root = short_tempdir("kcsi-plain-http");
    let config = cstr(
        &json!({"nodeName": "plain-node", "rootDir": root.path(),
                "kubeconfigData": kubeconfig.to_string()})
        .to_string(),
    );
    let mut host = std::ptr::null_mut();
    match call(|err| kcsi_host_new(config.as_ptr(), &mut host, err)) {
        Ok(()) => {
            kcsi_host_free(host);
            String::new()
        }
        Err(e) => e.message,
    }
}

#[test]
fn a_plain_http_server_needs_no_root_certificates() {
    let nowhere = tempfile::tempdir().unwrap();
    let missing = nowhere.path().join("none");
    // rustls-native-certs reads the system's roots from these when they are set; before any
    // other thread of this process reads the environment.
    std::env::set_var("SSL_CERT_FILE", &missing);
    std::env::set_var("SSL_CERT_DIR", &missing);

    // The state the test needs: without roots, kube's TLS stack cannot be built at all.
    let https = host_new("https://127.0.0.1:1");
    assert!(
        https.contains("No CA certificates were loaded"),
        "an https server without a CA must need the (missing) system roots, got {https:?}"
    );
    assert_eq!(host_new("http://127.0.0.1:1"), "");
}
