//! Runs one case: its own kubelet and proxy, a deadline over the whole case, clean-up whatever
//! happened, and the RPCs it made (so a failure shows the call that went wrong).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::case::{Case, End};
use super::ctx::Ctx;
use super::facts::Facts;
use super::owned::OwnedDriver;
use crate::fault_proxy::{Event, Fault};
use crate::wire::code_name;

/// The deadline of each call in a case that waits for one to time out.
const SHORT_DEADLINE: Duration = Duration::from_secs(2);

/// One call as the case's proxy saw it.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub method: String,
    pub request: String,
    /// `None` until answered, then the gRPC code, or `Some(None)` when no answer came.
    pub code: Option<Option<i32>>,
    pub message: String,
    pub response: String,
}

impl Exchange {
    pub fn answer(&self) -> String {
        match self.code {
            None => "none yet (the case ended first)".into(),
            Some(None) => format!("no answer ({})", self.message),
            Some(Some(0)) => format!("OK {}", self.response),
            Some(Some(c)) => format!("{} {:?}", code_name(c), self.message),
        }
    }
}

pub enum Verdict {
    Pass(String),
    Fail {
        what: String,
        breaks: &'static str,
        /// The last call that did not answer OK, else the last call.
        rpc: Option<Exchange>,
    },
    Skip(String),
}

pub struct CaseResult {
    pub name: &'static str,
    pub checks: &'static str,
    pub verdict: Verdict,
    pub duration: Duration,
    pub exchanges: Vec<Exchange>,
    /// What the driver left mounted and clean-up unmounted.
    pub cleaned: Vec<String>,
}

/// What the run was asked for, the same for every case.
pub struct Settings {
    /// The deadline of each call.
    pub rpc: Duration,
    /// The deadline of each case.
    pub case: Duration,
    /// Mount options the driver says it honours (`--mount-option`).
    pub mount_options: Vec<String>,
    /// The driver's CSIDriver sets seLinuxMount: true (`--selinux-mount`).
    pub selinux_mount: bool,
    /// Faults for every case's proxy (`--fault`).
    pub faults: Vec<Fault>,
    /// The driver's process, when the suite runs it (`--driver-command`).
    pub driver: Option<Arc<OwnedDriver>>,
}

/// Runs `case`; `Err` when a signal interrupted it (after its clean-up).
pub async fn run(
    case: &'static Case,
    facts: &Arc<Facts>,
    socket: &Path,
    settings: &Settings,
) -> Result<CaseResult, CaseResult> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut all = settings.faults.clone();
    for f in case.faults {
        match f.parse() {
            Ok(f) => all.push(f),
            Err(e) => unreachable!("the case table's fault {f:?}: {e}"),
        }
    }
    let rpc = if case.short_deadline {
        settings.rpc.min(SHORT_DEADLINE)
    } else {
        settings.rpc
    };
    let start = Instant::now();
    let mut ctx = match Ctx::new(facts.clone(), case.name, socket, all, rpc, tx) {
        Ok(mut c) => {
            c.mount_options = settings.mount_options.clone();
            c.selinux_mount = settings.selinux_mount;
            c.driver = settings.driver.clone();
            c
        }
        Err(what) => {
            return Ok(result(
                case,
                Verdict::Fail {
                    what,
                    breaks: "nothing of the driver's: the suite could not set up the case",
                    rpc: None,
                },
                start,
                Vec::new(),
                Vec::new(),
            ))
        }
    };
    let mut interrupted = false;
    let outcome = tokio::select! {
        r = tokio::time::timeout(settings.case, (case.run)(&mut ctx)) => r.ok(),
        _ = tokio::signal::ctrl_c() => { interrupted = true; None }
    };
    let duration = start.elapsed();
    let exchanges = exchanges(&mut rx).await;
    let cleaned = tokio::time::timeout(settings.case, ctx.clean_up())
        .await
        .unwrap_or_else(|_| vec!["clean-up did not finish within the case deadline".into()]);
    drop(ctx);
    let verdict = match outcome {
        Some(Ok(note)) => Verdict::Pass(note),
        Some(Err(End::Skip(why))) => Verdict::Skip(why),
        Some(Err(End::Fail(f))) => Verdict::Fail {
            what: f.what,
            breaks: f.breaks,
            rpc: culprit(&exchanges),
        },
        None if interrupted => Verdict::Fail {
            what: "interrupted by a signal".into(),
            breaks: "nothing: the run was stopped",
            rpc: culprit(&exchanges),
        },
        None => Verdict::Fail {
            what: format!(
                "the case did not finish within {:?} although each call has a {rpc:?} deadline",
                settings.case
            ),
            breaks: "the kubelet gives each CSI call a deadline (pkg/volume/csi/csi_plugin.go \
                     csiTimeout) and must get on with its other volumes",
            rpc: culprit(&exchanges),
        },
    };
    let mut r = result(case, verdict, start, exchanges, cleaned);
    r.duration = duration;
    if interrupted {
        Err(r)
    } else {
        Ok(r)
    }
}

fn result(
    case: &'static Case,
    verdict: Verdict,
    start: Instant,
    exchanges: Vec<Exchange>,
    cleaned: Vec<String>,
) -> CaseResult {
    CaseResult {
        name: case.name,
        checks: case.checks,
        verdict,
        duration: start.elapsed(),
        exchanges,
        cleaned,
    }
}

/// The calls the case's proxy reported, each request paired with its answer.
async fn exchanges(rx: &mut mpsc::UnboundedReceiver<Event>) -> Vec<Exchange> {
    let mut out: Vec<Exchange> = Vec::new();
    // A call given up on is reported once the proxy sees the cancel: wait for it briefly.
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(20), rx.recv()).await {
        match e {
            Event::Request { method, text } => out.push(Exchange {
                method,
                request: text,
                code: None,
                message: String::new(),
                response: String::new(),
            }),
            Event::Response {
                method,
                code,
                message,
                text,
                ..
            } => {
                if let Some(x) = out
                    .iter_mut()
                    .rev()
                    .find(|x| x.method == method && x.code.is_none())
                {
                    x.code = Some(code);
                    x.message = message;
                    x.response = text;
                }
            }
            Event::Fault { .. } => {}
        }
    }
    out
}

fn culprit(x: &[Exchange]) -> Option<Exchange> {
    x.iter()
        .rev()
        .find(|x| x.code != Some(Some(0)))
        .or(x.last())
        .cloned()
}
