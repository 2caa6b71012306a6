//! Compiles kcsi's proto files with protox (pure Rust, no system `protoc`) and gives the shared
//! library its SONAME.

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
    Ok(())
}
