//! Expansion export (NodeExpandVolume).

use std::ffi::c_char;

use super::boundary::{guard, json_arg, out_arg, write_value};
use super::error::kcsi_error;
use super::handle::handle_arg;
use super::host::kcsi_host;
use super::kcsi_result;
use crate::runtime;
use crate::volume::expander::{self, ExpandOptions};

/// Expands a volume on this node (NodeExpandVolume). `options_json`: `{"spec": <spec>,
/// "devicePath", "deviceMountPath", "deviceStagePath", "newSize": "<quantity>", "oldSize":
/// "<quantity>"}`; block volumes (`volumeMode: Block`) are expanded at `devicePath`, others at
/// `deviceMountPath`. On success `*resized_out` is true. A driver without EXPAND_VOLUME gives
/// `KCSI_ERR_NOT_SUPPORTED` (the volume was not resized). The driver's gRPC code stays on the
/// error: FailedPrecondition (in use) and InvalidArgument / OutOfRange / NotFound (infeasible)
/// are final; codes that may still be in progress are uncertain.
#[no_mangle]
pub extern "C" fn kcsi_node_expand(
    h: *mut kcsi_host,
    options_json: *const c_char,
    resized_out: *mut bool,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, |export| {
        let host = handle_arg(h)?;
        host.node_only(export)?;
        let opts: ExpandOptions = json_arg(options_json, "options_json")?;
        out_arg(resized_out, "resized_out")?;
        let resized = runtime::block_on(|| expander::node_expand(&host, &opts))??;
        write_value(resized_out, resized);
        Ok(())
    })
}
