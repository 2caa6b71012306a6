//! Block volumes with fuzzed input: fields spec JSON, pod JSON, spec name, pod UID, map path.
//! `kcsi_block_mapper_new` (writes vol_data.json under the root), `_paths`, `_set_up_device`,
//! `_map_pod_device`; `kcsi_block_unmapper_new`, `_unmap_pod_device`, `_tear_down_device`;
//! `kcsi_construct_block_volume_spec`.
#![no_main]
use std::ptr;

use kcsi_fuzz::ffi::block::*;
use kcsi_fuzz::ffi::reconstruct::kcsi_construct_block_volume_spec;
use kcsi_fuzz::{call, fields, fixture, opt, take_string};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let v = fields(data, 5);
    let h = f.host;
    let mut m = ptr::null_mut();
    if call("kcsi_block_mapper_new", |e| {
        kcsi_block_mapper_new(h, v[0].as_ptr(), v[1].as_ptr(), &mut m, e)
    }) == 0
    {
        let mut s = ptr::null_mut();
        call("kcsi_block_mapper_paths", |e| {
            kcsi_block_mapper_paths(m, &mut s, e)
        });
        take_string(s, true);
        let mut s = ptr::null_mut();
        call("kcsi_block_mapper_set_up_device", |e| {
            kcsi_block_mapper_set_up_device(m, &mut s, e)
        });
        take_string(s, false);
        let mut s = ptr::null_mut();
        call("kcsi_block_mapper_map_pod_device", |e| {
            kcsi_block_mapper_map_pod_device(m, &mut s, e)
        });
        take_string(s, false);
        kcsi_block_mapper_free(m);
    }
    let mut s = ptr::null_mut();
    call("kcsi_construct_block_volume_spec", |e| {
        kcsi_construct_block_volume_spec(h, v[3].as_ptr(), v[2].as_ptr(), opt(&v[4]), &mut s, e)
    });
    take_string(s, true);
    let mut u = ptr::null_mut();
    if call("kcsi_block_unmapper_new", |e| {
        kcsi_block_unmapper_new(h, v[2].as_ptr(), v[3].as_ptr(), &mut u, e)
    }) == 0
    {
        call("kcsi_block_unmapper_unmap_pod_device", |e| {
            kcsi_block_unmapper_unmap_pod_device(u, e)
        });
        // Both paths are only logged.
        call("kcsi_block_unmapper_tear_down_device", |e| {
            kcsi_block_unmapper_tear_down_device(u, opt(&v[4]), opt(&v[4]), e)
        });
        kcsi_block_unmapper_free(u);
    }
    f.clean();
});
