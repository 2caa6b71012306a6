//! The mounter and unmounter with fuzzed input: fields spec JSON, pod JSON, set-up args JSON,
//! spec name, pod UID. `kcsi_mounter_new`, `_path`, `_set_up`, `_metrics`;
//! `kcsi_unmounter_new`, `_tear_down`. No driver is registered, so set-up and tear-down stop
//! at the driver lookup or at what they check before it.
#![no_main]
use std::ptr;

use kcsi_fuzz::ffi::mounter::*;
use kcsi_fuzz::{call, fields, fixture, opt, take_string};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let v = fields(data, 5);
    let mut m = ptr::null_mut();
    if call("kcsi_mounter_new", |e| {
        kcsi_mounter_new(f.host, v[0].as_ptr(), v[1].as_ptr(), &mut m, e)
    }) == 0
    {
        let mut path = ptr::null_mut();
        call("kcsi_mounter_path", |e| kcsi_mounter_path(m, &mut path, e));
        take_string(path, false);
        call("kcsi_mounter_set_up", |e| {
            kcsi_mounter_set_up(m, opt(&v[2]), e)
        });
        let mut metrics = ptr::null_mut();
        call("kcsi_mounter_metrics", |e| {
            kcsi_mounter_metrics(m, &mut metrics, e)
        });
        take_string(metrics, true);
        kcsi_mounter_free(m);
    }
    let mut u = ptr::null_mut();
    if call("kcsi_unmounter_new", |e| {
        kcsi_unmounter_new(f.host, v[3].as_ptr(), v[4].as_ptr(), &mut u, e)
    }) == 0
    {
        call("kcsi_unmounter_tear_down", |e| {
            kcsi_unmounter_tear_down(u, e)
        });
        kcsi_unmounter_free(u);
    }
    f.clean();
});
