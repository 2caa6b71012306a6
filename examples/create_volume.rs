//! Stands in for the cluster's external-provisioner in `make demo`: calls a CSI driver's
//! Controller.CreateVolume (kcsi is the node side and never creates volumes) and prints the
//! new volume's id.
//!
//! Usage: `create_volume <driver socket> <volume name> [capacity bytes]`

use std::process::ExitCode;

use hyper_util::rt::TokioIo;
use kcsi::csi::proto::csi;
use tokio::net::UnixStream;
use tonic::transport::{Endpoint, Uri};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(socket), Some(name)) = (args.get(1).cloned(), args.get(2).cloned()) else {
        eprintln!("usage: create_volume <driver socket> <volume name> [capacity bytes]");
        return ExitCode::from(2);
    };
    let bytes: i64 = match args.get(3).map(|s| s.parse()) {
        None => 0,
        Some(Ok(b)) => b,
        Some(Err(e)) => {
            eprintln!("create_volume: capacity {:?} is not a number: {e}", args[3]);
            return ExitCode::from(2);
        }
    };
    let connector = tower::service_fn(move |_: Uri| {
        let socket = socket.clone();
        async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(socket).await?)) }
    });
    let channel = match Endpoint::from_static("http://localhost")
        .connect_with_connector(connector)
        .await
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("create_volume: cannot connect to the driver: {e}");
            return ExitCode::FAILURE;
        }
    };
    use csi::volume_capability::{access_mode::Mode, AccessMode, AccessType, MountVolume};
    let request = csi::CreateVolumeRequest {
        name,
        capacity_range: (bytes > 0).then_some(csi::CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![csi::VolumeCapability {
            access_type: Some(AccessType::Mount(MountVolume::default())),
            access_mode: Some(AccessMode {
                mode: Mode::SingleNodeWriter as i32,
            }),
        }],
        ..Default::default()
    };
    match csi::controller_client::ControllerClient::new(channel)
        .create_volume(request)
        .await
    {
        Ok(resp) => match resp.into_inner().volume {
            Some(v) => {
                println!("{}", v.volume_id);
                ExitCode::SUCCESS
            }
            None => {
                eprintln!("create_volume: the driver returned no volume");
                ExitCode::FAILURE
            }
        },
        Err(status) => {
            eprintln!("create_volume: CreateVolume failed: {status}");
            ExitCode::FAILURE
        }
    }
}
