//! The kubeconfig file a `kcsi_host_new` config names, fuzzed: written to the fuzz root, then
//! read, decoded and turned into a client exactly as `kcsi_host_new` does, but without starting
//! the host's watches (no request is sent, so no exec plugin the file names ever runs). Files
//! the kubeconfig refers to are only read.
#![no_main]
use kcsi::ErrorKind;
use kcsi::ApiClient;
use kcsi_fuzz::fixture;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let path = f.root().join("kubeconfig");
    std::fs::write(&path, data).expect("write the kubeconfig");
    let runtime = kcsi::runtime_handle().expect("runtime");
    let _enter = runtime.enter();
    if let Err(e) = ApiClient::from_kubeconfig(&path) {
        assert!(
            matches!(e.kind(), ErrorKind::InvalidArgument | ErrorKind::Io),
            "{:?}: {}",
            e.kind(),
            e.message()
        );
        assert!(
            e.message().contains(&path.display().to_string()),
            "{}",
            e.message()
        );
    }
});
