//! The real csi-driver-host-path (v1.18.0) as a test peer: start it, create volumes through
//! its Controller service, and read its state file (which volumes are staged and published
//! where).

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use kcsi::csi::proto::csi;
use serde_json::Value;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use super::{peer_binary, short_tempdir, DriverProcess, DRIVER};

impl DriverProcess {
    /// hostpathplugin on its own socket and state dir, logging every gRPC call (-v=5).
    pub fn real_hostpath(node_id: &str, extra: &[&str]) -> DriverProcess {
        let dir = short_tempdir("kcsi-hp");
        let socket = dir.path().join("csi.sock");
        let mut args = vec![
            format!("--endpoint=unix://{}", socket.display()),
            format!("--nodeid={node_id}"),
            format!("--statedir={}", dir.path().join("state").display()),
            format!("--drivername={DRIVER}"),
            "-v=5".to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::spawn(peer_binary("hostpath"), args, dir, socket, DRIVER)
    }

    /// The driver's volumes from `<statedir>/state.json`.
    pub fn volumes(&self) -> Vec<Value> {
        let path = self.dir.path().join("state/state.json");
        let text = std::fs::read_to_string(path).unwrap_or_else(|_| "{}".into());
        let state: Value = serde_json::from_str(&text).unwrap_or_default();
        state["Volumes"].as_array().cloned().unwrap_or_default()
    }

    /// (staged at, published at) of volume `id`, as the driver records them.
    pub fn volume_paths(&self, id: &str) -> (Vec<String>, Vec<String>) {
        let list = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        self.volumes()
            .iter()
            .find(|v| v["VolID"] == id)
            .map(|v| (list(&v["Staged"]), list(&v["Published"])))
            .unwrap_or_default()
    }

    /// How many times the driver logged a call of `method` (e.g. "NodeStageVolume").
    pub fn calls(&self, method: &str) -> usize {
        let needle = format!("GRPC call: /csi.v1.Node/{method}");
        self.log().lines().filter(|l| l.contains(&needle)).count()
    }

    /// Controller.CreateVolume; `block` for raw block access (a loop device). Returns the id.
    pub fn create_volume(&self, name: &str, block: bool) -> String {
        let req = csi::CreateVolumeRequest {
            name: name.to_string(),
            volume_capabilities: vec![capability(block)],
            capacity_range: Some(csi::CapacityRange {
                required_bytes: 1 << 20,
                limit_bytes: 0,
            }),
            ..Default::default()
        };
        rt().block_on(async {
            let mut client =
                csi::controller_client::ControllerClient::new(channel(&self.socket).await);
            client
                .create_volume(req)
                .await
                .unwrap()
                .into_inner()
                .volume
                .unwrap()
                .volume_id
        })
    }

    /// Controller.DeleteVolume (detaches a block volume's loop device).
    pub fn delete_volume(&self, id: &str) {
        let req = csi::DeleteVolumeRequest {
            volume_id: id.to_string(),
            ..Default::default()
        };
        rt().block_on(async {
            let mut client =
                csi::controller_client::ControllerClient::new(channel(&self.socket).await);
            client.delete_volume(req).await.unwrap();
        });
    }
}

pub fn capability(block: bool) -> csi::VolumeCapability {
    use csi::volume_capability::{
        access_mode::Mode, AccessMode, AccessType, BlockVolume, MountVolume,
    };
    csi::VolumeCapability {
        access_type: Some(if block {
            AccessType::Block(BlockVolume::default())
        } else {
            AccessType::Mount(MountVolume::default())
        }),
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeWriter as i32,
        }),
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn channel(socket: &Path) -> Channel {
    let path: PathBuf = socket.to_path_buf();
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
        .unwrap()
}
