//! `kcsi create-volume` / `kcsi delete-volume`: the external-provisioner's two calls, for
//! demos and tests that need a volume to exist before the kubelet's steps (kcsi is the node
//! side and never creates volumes itself). The new volume's id is the only line on stdout.

use std::time::Duration;

use kcsi::access_mode;
use kcsi::parse_bytes;

use crate::args::{CreateVolumeCmd, DeleteVolumeCmd};
use crate::driver::{self, NewVolume};
use crate::UsageError;

fn timeout(t: f64) -> Result<Duration, UsageError> {
    if !(t.is_finite() && t > 0.0 && t <= 86_400.0) {
        return Err(UsageError(format!(
            "--timeout {t}: must be > 0 and at most 86400"
        )));
    }
    Ok(Duration::from_secs_f64(t))
}

fn channel(endpoint: &str) -> Result<tonic::transport::Channel, UsageError> {
    let socket = kcsi::socket_path(endpoint)
        .map_err(|e| UsageError(format!("--endpoint: {}", e.message())))?;
    crate::session::check_socket(&socket)?;
    Ok(driver::channel(&socket))
}

pub async fn create(cmd: CreateVolumeCmd) -> Result<i32, UsageError> {
    let timeout = timeout(cmd.timeout)?;
    let bytes =
        parse_bytes(&cmd.size).map_err(|e| UsageError(format!("--size: {}", e.message())))?;
    let ch = channel(&cmd.endpoint)?;
    let request = NewVolume {
        name: cmd.name,
        bytes,
        block: cmd.block,
        fs_type: "",
        mount_flags: Vec::new(),
        access_mode: access_mode(&cmd.access_mode, &Default::default()),
        parameters: cmd.parameters.into_iter().collect(),
        secrets: Default::default(),
        topology: None,
    };
    match driver::create_volume(&ch, request, timeout).await {
        Ok(v) => {
            println!("{}", v.volume_id);
            Ok(0)
        }
        Err(e) => {
            eprintln!("kcsi: {}", e.message());
            Ok(1)
        }
    }
}

pub async fn delete(cmd: DeleteVolumeCmd) -> Result<i32, UsageError> {
    let timeout = timeout(cmd.timeout)?;
    let ch = channel(&cmd.endpoint)?;
    match driver::delete_volume(&ch, &cmd.volume_handle, Default::default(), timeout).await {
        Ok(()) => Ok(0),
        Err(e) => {
            eprintln!("kcsi: {}", e.message());
            Ok(1)
        }
    }
}
