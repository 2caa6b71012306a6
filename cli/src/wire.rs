//! CSI messages as text, decoded from gRPC frames by method name. Only messages whose `Debug`
//! cannot print a secret are decoded (the requests with `csi_secret` fields that kcsi's protos
//! redact, and those without such fields); the rest show their size.

use kcsi::proto::csi;
use prost::Message;

/// The CSI methods kcsi knows, by short name.
pub const METHODS: &[&str] = &[
    "GetPluginInfo",
    "GetPluginCapabilities",
    "Probe",
    "CreateVolume",
    "DeleteVolume",
    "ControllerPublishVolume",
    "ControllerUnpublishVolume",
    "ValidateVolumeCapabilities",
    "ListVolumes",
    "GetCapacity",
    "ControllerGetCapabilities",
    "CreateSnapshot",
    "DeleteSnapshot",
    "ListSnapshots",
    "ControllerExpandVolume",
    "ControllerGetVolume",
    "ControllerModifyVolume",
    "NodeStageVolume",
    "NodeUnstageVolume",
    "NodePublishVolume",
    "NodeUnpublishVolume",
    "NodeGetVolumeStats",
    "NodeExpandVolume",
    "NodeGetCapabilities",
    "NodeGetInfo",
];

/// The short method name of a gRPC path (`/csi.v1.Node/NodeGetInfo` → `NodeGetInfo`).
pub fn short_method(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The message inside one length-prefixed gRPC frame (unary calls carry one).
fn payload(body: &[u8]) -> Option<&[u8]> {
    if body.len() < 5 || body[0] != 0 {
        return None;
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    body.get(5..5 + len)
}

fn decode<M: Message + Default + std::fmt::Debug>(bytes: &[u8]) -> String {
    match M::decode(bytes) {
        Ok(m) => format!("{m:?}"),
        Err(e) => format!("<{} bytes that do not decode: {e}>", bytes.len()),
    }
}

macro_rules! by_method {
    ($method:expr, $bytes:expr, $($name:literal => $req:ty, $resp:ty;)*) => {
        match $method {
            $($name => Some((decode::<$req>($bytes), decode::<$resp>($bytes))),)*
            _ => None,
        }
    };
}

fn text(method: &str, body: &[u8], request: bool) -> String {
    let Some(bytes) = payload(body) else {
        return if body.is_empty() {
            String::new()
        } else {
            format!("<{} bytes, not one uncompressed gRPC message>", body.len())
        };
    };
    let both = by_method!(short_method(method), bytes,
        "GetPluginInfo" => csi::GetPluginInfoRequest, csi::GetPluginInfoResponse;
        "GetPluginCapabilities" => csi::GetPluginCapabilitiesRequest, csi::GetPluginCapabilitiesResponse;
        "Probe" => csi::ProbeRequest, csi::ProbeResponse;
        "CreateVolume" => csi::CreateVolumeRequest, csi::CreateVolumeResponse;
        "DeleteVolume" => csi::DeleteVolumeRequest, csi::DeleteVolumeResponse;
        "ControllerPublishVolume" => csi::ControllerPublishVolumeRequest, csi::ControllerPublishVolumeResponse;
        "ControllerUnpublishVolume" => csi::ControllerUnpublishVolumeRequest, csi::ControllerUnpublishVolumeResponse;
        "ControllerGetCapabilities" => csi::ControllerGetCapabilitiesRequest, csi::ControllerGetCapabilitiesResponse;
        "ControllerExpandVolume" => csi::ControllerExpandVolumeRequest, csi::ControllerExpandVolumeResponse;
        "NodeStageVolume" => csi::NodeStageVolumeRequest, csi::NodeStageVolumeResponse;
        "NodeUnstageVolume" => csi::NodeUnstageVolumeRequest, csi::NodeUnstageVolumeResponse;
        "NodePublishVolume" => csi::NodePublishVolumeRequest, csi::NodePublishVolumeResponse;
        "NodeUnpublishVolume" => csi::NodeUnpublishVolumeRequest, csi::NodeUnpublishVolumeResponse;
        "NodeGetVolumeStats" => csi::NodeGetVolumeStatsRequest, csi::NodeGetVolumeStatsResponse;
        "NodeExpandVolume" => csi::NodeExpandVolumeRequest, csi::NodeExpandVolumeResponse;
        "NodeGetCapabilities" => csi::NodeGetCapabilitiesRequest, csi::NodeGetCapabilitiesResponse;
        "NodeGetInfo" => csi::NodeGetInfoRequest, csi::NodeGetInfoResponse;
    );
    match both {
        Some((req, resp)) => {
            if request {
                req
            } else {
                resp
            }
        }
        None => format!("<{} bytes, not shown>", bytes.len()),
    }
}

pub fn request_text(method: &str, body: &[u8]) -> String {
    text(method, body, true)
}

pub fn response_text(method: &str, body: &[u8]) -> String {
    text(method, body, false)
}

/// `tonic::Code`'s name for a gRPC status number.
pub fn code_name(code: i32) -> String {
    format!("{:?}", tonic::Code::from_i32(code))
}

/// A gRPC code from its name (`Internal`, `RESOURCE_EXHAUSTED`, `resource_exhausted`) or
/// number.
pub fn parse_code(text: &str) -> Option<tonic::Code> {
    if let Ok(n) = text.parse::<i32>() {
        return (0..=16).contains(&n).then(|| tonic::Code::from_i32(n));
    }
    let wanted: String = text.chars().filter(|c| *c != '_').collect();
    (1..=16)
        .map(tonic::Code::from_i32)
        .find(|c| format!("{c:?}").eq_ignore_ascii_case(&wanted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_decode_by_method_and_secrets_stay_hidden() {
        let req = csi::NodeStageVolumeRequest {
            volume_id: "v1".into(),
            secrets: [("password".to_string(), "hunter2".to_string())].into(),
            ..Default::default()
        };
        let msg = req.encode_to_vec();
        let mut frame = vec![0];
        frame.extend((msg.len() as u32).to_be_bytes());
        frame.extend(&msg);
        let text = request_text("/csi.v1.Node/NodeStageVolume", &frame);
        assert!(text.contains("v1") && !text.contains("hunter2"), "{text}");
        assert!(request_text("/csi.v1.Controller/CreateSnapshot", &frame).contains("not shown"));
    }

    #[test]
    fn codes_parse_from_names_and_numbers() {
        assert_eq!(parse_code("Internal"), Some(tonic::Code::Internal));
        assert_eq!(
            parse_code("RESOURCE_EXHAUSTED"),
            Some(tonic::Code::ResourceExhausted)
        );
        assert_eq!(parse_code("4"), Some(tonic::Code::DeadlineExceeded));
        assert_eq!(parse_code("Nope"), None);
    }
}
