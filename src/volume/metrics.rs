//! Volume metrics (upstream `metricsCsi.GetMetrics`): `NodeGetVolumeStats` on a published
//! volume's path, mapped to the kubelet's `Metrics` fields.

use std::path::Path;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::csi::proto::csi::volume_usage::Unit;
use crate::csi::proto::csi::NodeGetVolumeStatsResponse;
use crate::error::{Error, ErrorKind, Result};
use crate::host::Host;
use crate::volume::operation::Operation;

/// What `kcsi_mounter_metrics` returns. Bytes and inode counts; the condition only when the
/// gate `CSIVolumeHealth` is on and the driver has VOLUME_CONDITION.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMetrics {
    pub time: Time,
    pub capacity_bytes: i64,
    pub available_bytes: i64,
    pub used_bytes: i64,
    pub inodes: i64,
    pub inodes_free: i64,
    pub inodes_used: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abnormal: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Stats of `volume_handle` published at `path` by `driver`. A driver that is not registered
/// is transient; one without GET_VOLUME_STATS is `NotSupported`.
pub async fn volume_stats(
    host: &Host,
    driver: &str,
    volume_handle: &str,
    path: &Path,
) -> Result<VolumeMetrics> {
    let op = Operation::start(
        host,
        driver,
        &csi_log!("metricsCsi.GetMetrics failed to get CSI client"),
    )?;
    let caps = op.capabilities().await?;
    if !caps.get_volume_stats {
        return Err(Error::new(
            ErrorKind::NotSupported,
            format!("metrics are not supported for {driver} volumes"),
        ));
    }
    // Upstream takes the time before the call.
    let time = Time(Timestamp::now());
    let resp = op
        .client()
        .node_get_volume_stats(volume_handle, &path.to_string_lossy(), op.deadline)
        .await?;
    let with_condition = host.config().gate("CSIVolumeHealth") && caps.volume_condition;
    from_response(time, resp, with_condition, volume_handle)
}

fn from_response(
    time: Time,
    resp: NodeGetVolumeStatsResponse,
    with_condition: bool,
    volume_handle: &str,
) -> Result<VolumeMetrics> {
    if resp.usage.is_empty() {
        return Err(Error::new(
            ErrorKind::Driver,
            format!("failed to get usage from response for volume {volume_handle}. usage is nil"),
        ));
    }
    let mut m = VolumeMetrics {
        time,
        capacity_bytes: 0,
        available_bytes: 0,
        used_bytes: 0,
        inodes: 0,
        inodes_free: 0,
        inodes_used: 0,
        abnormal: None,
        message: None,
    };
    for u in &resp.usage {
        match Unit::try_from(u.unit) {
            Ok(Unit::Bytes) => {
                (m.available_bytes, m.capacity_bytes, m.used_bytes) = (u.available, u.total, u.used)
            }
            Ok(Unit::Inodes) => {
                (m.inodes_free, m.inodes, m.inodes_used) = (u.available, u.total, u.used)
            }
            _ => tracing::info!(
                "{}",
                csi_log!(
                    "unknown unit {} in NodeGetVolumeStats of {volume_handle}",
                    u.unit
                )
            ),
        }
    }
    if with_condition {
        if let Some(c) = resp.volume_condition {
            m.abnormal = Some(c.abnormal);
            m.message = Some(c.message);
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::proto::csi::{VolumeCondition, VolumeUsage};

    #[test]
    fn usage_units_map_to_bytes_and_inodes() {
        let resp = NodeGetVolumeStatsResponse {
            usage: vec![
                VolumeUsage {
                    available: 1,
                    total: 3,
                    used: 2,
                    unit: Unit::Bytes as i32,
                },
                VolumeUsage {
                    available: 10,
                    total: 30,
                    used: 20,
                    unit: Unit::Inodes as i32,
                },
            ],
            volume_condition: Some(VolumeCondition {
                abnormal: true,
                message: "bad".into(),
            }),
        };
        let t = Time(Timestamp::UNIX_EPOCH);
        let m = from_response(t.clone(), resp.clone(), false, "v").unwrap();
        assert_eq!(
            (m.capacity_bytes, m.available_bytes, m.used_bytes),
            (3, 1, 2)
        );
        assert_eq!((m.inodes, m.inodes_free, m.inodes_used), (30, 10, 20));
        assert_eq!(m.abnormal, None);
        let json = serde_json::to_value(from_response(t, resp, true, "v").unwrap()).unwrap();
        assert_eq!(json["abnormal"], true);
        assert_eq!(json["message"], "bad");
        assert_eq!(json["time"], "1970-01-01T00:00:00Z");
        let empty = NodeGetVolumeStatsResponse::default();
        assert!(
            from_response(Time(Timestamp::UNIX_EPOCH), empty, false, "v")
                .unwrap_err()
                .message()
                .contains("usage is nil")
        );
    }
}
