//! The out-of-capacity check the kubelet's volume manager makes for a volume that does not get
//! attached (upstream `VerifyExhaustedResource`).

use std::ffi::c_char;

use super::boundary::guard;
use super::error::kcsi_error;
use super::handle::handle_arg;
use super::host::{kcsi_host, node_arg};
use super::kcsi_result;
use super::queries::bool_query;
use crate::node::node_updater;
use crate::runtime;
use crate::spec::VolumeSpec;

/// Whether a PersistentVolume's attach failed because the node has no capacity left for its
/// driver: its VolumeAttachment's `attachError.errorCode` is gRPC ResourceExhausted (8). If so,
/// the driver's CSINode `allocatable.count` is refreshed from `NodeGetInfo` before `*out` is
/// set to true. Only drivers whose CSIDriver sets `nodeAllocatableUpdatePeriodSeconds` take part
/// (gate `MutableCSINodeAllocatableCount`); a lookup that fails, a standalone host or an inline
/// volume answer false (logged), as upstream. Call it when a pod's volumes stay unattached.
#[no_mangle]
pub extern "C" fn kcsi_verify_exhausted_resource(
    h: *mut kcsi_host,
    spec_json: *const c_char,
    out: *mut bool,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, |export| {
        handle_arg(h)?.node_only(export)?;
        bool_query(node_arg(h), spec_json, out, |node, spec: &VolumeSpec| {
            runtime::block_on(|| node_updater::verify_exhausted_resource(node, spec))
        })
    })
}
