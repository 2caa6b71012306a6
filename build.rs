//! Compiles kcsi's proto files with protox (pure Rust, no system `protoc`) and gives the shared
//! library its SONAME, packed relocations and the order of its hot functions.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/csi.proto", "proto/pluginregistration.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .build_transport(false)
        // Requests carrying `csi_secret` fields get hand-written, redacting Debug impls.
        .skip_debug([
            ".csi.v1.NodeStageVolumeRequest",
            ".csi.v1.NodePublishVolumeRequest",
            ".csi.v1.NodeExpandVolumeRequest",
            ".csi.v1.CreateVolumeRequest",
            ".csi.v1.DeleteVolumeRequest",
            ".csi.v1.ControllerExpandVolumeRequest",
            ".csi.v1.ControllerPublishVolumeRequest",
            ".csi.v1.ControllerUnpublishVolumeRequest",
        ])
        .compile_fds(fds)?;
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libkcsi.so.1");
    // Relative relocations packed (DT_RELR, glibc 2.36): the loader no longer reads ~650 KiB
    // of .rela.dyn into every process that loads the library.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,pack-relative-relocs");
    // The functions the kubelet and the controller run, laid out first and together
    // (scripts/hot-symbols.sh): the kernel maps code 64 KiB around each page touched, so
    // scattered they would make nearly all of .text resident. The option is LLD's, rustc's
    // default linker on this target since 1.90; a name the build lacks is skipped.
    println!("cargo:rerun-if-changed=link/hot-symbols.txt");
    if std::env::var("TARGET")? == "x86_64-unknown-linux-gnu" {
        let order = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR")?)
            .join("link/hot-symbols.txt");
        println!(
            "cargo:rustc-cdylib-link-arg=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo:rustc-cdylib-link-arg=-Wl,--no-warn-symbol-ordering");
    }
    Ok(())
}
